"""Processes that outlive their parent, and the records they leave: a torchrun worker whose
parent died while it started ends before it imports anything heavy; a launcher ends whatever
its child left running (integration/test_signals.py, slow/test_distributed.py for real
torchrun); a status that says ``running`` after its launcher was killed reads as interrupted,
at every reader of it (the readers found in the sources)."""

import ast
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from deepnet_fairseq import processes
from deepnet_fairseq.storage.records import read_status, write_record
from deepnet_fairseq.recipes.reporting import report
from deepnet_fairseq.recipes.run import runner
from deepnet_fairseq.recipes.spec.settings import resolve
from deepnet_fairseq.recipes.run.commands import method_args, task_args, train_command
from deepnet_fairseq.recipes.run.layout import plan_layout
from deepnet_fairseq.storage import directories as workdir
from support import REPO, process_alive


# ---- a worker whose parent is gone before it could take its identity -----------------------

def _torchrun_module() -> str:
    """The module the recipes' torchrun command runs (2 CPU processes), from the command."""
    cfg = resolve("wmt17", {"DEVICE": "cpu", "NPROC": "2", "SIZE": "smoke",
                            "DEEPNET_WORK": "/nonexistent"}, REPO)
    command = train_command(cfg, plan_layout(cfg, {}), method_args(cfg), task_args(cfg, True))
    assert command[0] == "torchrun", command
    return command[command.index("-m") + 1]


# A stand-in for torchrun: starts the worker and dies (SIGKILL) before the worker's Python
# runs a line -- the worker is held until its parent is gone, then execs, as torchrun's worker
# would be had torchrun been killed while it started (the parent of the worker's exec: init).
ORPHANED_WORKER = """
import os, signal, sys, time
parent = os.getpid()
if os.fork() == 0:
    while os.getppid() == parent:
        time.sleep(0.01)
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_torchrun_worker_whose_parent_died_ends_before_it_imports_torch(tmp_path):
    module = _torchrun_module()
    err = tmp_path / "worker.err"
    env = {**os.environ, "PYTHONPATH": REPO, "TORCHELASTIC_RUN_ID": "test",
           processes.SESSION: f"{os.getpid()}:test"}  # this test is its launcher
    with open(err, "wb") as out:
        subprocess.run([sys.executable, "-c", ORPHANED_WORKER, "-X", "importtime", "-m", module,
                        "/nonexistent-data"], env=env, cwd=REPO, stderr=out, timeout=60)
    deadline = time.time() + 60  # the worker, re-parented to init: done when its stderr closes
    while time.time() < deadline and "import time" not in err.read_text():
        time.sleep(0.05)
    holders = [pid for pid in processes.session_processes(f"{os.getpid()}:test")
               if process_alive(pid)]
    while time.time() < deadline and holders:
        time.sleep(0.1)
        holders = [pid for pid in holders if process_alive(pid)]
    text = err.read_text()
    assert not holders, text[-2000:]
    imported = [line.split("|")[-1].strip() for line in text.splitlines()
                if line.startswith("import time:")]
    assert imported and not [m for m in imported if m.startswith(("torch", "fairseq"))], \
        "the worker imported torch or fairseq before taking its parent's identity"
    assert f"its launcher, pid {os.getpid()}, is no longer its ancestor): stopping" in text


# the worker's side with its parent alive: it goes on, then dies with that parent
LIVE_PARENT = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
time.sleep(float(sys.argv[2]))
os.kill(os.getpid(), signal.SIGKILL)
"""
WORKER = ("import time\nfrom deepnet_fairseq.processes import die_with_launcher\n"
          "die_with_launcher()\nprint('on', flush=True)\ntime.sleep(120)\n")


def test_a_torchrun_worker_with_its_parent_alive_goes_on_and_dies_with_it():
    env = {**os.environ, "PYTHONPATH": REPO, processes.SESSION: f"{os.getpid()}:live"}
    proc = subprocess.run([sys.executable, "-c", LIVE_PARENT, WORKER, "3"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout == "on\n", proc.stderr
    deadline = time.time() + 20
    while time.time() < deadline and processes.session_processes(f"{os.getpid()}:live"):
        time.sleep(0.1)
    assert not [pid for pid in processes.session_processes(f"{os.getpid()}:live")
                if process_alive(pid)], "the worker outlived its parent"


def test_the_package_starts_every_process_in_a_session_of_its_launcher():
    """``processes._start`` is the package's one ``subprocess.Popen`` (what it starts is ended
    with its session); found by reading every source of the package."""
    found = []
    for path in _sources(os.path.join(REPO, "deepnet_fairseq")):
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        for function, node in _calls(tree):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                getattr(node.func, "id", "")
            if name == "Popen":
                found.append((os.path.relpath(path, REPO), function))
    assert found == [("deepnet_fairseq/processes.py", "_start")], found


# ---- a status left "running" by a killed launcher -----------------------------------------

HOLDER = ("import sys, time\nfrom deepnet_fairseq.storage.directories import RunLock\n"
          "lock = RunLock(sys.argv[1], step='train').__enter__()\n"
          "print('held', flush=True)\ntime.sleep(300)\n")


def _holder(run_dir: str) -> subprocess.Popen:
    """A real launcher's lock on RUN_DIR, held by another process until it is killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, run_dir], cwd=REPO,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": REPO})
    assert proc.stdout.readline() == "held\n"
    return proc


def _rename_host(run_dir: str) -> None:
    """The lock file names another host (a launcher on another node of a shared disk)."""
    path = os.path.join(run_dir, workdir.LOCK)
    text = open(path).read().replace(f" on {socket.gethostname()} ", " on node-17 ")
    with open(path, "w") as out:  # the lock is advisory: its holder keeps it
        out.write(text)


# (the lock's state, the status then read, what its reason says)
LOCK_CASES = {
    "held by its launcher": ("held", "running", "attempt 2 started"),
    "its launcher killed (SIGKILL)": ("killed", "interrupted",
                                      "its launcher ended without recording its end"),
    "no lock file": ("none", "interrupted", "no process holds"),
    "free, named by another host": ("elsewhere", "running", "cannot be told here"),
    "held, named by another host": ("held elsewhere", "running", "attempt 2 started"),
}


@pytest.mark.parametrize("case", list(LOCK_CASES))
@pytest.mark.parametrize("recorded", ["running", "ok", "failed", "interrupted"])
def test_a_status_is_read_as_its_runs_lock_says(tmp_path, case, recorded, monkeypatch, capsys):
    lock, expected, reason = LOCK_CASES[case]
    runs = tmp_path / "runs"
    run_dir = workdir.make_dirs(str(runs / "deepnet-1L-1L"))
    write_record(os.path.join(run_dir, "status.json"), "status",
                 {"status": recorded, "reason": "attempt 2 started 2026-01-01", "seed": 1,
                  "method": "deepnet", "encoder_layers": 1, "decoder_layers": 1,
                  "dataset": "wmt17", "label": "deepnet"})
    holder = None if lock == "none" else _holder(run_dir)
    try:
        if "elsewhere" in lock:
            _rename_host(run_dir)
        if lock in ("killed", "elsewhere"):
            holder.kill()
            holder.wait()
        status = read_status(run_dir)
        row = report._row("wmt17", str(runs), "deepnet-1L-1L")  # the report's reader
        runner_status = runner.status_of(run_dir)  # the runner's (train, evaluate, the sweep)
    finally:
        if holder:
            holder.kill()
            holder.wait()
    if recorded != "running":  # only "running" depends on a live launcher
        assert status["status"] == recorded and status["reason"] == "attempt 2 started 2026-01-01"
        return
    assert status["status"] == expected and reason in status["reason"], status
    assert status["reason"].startswith("attempt 2 started 2026-01-01")
    assert (row["status"], row["reason"]) == (status["status"], status["reason"])
    assert runner_status == status
    if expected == "interrupted":
        assert "training again resumes from checkpoint_last.pt" in status["reason"]
    if case == "free, named by another host":
        assert "names host node-17" in status["reason"]


def test_a_probe_of_the_lock_does_not_turn_a_launch_away(tmp_path):
    """Readers probe the lock by taking it for an instant: a launch that meets a probe waits
    for it (RunLock retries) instead of calling the run busy."""
    import fcntl

    run_dir = workdir.make_dirs(str(tmp_path / "run"))
    open(os.path.join(run_dir, workdir.LOCK), "w").close()
    fd = os.open(os.path.join(run_dir, workdir.LOCK), os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # a probe caught mid-way, released a moment later
    try:
        timer = threading.Timer(0.2, os.close, (fd,))
        timer.start()
        with workdir.RunLock(run_dir, step="train"):
            pass
    finally:
        timer.join()


def test_every_reader_of_a_status_reads_it_through_read_status():
    """The doors, found in the sources of the package, benchmarks/ and scripts/: every call
    that reads a status record (``read_record(..., "status")``, or an open, a JSON read or a
    read_json of a path naming status.json) is in ``records.read_status``."""
    readers = {"read_record", "read_json", "open", "load", "loads", "read_text", "read_bytes"}
    found = []
    for root in ("deepnet_fairseq", "benchmarks", "scripts"):
        for path in _sources(os.path.join(REPO, root)):
            tree = ast.parse(open(path, encoding="utf-8").read(), path)
            for function, node in _calls(tree):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                    getattr(node.func, "id", "")
                constants = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}
                kind = node.args[1] if name == "read_record" and len(node.args) > 1 else None
                if name in readers and ("status.json" in constants or (
                        isinstance(kind, ast.Constant) and kind.value == "status")):
                    found.append((os.path.relpath(path, REPO), function, node.lineno))
    assert [(path, function) for path, function, _ in found] == [
        ("deepnet_fairseq/storage/records.py", "read_status")], found


def _sources(root):
    for directory, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.join(directory, name)


def _calls(tree):
    """(the enclosing function's name, call node) for every call in TREE."""
    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                else function
            if isinstance(child, ast.Call):
                yield function, child
            yield from visit(child, inner)
    yield from visit(tree, "")
