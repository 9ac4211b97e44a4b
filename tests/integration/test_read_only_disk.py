"""Every output of every tool into a read-only file system, for real (issue: recipes safe by
construction; the injected EROFS: unit/test_hostile_outputs.py). Each case runs the tool in a
child process with a mount namespace of its own, in which an empty tmpfs is mounted read-only
on the output's directory: the kernel itself answers EROFS. Root does that directly; another
user inside a user namespace of its own, where it is root. The mount dies with the child, so
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

# The child: namespaces and the mount first, while it is one thread (unshare with a user
# namespace refuses a threaded process), then the tool, in-process, as the unit table calls it.
CHILD = r"""
import ctypes, json, os, sys

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_REC, MS_PRIVATE = 1, 1 << 14, 1 << 18
libc = ctypes.CDLL(None, use_errno=True)
where, tests, spec, argv = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])


def check(result, what):
    if result != 0:
        print(json.dumps(["setup", f"{what}: {os.strerror(ctypes.get_errno())}"]))
        sys.exit(0)


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
sys.path.insert(0, tests)
from hostile_tools import call

print(json.dumps(list(call(spec, argv))))
"""


def in_read_only_directory(out, spec, argv):
    """(status, stderr) of the tool run with OUT a read-only file system."""
    proc = subprocess.run([sys.executable, "-c", CHILD, str(out), TESTS, spec, json.dumps(argv)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result[0] == "setup":  # no mount namespaces here at all: an environment without them
        pytest.skip(f"cannot mount a read-only file system here ({result[1]}); the injected "
                    "EROFS of unit/test_hostile_outputs.py still runs")
    return result


@pytest.fixture
def fixtures(toy_data, tiny_checkpoint):
    return {"data": toy_data, "checkpoint": tiny_checkpoint}


@pytest.mark.parametrize("output", TABLE, ids=lambda o: f"{o.tool}{o.option}")
def test_a_read_only_file_system_is_one_line(tmp_path, fixtures, output):
    inputs, out = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    out.mkdir()
    argv = output.argv(inputs, fixtures, str(out / ("result" if output.directory else output.name)))
    status, said = in_read_only_directory(out, output.main, argv)
    lines = said.strip().splitlines()
    assert status == 1, said
    assert "Traceback" not in said
    assert lines[-1].startswith(f"error: {out}") and os.strerror(errno.EROFS) in lines[-1], \
        lines[-1]
    assert list(out.iterdir()) == []  # the mount is gone with the child; nothing under it
