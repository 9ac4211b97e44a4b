"""Starting the programs a tool runs (fairseq-train, fairseq-preprocess, fairseq-generate) so
that nothing is lost or left behind: their output logged line by line as it comes, signals
passed on to their whole process group, and the child killed with its launcher. The recipes'
runner, the GPU check and the depth study all run their programs through here."""

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from typing import Callable, List, Mapping, Optional, Tuple

from .storage.fileio import open_no_follow

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
KILL_AFTER_S = 20  # after passing a signal on, SIGKILL what is left after this long
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """This process gets SIGTERM when its parent ``parent`` dies, even by SIGKILL (Linux's
    parent-death signal); if the parent is already gone, now."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the launcher's own handlers still forward
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _dies_with_parent(parent: int) -> Callable[[], None]:
    """A preexec_fn: the child dies with its launcher (CMD runs in its own session, so nothing
    else would reach it)."""
    return lambda: die_with_parent(parent)


class Interrupted(Exception):
    """A signal (SIGTERM, SIGHUP) turned into an exception, so that in-process steps end
    through their cleanup (temporaries removed) as they do on Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_interrupt():
    """SIGTERM and SIGHUP raise Interrupted inside the block; the caller's handlers come back
    after it (a test, a notebook calling in)."""
    def interrupt(signum, _frame):
        raise Interrupted(signum)

    previous = {signum: signal.signal(signum, interrupt)
                for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class _Stopper:
    """Stopping the process groups of GROUPS() (their leaders' pids): a signal received is
    passed on to each, and what still runs KILL_AFTER_S later is killed. ``installed()``
    makes SIGTERM / SIGINT / SIGHUP do that while it is active; ``stop`` does it without a
    signal (a failure, a diverged run), which is not counted as received."""

    def __init__(self, groups: Callable[[], List[int]]):
        self.groups = groups
        self.received: List[int] = []
        self.stopping = False

    def kill(self, signum) -> None:
        for pid in self.groups():
            try:
                os.killpg(pid, signum)
            except ProcessLookupError:
                pass

    def stop(self, signum) -> None:
        self.kill(signum)
        if not self.stopping:
            self.stopping = True
            timer = threading.Timer(KILL_AFTER_S, self.kill, (signal.SIGKILL,))
            timer.daemon = True
            timer.start()

    def _forward(self, signum, _frame) -> None:
        self.received.append(signum)
        self.stop(signum)

    @contextlib.contextmanager
    def installed(self):
        # handlers first: a signal that comes while a process starts is passed on, not lost
        previous = {signum: signal.signal(signum, self._forward) for signum in FORWARDED}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def run_forwarding(cmd: List[str], env: Mapping[str, str], logs: Optional[List[str]] = None,
                   echo: Callable[[str], Optional[bool]] = lambda line: None,
                   pass_fds: Tuple[int, ...] = ()) -> Tuple[int, Optional[int]]:
    """Run CMD; with LOGS, append its output to each of them as it comes (not at the end).

    SIGTERM / SIGINT / SIGHUP received meanwhile are passed on to CMD's process group (CMD
    runs in its own session, so a terminal's Ctrl-C reaches it once, through here), and what
    still runs KILL_AFTER_S later is killed; if the launcher itself is killed, CMD gets SIGTERM
    (``_dies_with_parent``). ``pass_fds``: descriptors CMD inherits (the run's lock). ``echo``
    sees each line; when it returns True, CMD is stopped (SIGTERM, SIGKILL KILL_AFTER_S later)
    as if a signal had come, but it is not counted as received. Returns (exit code, signal
    received or None).
    """
    proc: List[subprocess.Popen] = []
    stopper = _Stopper(lambda: [p.pid for p in proc])
    received = stopper.received
    with stopper.installed():
        pipe = subprocess.PIPE if logs is not None else None
        proc.append(subprocess.Popen(cmd, stdout=pipe, stderr=subprocess.STDOUT if pipe else None,
                                     env={**env, "PYTHONUNBUFFERED": "1"},
                                     start_new_session=True, pass_fds=pass_fds,
                                     preexec_fn=_dies_with_parent(os.getpid())))
        if received:
            stopper.kill(received[0])
        if logs is not None:
            outs = [open_no_follow(path, "ab") for path in logs]
            try:
                for line in proc[0].stdout:
                    for out in outs:
                        out.write(line)
                        out.flush()
                    if echo(line.decode("utf-8", "replace")) and not stopper.stopping:
                        stopper.stop(signal.SIGTERM)
            finally:
                for out in outs:
                    out.close()
        code = proc[0].wait()
    if not received and not stopper.stopping and code < 0 and -code in FORWARDED:
        received.append(-code)  # the processes themselves were signalled (a scheduler)
    return code, (received[0] if received else None)


def run_many(cmds: List[List[str]], env: Mapping[str, str], logs: List[str], at_once: int,
             finished: Callable[[int, int], bool], poll_s: float = 0.05) -> Optional[int]:
    """Run CMDS, up to AT_ONCE at a time, in their order; each in its own session, its output
    appended to its entry of LOGS as it comes, killed with its launcher (as ``run_forwarding``).

    ``finished(index, code)`` is called in this thread as each ends; when it returns False
    (a failure), no further command starts and the running ones get SIGTERM. SIGTERM / SIGINT
    / SIGHUP received meanwhile are passed on to every running command's process group and no
    further one starts; what still runs KILL_AFTER_S later is killed. Returns the signal
    received, or None.
    """
    running = {}
    stopper = _Stopper(lambda: [p.pid for p in running.values()])
    received = stopper.received
    with stopper.installed():
        try:
            waiting = list(range(len(cmds)))
            while waiting or running:
                while waiting and len(running) < at_once and not stopper.stopping:
                    index = waiting.pop(0)
                    with open_no_follow(logs[index], "ab") as log:
                        running[index] = subprocess.Popen(
                            cmds[index], stdout=log, stderr=subprocess.STDOUT,
                            env={**env, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
                            preexec_fn=_dies_with_parent(os.getpid()))
                    if stopper.stopping:  # a signal came while it started
                        stopper.kill(received[0] if received else signal.SIGTERM)
                for index, proc in list(running.items()):
                    code = proc.poll()
                    if code is None:
                        continue
                    del running[index]
                    if not received and not stopper.stopping and code < 0 and -code in FORWARDED:
                        received.append(-code)  # the processes themselves were signalled
                        stopper.stop(-code)
                    if not finished(index, code) and not stopper.stopping:
                        stopper.stop(signal.SIGTERM)
                if running:
                    time.sleep(poll_s)
        finally:
            stopper.kill(signal.SIGTERM)  # an exception here (in ``finished``): none is left
    return received[0] if received else None
