"""Signals and processes that outlive their parent: a stopped writer, launcher or prepare leaves
no half-written file, no orphan, and the run resumable."""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from deepnet_fairseq import processes
from deepnet_fairseq.storage import directories as workdir
from support import PY, REPO, process_alive, process_cmdline, wait_for


def test_the_lock_is_held_by_a_child_that_outlives_its_launcher(tmp_path):
    """The trainer inherits the lock: while an orphaned trainer runs, no second one starts."""
    run_dir = workdir.make_dirs(str(tmp_path / "run"))
    child = ("import sys, time; from deepnet_fairseq import processes\n"
             "from deepnet_fairseq.storage import directories as workdir\n"
             "with workdir.RunLock(sys.argv[1]) as lock:\n"
             "    processes.run_forwarding(['sleep', '30'], {}, pass_fds=(lock.fd,))\n")
    proc = subprocess.Popen([sys.executable, "-c", child, run_dir])
    # started: the child has exec'd `sleep` (its parent-death signal is set before the exec)
    wait_for(lambda: any(process_cmdline(pid).startswith("sleep ") for pid in _children(proc.pid)),
             "sleep under the launcher", timeout=20, procs=[proc])
    sleeper = _children(proc.pid)
    proc.kill()  # SIGKILL: no handler runs in the launcher
    proc.wait()
    # the parent-death signal stops the child; until it is gone it holds the lock
    deadline = time.time() + 10
    while time.time() < deadline and any(process_alive(pid) for pid in sleeper):
        time.sleep(0.1)
    assert sleeper and not any(process_alive(pid) for pid in sleeper), "the child outlived its launcher"
    with workdir.RunLock(run_dir):
        pass


def _children(pid):
    out = subprocess.run(["ps", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    pairs = [line.split() for line in out.splitlines()]
    return [int(p) for p, parent in pairs if int(parent) == pid]


# a child that gets SIGTERM while it writes the averaged checkpoint (torch.save is wrapped to
# send it after the first bytes, so the signal arrives mid-write every time)
KILLED_MID_WRITE = """
import os, signal, sys, torch
from deepnet_fairseq import average_checkpoints
real_save = torch.save
def save(obj, out, *args, **kwargs):
    out.write(b"partial")
    out.flush()
    print(sorted(os.listdir(os.path.dirname(sys.argv[-1]))), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    real_save(obj, out, *args, **kwargs)
torch.save = save
average_checkpoints.cli_main(sys.argv[1:])
"""


def test_sigterm_while_writing_removes_the_temporary(tiny_checkpoint, tmp_path):
    shutil.copyfile(tiny_checkpoint, tmp_path / "in.pt")
    out = tmp_path / "avg.pt"
    proc = subprocess.run([PY, "-c", KILLED_MID_WRITE, "--inputs", str(tmp_path / "in.pt"),
                           "--output", str(out)], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert ".tmp-avg.pt." in proc.stdout  # the temporary was there while it wrote
    assert sorted(os.listdir(tmp_path)) == ["in.pt"]  # no output, no temporary
    assert "Traceback" not in proc.stderr


def test_output_is_logged_live_and_a_signal_is_passed_on(tmp_path):
    logs = [str(tmp_path / "attempt.log"), str(tmp_path / "train.log")]
    seen = {}

    def preempt():  # what a scheduler does at the time limit, once the run has logged a line
        deadline = time.time() + 20
        while time.time() < deadline and "first" not in seen.setdefault("log", ""):
            time.sleep(0.05)
            seen["log"] = open(logs[1]).read() if os.path.exists(logs[1]) else ""
        os.kill(os.getpid(), signal.SIGTERM)

    child = ("import signal, sys, time\n"
             "signal.signal(signal.SIGTERM, lambda *a: (print('got SIGTERM'), sys.exit(143)))\n"
             "print('first')\ntime.sleep(30)\nprint('never')\n")
    threading.Thread(target=preempt, daemon=True).start()
    start = time.time()
    code, signum = processes.run_forwarding([sys.executable, "-c", child], dict(os.environ), logs)
    assert "first" in seen["log"]  # in the log while the child was still running
    assert (code, signum) == (143, signal.SIGTERM) and time.time() - start < 20
    for path in logs:
        assert open(path).read() == "first\ngot SIGTERM\n"
    # our own handler is restored afterwards
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


# A child that leaves a process of its own running in another session (as torchrun's workers
# are, after a SIGKILL of torchrun): that process prints its pid, then says through a named
# pipe that it has (the child waits for it there), and the child dies.
LEAVES_ONE = ("mkfifo {ready}; setsid bash -c 'echo $$; echo > {ready}; exec sleep 300' & "
              "read < {ready}; kill -9 $$")
# each launcher of processes.py (the functions that start a child: ``_start``'s callers)
LAUNCHERS = {
    "run_forwarding": "processes.run_forwarding(CMD, dict(os.environ), [LOG])",
    "run_forwarding without logs": "processes.run_forwarding(CMD, dict(os.environ))",
    "run_many": "processes.run_many([CMD], dict(os.environ), [LOG], 1, lambda i, c: True)",
}


def test_each_launcher_of_processes_is_tested_for_what_its_child_leaves():
    import ast

    tree = ast.parse(open(processes.__file__, encoding="utf-8").read())
    starting = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                and any(isinstance(c, ast.Call) and getattr(c.func, "id", "") == "_start"
                        for c in ast.walk(f))}
    assert starting == {name.split()[0] for name in LAUNCHERS}


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_a_launcher_ends_what_its_child_left_running(tmp_path, launcher):
    """The child is gone: what it left in a session of its own (out of reach of its process
    group) is ended, the launcher returns instead of reading a pipe the orphan holds, and it
    says so, in the log and on stderr."""
    log = tmp_path / "child.log"
    out = tmp_path / "launcher.out"
    leaves_one = LEAVES_ONE.format(ready=shlex.quote(str(tmp_path / "ready")))
    script = (f"import os, sys\nfrom deepnet_fairseq import processes\n"
              f"CMD, LOG = ['bash', '-c', {leaves_one!r}], {str(log)!r}\n"
              f"print({LAUNCHERS[launcher]}, flush=True)\n")
    errors = tmp_path / "launcher.err"
    with open(out, "w") as stdout, open(errors, "w") as stderr:  # files: the orphan holds them
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=stdout,
                                stderr=stderr, env={**os.environ, "PYTHONPATH": REPO})
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    finally:
        text = (log.read_text() if log.exists() else "") + out.read_text()
        left = [int(word) for word in text.split() if word.isdigit()][:1]
        for pid in left:  # whatever the outcome, nothing left behind by the test
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
    err = errors.read_text()
    assert proc.returncode == 0, f"the launcher did not return: {err[-2000:]}"
    assert left and not process_alive(left[0])
    said = (f"deepnet_fairseq: bash ended (killed by SIGKILL) and left 1 of its processes "
            f"running (pids {left[0]}): ended them")
    if "without logs" not in launcher:
        assert said in log.read_text()
    if launcher.startswith("run_forwarding"):  # run_many's callers report from the logs
        assert said in err
