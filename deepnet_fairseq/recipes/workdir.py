"""Directories the recipes create, and the only ones they delete.

Each directory a recipe creates gets a marker file (``MARKER``) at creation. Deleting or
replacing a directory is refused unless it holds that marker, so a mistyped ``DEEPNET_WORK``
(``$HOME``, a shared data folder) can never lose data the recipes did not write.

The shell side of the recipes (scripts/lib/recipe.sh: ``fresh_dir``, ``publish_dir``) applies
the same rule with the marker name it gets from ``launch.py``.
"""

import os
import shutil

MARKER = ".deepnet-recipes"


class NotOurs(RuntimeError):
    pass


def make_dirs(path: str) -> str:
    """Create PATH and its missing parents, marking each one created here; return PATH."""
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
        with open(os.path.join(directory, MARKER), "w", encoding="utf-8") as out:
            out.write("created by the deepnet_fairseq recipes; they may delete this directory\n")
    return path


def is_ours(path: str) -> bool:
    return os.path.isfile(os.path.join(path, MARKER))


def remove_tree(path: str) -> None:
    """Delete PATH if it exists and the recipes created it; refuse otherwise."""
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


def publish(tmp: str, path: str) -> None:
    """Replace PATH (if the recipes made it) by the finished TMP, then mark PATH done."""
    remove_tree(path)
    os.replace(tmp, path)
    open(os.path.join(path, ".done"), "w").close()
