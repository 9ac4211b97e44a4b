"""Files written whole or not at all: a temporary beside the target, renamed when complete.
Shared by the tools, the diagnostics and the recipes (the plugin's I/O layer: it imports
nothing of the plugin)."""


import contextlib
import errno
import json
import os
import tempfile


class OutputIsInput(ValueError):
    """An output path that is one of the inputs of the same command (the same file)."""


def check_output(path: str, inputs=()) -> None:
    """Refuse an output that is one of ``inputs`` (the same file, by device and inode, through
    any link or other spelling): writing it would destroy what the command reads."""
    if not os.path.exists(path):
        return
    for given in inputs:
        if given and os.path.exists(given) and os.path.samefile(path, given):
            raise OutputIsInput(f"{path} is the input {given}: refusing to write over it; "
                                f"choose another output")


_NO_FOLLOW = {"a": os.O_WRONLY | os.O_APPEND | os.O_CREAT, "w": os.O_WRONLY | os.O_TRUNC | os.O_CREAT}


def open_no_follow(path: str, mode: str = "a"):
    """``open(path, mode)`` for appending or writing ("a", "ab", "w", "wb") that never follows
    a symbolic link at ``path``: a link planted in a directory the plugin writes into (a run
    directory's ``train.log``) would make it truncate or append to a file elsewhere. A link
    there is an OSError (ELOOP) naming the path."""
    try:
        fd = os.open(path, _NO_FOLLOW[mode[0]] | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link: the plugin does not write through "
                                       "links in the directories it writes into; remove it",
                          path) from None
        raise
    return os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"}))


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", inputs=()):
    """Open a temporary file beside ``path``; rename it to ``path`` only if the block succeeds.
    ``inputs``: the files the command reads, which ``path`` may not be (``check_output``). The
    rename replaces a link at ``path`` itself, never the file it points to."""
    check_output(path, inputs)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are for everyone who may read
    try:
        with os.fdopen(handle, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as out:
            yield out
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_atomically(path: str, text: str, inputs=()) -> None:
    with atomic_open(path, inputs=inputs) as out:
        out.write(text)


def save_png(figure, path: str, inputs=()) -> None:
    """Save a matplotlib ``figure`` as PNG at ``path`` through a temporary file and a rename."""
    with atomic_open(path, "wb", inputs=inputs) as out:
        figure.savefig(out, format="png", dpi=120, bbox_inches="tight")


def write_json(path: str, data) -> None:
    write_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
