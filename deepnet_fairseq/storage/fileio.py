"""The plugin's file layer: every file the package writes, replaces or deletes goes through
this module or ``storage/directories.py`` (``tests/unit/test_file_layer.py`` reads the sources
and fails on a direct write anywhere else). What it guarantees:

- an output is never one of the command's inputs nor in an input directory (``check_output``,
  by device and inode); a program's output argument replaces an existing output only with
  ``--force``, and never what is in a directory the recipes made (``check_tool_output``);
- a file appears whole or not at all (``atomic_open`` and what is built on it: a temporary
  beside the target, renamed into place), and a directory at once (``directory_published``);
- a temporary is named for its output and process (``.tmp-[KIND]NAME.PID.XXXX``) and removed
  when its block fails, on SIGTERM / SIGHUP / SIGINT inside ``signals_raise``, and by the next
  writer of the same output once its process is gone (SIGKILL leaves no chance to clean up);
- a link is never written through: logs are opened with ``O_NOFOLLOW`` (``open_no_follow``),
  a new file only ever created (``create_new``), a rename replaces a link, not its target, and
  no path is followed through a link planted in a directory the recipes created
  (``refuse_planted_links``: every writer here, and ``directories.make_dirs``, which makes
  the directories handed to fairseq), nor anywhere inside a directory handed to fairseq
  (``refuse_links_within``: fairseq opens its files by name);
- an OSError of the disk (full, read-only, not permitted) is one line naming the path
  (``describe_os_error``; ``one_line_os_errors`` for the console scripts).

It imports nothing of the plugin (torch only inside ``save_torch``).
"""

import contextlib
import errno
import functools
import io
import json
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading


# the marker file of a directory the recipes created (``directories.make_dirs``): the layer
# writes only into such a directory, or a new file, and follows no link planted in one
MARKER = ".deepnet-recipes"


def refuse_planted_links(path: str) -> None:
    """Refuse ``path`` (an OSError, ELOOP, naming the link) if any of its components is a
    symbolic link inside a directory the recipes created (one holding ``MARKER``): a link
    planted there would send what the layer writes -- and what fairseq writes or deletes in a
    directory handed to it -- elsewhere. A link above the recipes' directories (a DEEPNET_WORK
    that is a link) is the user's own and followed."""
    current = os.path.abspath(path)
    while os.path.dirname(current) != current:
        parent = os.path.dirname(current)
        if os.path.islink(current) and os.path.isfile(os.path.join(parent, MARKER)):
            raise OSError(errno.ELOOP, "a symbolic link in a directory the recipes created: "
                                       "they follow no link there", current)
        current = parent


def refuse_links_within(path: str) -> None:
    """Refuse PATH (an OSError, ELOOP, naming the link) if it is, or passes through, a link
    planted in a directory of the recipes (``refuse_planted_links``), or if any file or
    directory anywhere inside it is a symbolic link. Asked before a directory of the recipes
    (a run's, its checkpoints, the prepared data) is handed to fairseq, which opens and
    overwrites files in it by name: a checkpoint_last.pt linked to another run's would be
    resumed from and written over."""
    refuse_planted_links(path)
    for root, directories, files in os.walk(path):  # not into linked directories: named below
        for name in sorted(directories + files):
            inside = os.path.join(root, name)
            if os.path.islink(inside):
                raise OSError(errno.ELOOP, "a symbolic link in a directory the recipes hand to "
                                           "fairseq: they follow no link there", inside)


class OutputRefused(ValueError):
    """An output a command may not write: one line, status 2 (a usage error), before anything
    is written (``one_line_os_errors``)."""


class OutputIsInput(OutputRefused):
    """An output path that is, lies in, or holds one of the inputs of the same command."""


def check_output(path: str, inputs=()) -> None:
    """Refuse an output that is one of ``inputs`` (the same file, by device and inode, through
    any link or other spelling), lies in an input directory, new or existing (a run's, the
    data's: the command reads what is there, and later commands would read what it added),
    or, an existing directory (which the writer replaces), holds an input."""
    inputs = [given for given in inputs if given and os.path.exists(given)]
    for given in inputs if os.path.exists(path) else ():  # the most precise reason first
        if os.path.samefile(path, given):
            raise OutputIsInput(f"{path} is the input {given}: refusing to write over it; "
                                f"choose another output")
    for given in inputs:
        if os.path.isdir(given) and _within(path, given):
            raise OutputIsInput(f"{path} is in the input directory {given}: refusing to write "
                                f"there; choose another output")
        if os.path.isdir(path) and _within(given, path):
            raise OutputIsInput(f"{path} holds the input {given}: refusing to replace it; "
                                f"choose another output")


def _within(path: str, directory: str) -> bool:
    """Whether ``path`` (resolved; it need not exist) is ``directory`` or lies below it, by
    device and inode."""
    current = os.path.realpath(path)
    while True:
        if os.path.exists(current) and os.path.samefile(current, directory):
            return True
        if os.path.dirname(current) == current:
            return False
        current = os.path.dirname(current)


def add_force_argument(parser, what: str = "an existing output") -> None:
    """The one way a program lets its user replace an existing output (``check_tool_output``)."""
    parser.add_argument("--force", action="store_true",
                        help=f"replace {what} (never an input or a file in an input directory, "
                             f"nor what is in a directory the recipes made)")


def check_tool_output(path: str, inputs=(), force: bool = False, option: str = "--output",
                      directory: bool = False, files=(), given=None) -> None:
    """The rule of every program's output argument OPTION, checked before anything is read or
    written (``OutputRefused``, one line naming PATH):

    - never an input, in an input directory or holding one (``check_output``), even with
      ``force``;
    - in a directory that exists (``check_output_directory``; ``given``: the argument as the
      user gave it, where PATH is a file the program writes below it);
    - an existing output only with ``force`` (an empty ``directory`` holds nothing to lose);
    - even with ``force``, never a file in a directory the recipes made (one holding
      ``MARKER``: their records and checkpoints, written by their own steps) nor such a
      directory itself: the layer writes there only new files.

    ``files``: PATH is a directory the program writes these files of its own naming into (a
    report's table.md): each existing one needs ``force``, and may be replaced in a directory
    the recipes made, since no step but this program's writes files of those names."""
    # a directory of the program's files is not replaced: it may hold inputs (report --out .
    # with --runs ./runs), its files may not be or lie in one
    try:
        for target in [os.path.join(path, name) for name in files] or [path]:
            check_output(target, inputs)
    except OutputIsInput as err:
        raise OutputIsInput(f"{option} {err}") from None
    check_output_directory(path if given is None else given, option)
    if files:
        if os.path.lexists(path) and not os.path.isdir(path):
            raise OutputRefused(f"{option} {path} exists and is not a directory; give the "
                                f"directory to write {', '.join(files)} into")
        for name in files:
            target = os.path.join(path, name)
            if os.path.lexists(target) and not force:
                raise OutputRefused(f"{option} {target} exists; pass --force to replace it, "
                                    f"or choose another {option}")
        return
    if not os.path.lexists(path):
        return
    if directory and os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path):
        return
    if not directory and os.path.isdir(path) and not os.path.islink(path):
        raise OutputRefused(f"{option} {path} is a directory; give the path of the file to write")
    ours = [d for d in (os.path.dirname(os.path.abspath(path)), path)
            if os.path.isfile(os.path.join(d, MARKER))]
    if ours:
        raise OutputRefused(f"{option} {path} {'is' if ours[-1] == path else 'is in'} a "
                            f"directory the recipes made ({MARKER} in {ours[-1]}): only their "
                            f"own steps replace what is there; choose another {option}")
    if not force:
        what = "is a non-empty directory" if os.path.isdir(path) else "exists"
        raise OutputRefused(f"{option} {path} {what}; pass --force to replace it, or choose "
                            f"another {option}")


def check_output_directory(path: str, option: str = "--output") -> None:
    """Refuse (``OutputRefused``) an output argument whose directory is missing, or is not a
    directory: the user's output goes where the user said, into a directory the user made --
    a mistyped parent is not created (the writers below would make it, with all its missing
    parents), nor is a missing one a traceback after the work."""
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(parent):
        return
    existing = parent
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise OutputRefused(f"{option} {path}: {existing} is not a directory; choose another "
                            f"{option}")
    raise OutputRefused(f"{option} {path}: its directory {parent} does not exist; create it "
                        f"(mkdir -p {parent}) or choose another {option}")


# ---- temporaries: one output's, one process's ---------------------------------------------

def temporary_prefix(output: str, kind: str = "") -> str:
    """The name prefix of this process's temporaries for ``output`` (``kind`` tells apart
    temporaries of another sort, e.g. ``ctranslate2-`` for a converted directory)."""
    return f".tmp-{kind}{os.path.basename(output)}.{os.getpid()}."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_temporaries(output: str, kind: str = "") -> list:
    """Remove the temporaries for ``output`` left by processes that no longer run (killed
    before they could clean up); returns their paths. Nothing else matches the pattern."""
    directory = os.path.dirname(os.path.abspath(output))
    pattern = re.compile(rf"^\.tmp-{re.escape(kind + os.path.basename(output))}\.(\d+)\.[^.]+$")
    removed = []
    for name in os.listdir(directory) if os.path.isdir(directory) else ():
        match = pattern.match(name)
        if match and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1))):
            path = os.path.join(directory, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
            removed.append(path)
    return removed


def _readable_as_umask_says(path: str) -> None:
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)  # mkstemp makes 0600; outputs are for whoever may read


def _tree_readable_as_umask_says(root: str) -> None:
    """Every directory and regular file under ROOT as a new one of the user's would be: what
    other programs wrote there (safetensors' and transformers' writers, CTranslate2's
    converter) may have made a file 0600 through their own temporary files, which no one
    else on a shared machine could read. Executable files keep their execute bits."""
    umask = os.umask(0)
    os.umask(umask)
    for directory, subdirectories, files in os.walk(root):
        os.chmod(directory, 0o777 & ~umask)
        for name in files:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                os.chmod(path, (0o777 if mode & 0o111 else 0o666) & ~umask)


# ---- files written whole or not at all ----------------------------------------------------

@contextlib.contextmanager
def naming(path: str):
    """Within the block, an OSError that names no file (a write on a full disk, a temporary's
    creation) is raised again naming PATH, the output it was for."""
    try:
        yield
    except OSError as err:
        if err.filename is None and err.errno is not None:
            raise OSError(err.errno, err.strerror, path) from err
        raise


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", inputs=()):
    """Open a temporary file beside ``path``; rename it to ``path`` only if the block succeeds.
    ``inputs``: the files the command reads, which ``path`` may not be (``check_output``). The
    rename replaces a link at ``path`` itself, never the file it points to."""
    check_output(path, inputs)
    directory = os.path.dirname(os.path.abspath(path))
    refuse_planted_links(directory)
    tmp = None
    try:
        with naming(path):
            os.makedirs(directory, exist_ok=True)
            remove_stale_temporaries(path)
            handle, tmp = tempfile.mkstemp(dir=directory, prefix=temporary_prefix(path))
            _readable_as_umask_says(tmp)
            with os.fdopen(handle, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as out:
                yield out
            os.replace(tmp, path)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


def write_atomically(path: str, text: str, inputs=()) -> None:
    with atomic_open(path, inputs=inputs) as out:
        out.write(text)


class RecordError(ValueError):
    """A JSON record (status.json, config.json, eval.json) that cannot be read as one."""


def read_json(path: str):
    """The JSON object at ``path``; None if there is no file. A file that is not a JSON object
    (truncated, edited, another program's) is a ``RecordError`` naming it."""
    try:
        with open_regular(path, "r") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise RecordError(f"{path}: unreadable record ({error.strerror or error})")
    except ValueError as error:
        raise RecordError(f"{path}: unreadable record ({error})")
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a record (a JSON {type(data).__name__}, not an object)")
    return data


# what a path that is not a regular file is, by its stat (``open_regular``)
_SPECIAL = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
            (stat.S_ISSOCK, "a socket"))


class NotRegularFile(OSError):
    """An input that is a FIFO, a device, a socket or a directory where a file is read; its
    text is "PATH is WHAT, not a regular file"."""

    def __str__(self) -> str:
        return f"{self.filename} is {self.strerror}"


def check_regular(path: str) -> None:
    """Refuse (``NotRegularFile``, naming PATH and what it is) a PATH that exists and is not a
    regular file (through links): a FIFO blocks its reader forever, a device is read without
    end. Asked before a checkpoint or a text is opened, by name or by a library that opens it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing: the opener's own error says so
    _refuse_special(path, mode)


def _refuse_special(path: str, mode: int) -> None:
    for test, what in _SPECIAL:
        if test(mode):
            raise NotRegularFile(errno.EINVAL, f"{what}, not a regular file", path)


def open_regular(path: str, mode: str = "rb"):
    """``open(path, mode)`` for reading, refusing what is not a regular file
    (``NotRegularFile``): opened without blocking (a FIFO without a writer would block the
    open itself), checked by the descriptor's own stat (nothing swapped in between)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        check_regular(path)  # a socket cannot be opened (ENXIO): say what it is instead
        raise
    try:
        _refuse_special(path, os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    except BaseException:
        os.close(fd)
        raise


def write_json(path: str, data, inputs=()) -> None:
    write_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n", inputs)


def save_png(figure, path: str, inputs=()) -> None:
    """Save a matplotlib ``figure`` as PNG at ``path`` through a temporary file and a rename."""
    with atomic_open(path, "wb", inputs=inputs) as out:
        figure.savefig(out, format="png", dpi=120, bbox_inches="tight")


def save_torch(state, path: str, inputs=()) -> None:
    """``torch.save(state)`` to ``path``, whole or not at all."""
    import torch

    with atomic_open(path, "wb", inputs=inputs) as out:
        torch.save(state, out)


def copy_file(source: str, path: str) -> None:
    """A copy of ``source`` at ``path``, whole or not at all (never ``source`` itself)."""
    with open(source, "rb") as src, atomic_open(path, "wb", inputs=(source,)) as out:
        shutil.copyfileobj(src, out)


def create_new(path: str, mode: str = "w"):
    """Open ``path`` for writing only if nothing is there yet (no file, no link): a file of the
    directory being built, which no one else may have put there."""
    refuse_planted_links(os.path.dirname(os.path.abspath(path)))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    return _named_writer(fd, path, mode)


class _NamedWrites(io.FileIO):
    """A file whose failing writes name their file: the kernel's ENOSPC, EDQUOT or EIO from a
    write names none, and the one line of ``one_line_os_errors`` would read "(path unknown)"."""

    def write(self, data):
        with naming(self.name):
            return super().write(data)


def _named_writer(fd: int, path: str, mode: str):
    """The descriptor FD, opened for writing PATH, as ``open`` would return it for MODE ("w",
    "a", "wb", "ab"), its writes -- buffered ones too, at flush and close -- naming PATH."""
    try:
        raw = _NamedWrites(fd, mode[0], closefd=True)
    except BaseException:
        os.close(fd)
        raise
    raw.name = path
    buffered = io.BufferedWriter(raw)
    return buffered if "b" in mode else io.TextIOWrapper(buffered, encoding="utf-8")


_NO_FOLLOW = {"a": os.O_WRONLY | os.O_APPEND | os.O_CREAT, "w": os.O_WRONLY | os.O_TRUNC | os.O_CREAT}


def open_no_follow(path: str, mode: str = "a"):
    """``open(path, mode)`` for appending or writing ("a", "ab", "w", "wb") that never follows
    a symbolic link at ``path``: a link planted in a directory the plugin writes into (a run
    directory's ``train.log``) would make it truncate or append to a file elsewhere. A link
    there is an OSError (ELOOP) naming the path."""
    refuse_planted_links(os.path.dirname(os.path.abspath(path)))
    try:
        fd = os.open(path, _NO_FOLLOW[mode[0]] | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link: the plugin does not write through "
                                       "links in the directories it writes into; remove it",
                          path) from None
        raise
    return _named_writer(fd, path, mode)


def overwrite_in_place(path: str, text: str) -> None:
    """Write ``text`` over the file ``path`` itself (no temporary; never through a link): the
    last resort on a full disk, where a file of a few hundred bytes still fits in the blocks it
    already has."""
    refuse_planted_links(os.path.dirname(os.path.abspath(path)))
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with _named_writer(fd, path, "w") as handle:
        handle.write(text)
        handle.truncate()


def append_copy(source: str, path: str) -> None:
    """Append the bytes of ``source`` to ``path`` (a log gathering the logs of several runs;
    never through a link)."""
    with open(source, "rb") as src, open_no_follow(path, "ab") as out:
        shutil.copyfileobj(src, out)


def extract_tar(archive: str, directory: str) -> None:
    """Unpack the gzipped tar ``archive`` into ``directory`` (one being built): members that
    would land outside it (absolute paths, .., links out) are refused by tarfile's data
    filter (``tarfile.FilterError``)."""
    import tarfile

    with naming(directory), tarfile.open(archive, "r:gz") as tar:
        tar.extractall(directory, filter="data")


def move(source: str, path: str) -> None:
    """Rename ``source`` to ``path`` in one step (a link at ``path`` is replaced, not followed):
    what a finished temporary, or a file set aside, becomes."""
    for end in (source, path):
        refuse_planted_links(os.path.dirname(os.path.abspath(end)))
    os.replace(source, path)


def remove_file(path: str) -> None:
    """Delete the file (or link) ``path`` if it is there; a directory is refused (directories
    are removed only as the recipes' own, ``directories.remove_tree``)."""
    if os.path.isdir(path) and not os.path.islink(path):
        raise IsADirectoryError(errno.EISDIR, "a directory, not removed as a file", path)
    refuse_planted_links(os.path.dirname(os.path.abspath(path)))
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def ensure_directory(path: str) -> str:
    """``path`` as a directory, made with its parents if missing (a user's output directory:
    nothing in it is deleted, files are added through ``atomic_open``)."""
    refuse_planted_links(path)
    os.makedirs(path, exist_ok=True)
    return path


# ---- directories built whole --------------------------------------------------------------

@contextlib.contextmanager
def directory_published(output_dir: str, kind: str, inputs=()):
    """A new, empty directory beside ``output_dir`` to build an output in; when the block ends
    without an error it becomes ``output_dir`` at once (one rename; an existing one, which the
    caller allowed, is replaced), else it is removed. Stale ones of killed runs are removed
    first (``remove_stale_temporaries``). An ``output_dir`` that is or holds one of ``inputs``
    is refused (``check_output``)."""
    check_output(output_dir, inputs)
    parent = os.path.dirname(os.path.abspath(output_dir))
    refuse_planted_links(parent)
    os.makedirs(parent, exist_ok=True)
    remove_stale_temporaries(output_dir, kind)
    with naming(output_dir), tempfile.TemporaryDirectory(
            dir=parent, prefix=temporary_prefix(output_dir, kind)) as tmp:
        built = os.path.join(tmp, "built")
        os.makedirs(built)
        yield built
        _tree_readable_as_umask_says(built)
        if os.path.lexists(output_dir):  # moved into tmp: removed with it
            os.rename(output_dir, os.path.join(tmp, "replaced"))
        os.rename(built, output_dir)


@contextlib.contextmanager
def temporary_beside(output: str, inputs=()):
    """A new directory beside ``output`` for a program that writes its files itself
    (sentencepiece), to ``move`` them into place from inside the block; removed when the block
    ends, whatever happens. Named as the layer's temporaries are, so that a killed run's is
    removed by the next writer of ``output``."""
    check_output(output, inputs)
    parent = os.path.dirname(os.path.abspath(output))
    refuse_planted_links(parent)
    with naming(output):
        os.makedirs(parent, exist_ok=True)
        remove_stale_temporaries(output)
        with tempfile.TemporaryDirectory(dir=parent, prefix=temporary_prefix(output)) as tmp:
            yield tmp


@contextlib.contextmanager
def scratch_directory(parent=None):
    """A private temporary directory for intermediate files (in ``parent``, else the system's
    temporary directory), removed when the block ends."""
    with tempfile.TemporaryDirectory(prefix="deepnet-", dir=parent) as tmp:
        yield tmp


# ---- signals and errors -------------------------------------------------------------------

@contextlib.contextmanager
def signals_raise(signals=(signal.SIGTERM, signal.SIGHUP, signal.SIGINT)):
    """Within the block, these signals raise ``SystemExit(128 + signal)`` (the shell's status
    for a process killed by it), so ``finally`` blocks -- the temporaries' clean-up -- run.
    The block ends with that status and one line saying which signal stopped it, whatever the
    code it interrupted made of the exception: torch.save, interrupted while it writes, turns it
    into a RuntimeError (a traceback and status 1). Main thread only (Python's rule for signal
    handlers); elsewhere the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []

    def handler(signum, frame):
        received.append(signum)
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
        if received:  # its exception swallowed where it landed (a __del__): the block ran on
            raise SystemExit(128 + received[0])
    except BaseException:
        if not received:
            raise
        print(f"stopped by {signal.Signals(received[0]).name} (exit status "
              f"{128 + received[0]}); its temporaries removed", file=sys.stderr)
        raise SystemExit(128 + received[0]) from None
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# the errors of the disk rather than of the program, with what to do about them
DISK_ERRORS = {errno.ENOSPC: "free some space and run again (runs resume)",
               errno.EDQUOT: "free some space and run again (runs resume)",
               errno.EROFS: "choose a writable location (DEEPNET_WORK for the recipes)",
               errno.EACCES: "choose a location you may write to (DEEPNET_WORK for the "
                             "recipes), or fix its permissions",
               errno.EPERM: "choose a location you may write to, or fix its permissions",
               # not the disk's, but the same kind of refusal: where the output would go
               errno.ELOOP: "remove the link, or choose another location"}


def describe_os_error(err: OSError) -> str:
    """An OSError as one line: the path, the cause and what to do (no traceback)."""
    path = err.filename if err.filename is not None else "(path unknown)"
    advice = DISK_ERRORS.get(err.errno, "")
    return f"{path}: {err.strerror or err}" + (f"; {advice}" if advice else "")


def is_disk_error(err: BaseException) -> bool:
    """Whether ``err`` is one of ``DISK_ERRORS``: a tool that turns its input errors into a
    usage error lets these through, to end as ``one_line_os_errors`` says."""
    return isinstance(err, OSError) and err.errno in DISK_ERRORS


def one_line_os_errors(main):
    """A console script's ``main`` whose disk errors (``DISK_ERRORS``) end in one line naming
    the path, status 1, and whose output onto an input (``OutputIsInput``) in one line, status
    2 (a usage error), instead of a traceback; so does any other refused output
    (``OutputRefused``), and a record it cannot read or replace (``RecordError``)."""
    @functools.wraps(main)
    def wrapped(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except (OutputRefused, RecordError) as err:
            print(f"error: {err}", file=sys.stderr)
            raise SystemExit(2) from None
        except OSError as err:
            if not is_disk_error(err):
                raise
            print(f"error: {describe_os_error(err)}", file=sys.stderr)
            raise SystemExit(1) from None
    wrapped.disk_errors_in_one_line = True  # what tests/unit/test_file_layer.py looks for
    return wrapped
