"""Starting the programs a tool runs (fairseq-train, fairseq-preprocess, fairseq-generate) so
that nothing is lost or left behind: their output logged line by line as it comes, signals
passed on to their whole process group, and the child killed with its launcher. The recipes'
runner, the GPU check and the depth study all run their programs through here.

Nothing a child starts outlives it either, though a program may start processes in sessions
of their own, out of reach of its process group (torchrun does, for its workers). Each child
runs in a *session* of its launcher: an entry ``PID:TOKEN`` (the launcher's pid, a token new
for each child) in the environment variable ``SESSION``, which every process started under the
child inherits. When the child has ended, its launcher ends what is left of its session
(``end_session``: the processes whose environment holds the entry, wherever they were
re-parented). And a worker started under the child (``die_with_launcher``, the first thing
``fairseq_train_compat`` does) asks Linux for SIGTERM when its parent dies, then ends at once
if the launcher is no longer among its ancestors: its parent died before it could ask.
"""

import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from .storage.fileio import open_no_follow

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
KILL_AFTER_S = 20  # after passing a signal on, SIGKILL what is left after this long
SESSION_END_S = 5  # a session's processes left after its child: SIGTERM, SIGKILL this later
PR_SET_PDEATHSIG = 1  # linux/prctl.h
SESSION = "DEEPNET_FAIRSEQ_SESSION"  # "PID:TOKEN ..." : the launchers a process runs under

EXIT = {"ok": 0, "failed": 1, "refused": 2, "diverged": 3, "source-blind": 4}
"""The exit statuses of the recipes' steps and tools, one table for those that return them and
those that read them: failed (a program, the disk), refused (a setting, a directory or a record
the step may not use: one line, nothing done), diverged (training ended without a usable
model), source-blind (training stopped: the model does not read its source,
``STOP_SOURCE_BLIND``); and, stopped by a signal, the shell's 128 + its number
(``interrupted``)."""
ENDING = {code: name for name, code in EXIT.items()}
"""An exit status's name (``EXIT`` read backwards)."""
FINISHED = ("ok", "diverged", "source-blind")
"""The statuses of a run that training again would not change: the next launch skips it
(``RETRY=1`` trains it again); a sweep records it and goes on."""


def interrupted(signum: int) -> int:
    """The exit status of a step stopped by signal ``signum``."""
    return 128 + signum


def signal_of(code: int) -> Optional[int]:
    """The signal an exit status says its step was stopped by, or None."""
    return code - 128 if code >= 128 else None


def die_with_parent(parent: int) -> None:
    """This process gets SIGTERM when its parent ``parent`` dies, even by SIGKILL (Linux's
    parent-death signal); if the parent is already gone, now."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the launcher's own handlers still forward
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _ancestors(pid: int) -> List[int]:
    """PID's parent, its parent's parent, ... up to the first process (from /proc)."""
    found: List[int] = []
    while pid > 1 and len(found) < 4096:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                pid = int(stat.read().rsplit(b")", 1)[1].split()[1])  # the name may hold ")"
        except (OSError, ValueError, IndexError):
            break
        found.append(pid)
    return found


def die_with_launcher() -> None:
    """For a worker started under a launcher's child by a program that starts its processes in
    sessions of their own (torchrun): SIGTERM when its parent dies, as ``die_with_parent``; and
    now if its parent died already. That is told by its launcher (the last ``SESSION`` entry):
    while the chain of parents is whole, the launcher is one of its ancestors; a parent that
    died re-parented this process out of that chain (to init). Without a launcher (torchrun
    started by hand) the parent is taken as it is now: only a death before this call, while
    the interpreter started, goes unseen."""
    launchers = os.environ.get(SESSION, "").split()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the launcher still ends its session
        return
    if not launchers or not launchers[-1].split(":")[0].isdigit():
        return
    launcher = int(launchers[-1].split(":")[0])
    if launcher not in _ancestors(os.getpid()):
        try:  # the parent's output pipe may have no reader left
            print(f"deepnet_fairseq: this worker's parent ended before it could start (its "
                  f"launcher, pid {launcher}, is no longer its ancestor): stopping",
                  file=sys.stderr, flush=True)
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)


def session_processes(entry: str) -> List[int]:
    """The processes, other than this one, started in the session ENTRY (``PID:TOKEN``): whose
    environment, as it was when they started, lists it in ``SESSION``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                variables = handle.read().split(b"\0")
        except OSError:  # ended meanwhile, or another user's
            continue
        prefix = f"{SESSION}=".encode()
        if any(v.startswith(prefix) and entry.encode() in v[len(prefix):].split()
               for v in variables):
            found.append(int(name))
    return found


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"  # a zombie has ended
    except (OSError, IndexError):
        return False


def end_session(entry: str, grace_s: float = SESSION_END_S) -> List[int]:
    """End what is left of session ENTRY once its child has ended: SIGTERM, then SIGKILL what
    still runs GRACE_S later. Returns the pids found running."""
    ended: List[int] = []
    deadline = None
    for _ in range(1000):  # a process of the session may start another while we look
        left = [pid for pid in session_processes(entry) if _running(pid)]
        if not left:
            break
        deadline = deadline or time.time() + grace_s
        late = time.time() > deadline
        for pid in left:
            if pid not in ended:
                ended.append(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL if late else signal.SIGTERM)
        time.sleep(0.05)
    return ended


def _start(cmd: List[str], env: Mapping[str, str], **popen) -> Tuple[subprocess.Popen, str]:
    """CMD started in its own session (its process group and ``SESSION`` entry), killed with
    this launcher; returns it and its entry, for ``end_session`` once it has ended."""
    entry = f"{os.getpid()}:{secrets.token_hex(8)}"
    outer = env.get(SESSION, "")  # a launcher under another: both end what is left
    env = {**env, "PYTHONUNBUFFERED": "1", SESSION: f"{outer} {entry}".strip()}
    return subprocess.Popen(cmd, env=env, start_new_session=True,
                            preexec_fn=_dies_with_parent(os.getpid()), **popen), entry


def _ended_message(cmd: List[str], code: int, pids: List[int]) -> str:
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    return (f"deepnet_fairseq: {os.path.basename(cmd[0])} ended ({how}) and left {len(pids)} "
            f"of its processes running (pids {', '.join(map(str, pids))}): ended them\n")


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


# The signals received inside signals_interrupt blocks, kept beside the exception: a handler
# runs wherever the main thread is, and where that is a __del__ or a finalizer (a pipe closed
# while a worker starts), Python prints "Exception ignored ..." and goes on, so the Interrupted
# raised there is lost. The record is not: raise_if_interrupted raises it again.
_RECEIVED: List[int] = []
_BLOCKS = [0]  # signals_interrupt blocks open (nested: the quickstart's steps)


def raise_if_interrupted() -> None:
    """Raise Interrupted for a signal received in a signals_interrupt block whose exception the
    code it landed in swallowed: called where work starts (each worker of a parallel stage)
    and when the block ends, so that such a signal still ends the step as interrupted."""
    if _RECEIVED:
        raise Interrupted(_RECEIVED[0])


@contextlib.contextmanager
def signals_interrupt():
    """SIGTERM and SIGHUP raise Interrupted inside the block, however the code they land in
    treats exceptions (``raise_if_interrupted``); the caller's handlers come back after it (a
    test, a notebook calling in)."""
    def interrupt(signum, _frame):
        _RECEIVED.append(signum)
        raise Interrupted(signum)

    previous = {signum: signal.signal(signum, interrupt)
                for signum in (signal.SIGTERM, signal.SIGHUP)}
    _BLOCKS[0] += 1
    try:
        yield
        raise_if_interrupted()  # the block ran on as if no signal had come
    except Interrupted:
        raise
    except BaseException as err:  # another failure on the way out of a swallowed signal
        if _RECEIVED:
            raise Interrupted(_RECEIVED[0]) from err
        raise
    finally:
        _BLOCKS[0] -= 1
        if not _BLOCKS[0]:
            _RECEIVED.clear()
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
    (``_dies_with_parent``); once CMD has ended, what it left running (torchrun's workers,
    after a SIGKILL of torchrun) is ended (``end_session``), saying so on stderr and in the
    logs. ``pass_fds``: descriptors CMD inherits (the run's lock). ``echo``
    sees each line; when it returns True, CMD is stopped (SIGTERM, SIGKILL KILL_AFTER_S later)
    as if a signal had come, but it is not counted as received. Returns (exit code, signal
    received or None).
    """
    proc: List[subprocess.Popen] = []
    stopper = _Stopper(lambda: [p.pid for p in proc])
    received = stopper.received
    left: List[int] = []

    def end_when_it_ends(child: subprocess.Popen, entry: str) -> None:
        # in a thread: what CMD left running holds its output pipe, which the loop below
        # would read forever
        child.wait()
        left.extend(end_session(entry))

    with stopper.installed():
        pipe = subprocess.PIPE if logs is not None else None
        child, entry = _start(cmd, env, stdout=pipe, stderr=subprocess.STDOUT if pipe else None,
                              pass_fds=pass_fds)
        proc.append(child)
        ender = threading.Thread(target=end_when_it_ends, args=(child, entry), daemon=True)
        ender.start()
        if received:
            stopper.kill(received[0])
        outs = [open_no_follow(path, "ab") for path in logs] if logs is not None else []
        try:
            for line in (child.stdout if logs is not None else ()):
                for out in outs:
                    out.write(line)
                    out.flush()
                if echo(line.decode("utf-8", "replace")) and not stopper.stopping:
                    stopper.stop(signal.SIGTERM)
            code = child.wait()
            ender.join()
            if left:  # said where the user looks: the logs and the terminal
                message = _ended_message(cmd, code, left)
                for out in outs:
                    out.write(message.encode())
                print(message, end="", file=sys.stderr, flush=True)
        finally:
            for out in outs:
                out.close()
    if not received and not stopper.stopping and code < 0 and -code in FORWARDED:
        received.append(-code)  # the processes themselves were signalled (a scheduler)
    return code, (received[0] if received else None)


def run_many(cmds: List[List[str]], env: Mapping[str, str], logs: List[str], at_once: int,
             finished: Callable[[int, int], bool], poll_s: float = 0.05) -> Optional[int]:
    """Run CMDS, up to AT_ONCE at a time, in their order; each in its own session, its output
    appended to its entry of LOGS as it comes, killed with its launcher, what it left running
    ended once it has ended (as ``run_forwarding``).

    ``finished(index, code)`` is called in this thread as each ends; when it returns False
    (a failure), no further command starts and the running ones get SIGTERM. SIGTERM / SIGINT
    / SIGHUP received meanwhile are passed on to every running command's process group and no
    further one starts; what still runs KILL_AFTER_S later is killed. Returns the signal
    received, or None.
    """
    running: Dict[int, Tuple[subprocess.Popen, str]] = {}
    stopper = _Stopper(lambda: [p.pid for p, _ in running.values()])
    received = stopper.received
    with stopper.installed():
        try:
            waiting = list(range(len(cmds)))
            while waiting or running:
                while waiting and len(running) < at_once and not stopper.stopping:
                    index = waiting.pop(0)
                    with open_no_follow(logs[index], "ab") as log:
                        running[index] = _start(cmds[index], env, stdout=log,
                                                stderr=subprocess.STDOUT)
                    if stopper.stopping:  # a signal came while it started
                        stopper.kill(received[0] if received else signal.SIGTERM)
                for index, (proc, entry) in list(running.items()):
                    code = proc.poll()
                    if code is None:
                        continue
                    del running[index]
                    left = end_session(entry)
                    if left:
                        with open_no_follow(logs[index], "ab") as log:
                            log.write(_ended_message(cmds[index], code, left).encode())
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
