"""Every output of every tool into a read-only file system, for real (issue: recipes safe by
construction; the injected EROFS: unit/test_hostile_outputs.py). Each case runs the tool in a
fork of one child process with a mount namespace of its own, in which an empty tmpfs is
mounted read-only on the output's directory: the kernel itself answers EROFS. Root does that directly; another
user inside a user namespace of its own, where it is root. The mount dies with the fork, so
the directory is as it was afterwards. Expected, as for every disk error: status 1, one line
naming the path, no traceback."""

import errno
import json
import os
import subprocess
import sys

import pytest

from hostile_tools import TABLE
from support import REPO

TESTS = os.path.join(REPO, "tests")

# The child: it imports the tools' heavy dependencies once (torch, fairseq: seconds a process),
# then forks once a case. Each fork is one thread (fork copies only the calling thread), as
# unshare with a user namespace requires: namespaces and the mount first, then the tool,
# in-process, as the unit table calls it; its answer is one JSON line on the shared stdout.
CHILD = r"""
import ctypes, json, os, sys

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_REC, MS_PRIVATE = 1, 1 << 14, 1 << 18
libc = ctypes.CDLL(None, use_errno=True)
tests, cases = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, tests)
import fairseq, torch  # noqa: F401  (imported once, for every fork)
from hostile_tools import call


def check(result, what):
    if result != 0:
        print(json.dumps(["setup", f"{what}: {os.strerror(ctypes.get_errno())}"]), flush=True)
        os._exit(0)


def one_case(where, spec, argv):
    if libc.unshare(CLONE_NEWNS) != 0:  # not root: become root of a user namespace of our own
        uid, gid = os.getuid(), os.getgid()
        check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                           ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
    # our mounts must not reach the namespace we came from
    check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    check(libc.mount(b"tmpfs", where.encode(), b"tmpfs", MS_RDONLY, None), "mount -o ro tmpfs")
    print(json.dumps(list(call(spec, argv))), flush=True)


for where, spec, argv in cases:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            one_case(where, spec, argv)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
"""


@pytest.fixture(scope="module")
def read_only_results(toy_data, tiny_checkpoint, tmp_path_factory):
    """{case id: (output directory, [status, stderr] or ["setup", why])}: every case of TABLE
    run with its output directory a read-only file system, in one child process (one import of
    torch and fairseq for all of them, each case in a fork of its own)."""
    fixtures = {"data": toy_data, "checkpoint": tiny_checkpoint}
    cases, outs = [], {}
    for output in TABLE:
        case = tmp_path_factory.mktemp("read-only")
        inputs, out = case / "in", case / "out"
        inputs.mkdir()
        out.mkdir()
        argv = output.argv(inputs, fixtures,
                           str(out / ("result" if output.directory else output.name)))
        cases.append([str(out), output.main, argv])
        outs[case_id(output)] = out
    proc = subprocess.run([sys.executable, "-c", CHILD, TESTS, json.dumps(cases)],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]
    assert len(answers) == len(cases), (proc.stdout[-3000:], proc.stderr[-3000:])
    return {key: (out, answer) for (key, out), answer in zip(outs.items(), answers)}


def case_id(output) -> str:
    return f"{output.tool}{output.option}"


@pytest.mark.parametrize("output", TABLE, ids=case_id)
def test_a_read_only_file_system_is_one_line(read_only_results, output):
    out, result = read_only_results[case_id(output)]
    if result[0] == "setup":  # no mount namespaces here at all: an environment without them
        pytest.skip(f"cannot mount a read-only file system here ({result[1]}); the injected "
                    "EROFS of unit/test_hostile_outputs.py still runs")
    status, said = result
    lines = said.strip().splitlines()
    assert status == 1, said
    assert "Traceback" not in said
    assert lines[-1].startswith(f"error: {out}") and os.strerror(errno.EROFS) in lines[-1], \
        lines[-1]
    assert list(out.iterdir()) == []  # the mount is gone with the fork; nothing under it
