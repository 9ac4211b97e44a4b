"""Files written whole or not at all: a temporary beside the target, renamed when complete.
Shared by the tools, the diagnostics and the recipes (the plugin's I/O layer: it imports
nothing of the plugin)."""


import contextlib
import json
import os
import tempfile


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w"):
    """Open a temporary file beside ``path``; rename it to ``path`` only if the block succeeds."""
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


def write_atomically(path: str, text: str) -> None:
    with atomic_open(path) as out:
        out.write(text)


def save_png(figure, path: str) -> None:
    """Save a matplotlib ``figure`` as PNG at ``path`` through a temporary file and a rename."""
    with atomic_open(path, "wb") as out:
        figure.savefig(out, format="png", dpi=120, bbox_inches="tight")


def write_json(path: str, data) -> None:
    write_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
