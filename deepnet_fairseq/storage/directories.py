"""Directories the recipes create, the only ones they delete, and their locks (the file
layer's half for directories; ``fileio.py`` is the half for files).

Each directory a recipe creates gets a marker file (``MARKER``) at creation. Deleting or
replacing a directory is refused unless it holds that marker, so a mistyped ``DEEPNET_WORK``
(``$HOME``, a shared data folder) can never lose data the recipes did not write. A directory
handed to fairseq (checkpoints, results) is made and marked here first.
"""

import contextlib
import errno
import os
import re
import shutil
from typing import Tuple

from .fileio import MARKER, create_new, naming, refuse_planted_links


class NotOurs(RuntimeError):
    pass


def make_dirs(path: str) -> str:
    """Create PATH and its missing parents, marking each one created here; return PATH. A
    link planted in a directory of the recipes on the way is refused (an OSError naming it):
    it would take PATH, and all that fairseq writes and deletes in it, elsewhere."""
    refuse_planted_links(path)
    path = os.path.abspath(path)
    missing, current = [], path
    while not os.path.isdir(current) and os.path.dirname(current) != current:
        missing.append(current)
        current = os.path.dirname(current)
    for directory in reversed(missing):
        try:
            os.mkdir(directory)
        except FileExistsError:
            continue  # another process (another node) created it first: it marks it
        with create_new(os.path.join(directory, MARKER)) as out:
            out.write("created by the deepnet_fairseq recipes; they may delete this directory\n")
    return path


def is_ours(path: str) -> bool:
    return os.path.isfile(os.path.join(path, MARKER))


def remove_tree(path: str) -> None:
    """Delete PATH if it exists and the recipes created it; refuse otherwise."""
    refuse_planted_links(os.path.abspath(path))  # a planted link at PATH too: named as such
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path) or not is_ours(path):
        raise NotOurs(
            f"refusing to delete {path}: the recipes did not create it (no {MARKER} in it). "
            "Move it away yourself, or choose another DEEPNET_WORK")
    shutil.rmtree(path)


def fresh(path: str) -> str:
    """An empty directory PATH, created by the recipes (an old one of theirs is deleted)."""
    remove_tree(path)
    return make_dirs(path)


@contextlib.contextmanager
def building(path: str):
    """PATH.tmp, empty, for a step to fill and publish; removed if the step fails (an error or
    an interrupt), so that no half-written step remains beside the published ones."""
    tmp = fresh(path + ".tmp")
    try:
        yield tmp
    except BaseException:
        remove_tree(tmp)
        raise


def replace_tree(tmp: str, path: str) -> None:
    """Replace PATH (if the recipes made it; refused otherwise) by the finished TMP, one of
    theirs (its marker goes with it)."""
    if not is_ours(tmp):
        raise NotOurs(f"refusing to move {tmp}: the recipes did not create it (no {MARKER})")
    remove_tree(path)
    os.replace(tmp, path)


def publish(tmp: str, path: str) -> None:
    """``replace_tree``, then mark PATH done."""
    replace_tree(tmp, path)
    create_new(os.path.join(path, ".done")).close()


LOCK = ".lock"
PROBE_RETRIES, PROBE_WAIT_S = 20, 0.05  # a launch waits this long for readers' probes


def lock_state(directory: str, name: str = LOCK) -> Tuple[str, str]:
    """Whether a launcher holds DIRECTORY's lock (``RunLock``), without waiting or writing:
    ("held", its holder line), ("free", the last holder's line: none holds it now), or
    ("unknown", why: another host's lock on a shared file system, which this host may not
    see held; a lock file this process cannot open). Probed with a shared lock taken and
    dropped at once; a launch that meets it retries for a moment (``PROBE_RETRIES``)."""
    import fcntl
    import socket

    path = os.path.join(directory, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return "free", "no lock file"
    except OSError as err:
        return "unknown", f"{path}: {err.strerror}"
    try:
        holder = os.read(fd, 300).decode("utf-8", "replace").strip()
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return "held", holder
    finally:
        os.close(fd)  # drops the probe's lock, if taken
    host = re.match(r"pid [0-9]+ on (\S+) since ", holder)
    if host and host.group(1) != socket.gethostname():
        return "unknown", (f"{path} names host {host.group(1)} ({holder}): a lock held there "
                           f"is not always seen from {socket.gethostname()}")
    return "free", holder


class Busy(RuntimeError):
    """Another process holds the run directory's lock."""


class RunLock:
    """One launcher per run directory, for its whole life.

    An exclusive ``flock`` on ``DIR/.lock``, which names its holder (pid, host, start, step). The
    kernel releases it when every process holding the descriptor has exited, however they
    die, so a killed run never leaves a stale lock; the trainer inherits the descriptor
    (``pass_fds``), so the lock is held while an orphaned trainer still writes checkpoints.
    """

    def __init__(self, directory: str, name: str = LOCK, step: str = "",
                 rule: str = "one step (train or evaluate) at a time per run directory"):
        self.path = os.path.join(directory, name)
        self.step = step  # written beside the holder: a second launch is told what holds it
        self.rule = rule  # what the lock enforces, for the message of a second launch
        self.fd = -1

    def __enter__(self) -> "RunLock":
        import datetime
        import fcntl
        import socket
        import time

        # never through a link planted as DIR/.lock (its target would be truncated below)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
            raise OSError(errno.ELOOP, "a symbolic link where the recipes keep a run's lock: "
                                       "they follow no link there", self.path) from None
        for attempt in range(PROBE_RETRIES + 1):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt < PROBE_RETRIES:  # a reader's probe (``lock_state``) holds it
                    time.sleep(PROBE_WAIT_S)  # for an instant
        else:
            holder = os.read(fd, 300).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise Busy(f"{os.path.dirname(self.path)} is in use by {holder}: {self.rule}. Wait "
                       "for it to finish, or stop it, then launch again") from None
        now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        step = f" ({self.step})" if self.step else ""
        try:
            with naming(self.path):  # a full disk's write names no file
                os.ftruncate(fd, 0)
                os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {now}{step}\n"
                         .encode())
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)  # the kernel drops the lock with the last descriptor
        self.fd = -1
