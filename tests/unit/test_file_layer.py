"""The guarded file layer (storage/fileio.py) and the doors that use it: an output that is one
of the command's inputs is refused by every tool that writes one, before anything is read;
a symbolic link planted in a run directory is never written through."""

import ast
import os
import subprocess
import sys

import pytest

from deepnet_fairseq.storage import fileio
from support import REPO

LOG = ("2026 | INFO | train_inner | epoch 001: loss=5, mon_grad.enc.0=0.1, mon_lnin.enc.0=1, "
       "mon_upd.enc.0=0.01, num_updates=1\n")


def run_tool(*argv):
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                          cwd=REPO)


@pytest.mark.parametrize("tool", ["plot-monitors", "plot-monitors-csv", "curves", "source-use"])
def test_every_tool_refuses_to_write_over_its_input(tmp_path, tool):
    log = tmp_path / "train.log"
    log.write_text(LOG)
    run = tmp_path / "run"
    run.mkdir()
    (run / "valid_loss.csv").write_text("num_updates,valid_loss_bits\n10,5.0\n")
    checkpoint = tmp_path / "checkpoint.pt"
    checkpoint.write_bytes(b"not read")
    argv, victim = {
        "plot-monitors": (["deepnet_fairseq.diagnostics.plot_monitors", str(log), "--output",
                           str(log)], log),
        # the CSV goes beside the PNG: train.png writes train.csv, here the log itself
        "plot-monitors-csv": (["deepnet_fairseq.diagnostics.plot_monitors", str(log),
                               "--output", str(tmp_path / "train.log.png")], None),
        "curves": (["deepnet_fairseq.recipes.reporting.curves", str(run), "--plot",
                    str(run / "valid_loss.csv")], run / "valid_loss.csv"),
        "source-use": (["deepnet_fairseq.diagnostics.source_use", str(tmp_path),
                        "--checkpoints", str(checkpoint), "--out", str(checkpoint)], checkpoint),
    }[tool]
    if victim is None:  # train.log.png -> train.log.csv: not the log; make the log that name
        log.rename(tmp_path / "train.log.csv")
        argv[1] = str(tmp_path / "train.log.csv")
        victim = tmp_path / "train.log.csv"
    before = victim.read_bytes()
    result = run_tool(*argv)
    assert result.returncode == 2, result.stderr
    assert "refusing to write over it" in result.stderr
    assert victim.read_bytes() == before


def test_a_link_in_a_run_directory_is_not_written_through(tmp_path):
    """train.log, evaluate.log and .lock are opened without following a link: a planted link
    is an error naming it, and the file it points to is untouched."""
    from deepnet_fairseq.storage.directories import RunLock

    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    run = tmp_path / "run"
    run.mkdir()
    for name in ("train.log", "evaluate.log", ".lock"):
        (run / name).symlink_to(outside)
    with pytest.raises(OSError, match="a symbolic link"):
        fileio.open_no_follow(str(run / "train.log"), "a")
    with pytest.raises(OSError, match="a symbolic link"):
        fileio.open_no_follow(str(run / "evaluate.log"), "w")
    with pytest.raises(OSError):
        with RunLock(str(run)):
            pass
    assert outside.read_text() == "keep"


def test_an_atomic_output_replaces_a_link_not_its_target(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    link = tmp_path / "table.md"
    link.symlink_to(outside)
    fileio.write_atomically(str(link), "new")
    assert not link.is_symlink() and link.read_text() == "new" and outside.read_text() == "keep"
    with pytest.raises(fileio.OutputIsInput):
        fileio.write_atomically(str(outside), "x", inputs=[str(tmp_path / "." / "outside.txt")])


def test_a_directory_output_holding_an_input_is_refused(tmp_path):
    """A directory output is replaced whole: one that holds an input (at any depth, through a
    link) is refused, by check_output and by directory_published, and nothing is touched."""
    data = tmp_path / "work" / "data"
    data.mkdir(parents=True)
    (data / "dict.txt").write_text("keep")
    (tmp_path / "link").symlink_to(tmp_path / "work")
    for output in (data, tmp_path / "work", tmp_path / "link"):
        with pytest.raises(fileio.OutputIsInput, match="holds the input|is the input"):
            fileio.check_output(str(output), [str(data / "dict.txt")])
        with pytest.raises(fileio.OutputIsInput):
            with fileio.directory_published(str(output), "x-", inputs=[str(data / "dict.txt")]):
                pass
    fileio.check_output(str(tmp_path / "work"), [str(tmp_path / "elsewhere.txt")])
    assert (data / "dict.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "work"]


# each door of the layer that writes, replaces or deletes under a directory, given one
LAYER_DOORS = {
    "make_dirs": lambda d: __import__("deepnet_fairseq.storage.directories",
                                      fromlist=["x"]).make_dirs(os.path.join(d, "new")),
    "remove_tree": lambda d: __import__("deepnet_fairseq.storage.directories",
                                        fromlist=["x"]).remove_tree(os.path.join(d, "sub")),
    "atomic_open": lambda d: fileio.write_atomically(os.path.join(d, "a.txt"), "x"),
    "create_new": lambda d: fileio.create_new(os.path.join(d, "new.txt")).close(),
    "open_no_follow": lambda d: fileio.open_no_follow(os.path.join(d, "log.txt")).close(),
    "overwrite_in_place": lambda d: fileio.overwrite_in_place(os.path.join(d, "theirs.txt"), "x"),
    "move": lambda d: fileio.move(os.path.join(d, "theirs.txt"), os.path.join(d, "moved.txt")),
    "remove_file": lambda d: fileio.remove_file(os.path.join(d, "theirs.txt")),
    "ensure_directory": lambda d: fileio.ensure_directory(os.path.join(d, "new")),
    "directory_published": lambda d: fileio.directory_published(
        os.path.join(d, "out"), "x-").__enter__(),
}


@pytest.mark.parametrize("door", sorted(LAYER_DOORS))
@pytest.mark.parametrize("depth", [0, 1], ids=["link-is-the-directory", "link-above-it"])
def test_no_door_of_the_layer_follows_a_link_planted_in_a_marked_directory(tmp_path, door,
                                                                          depth):
    """A directory of the recipes (marked) holding a link to someone else's directory: every
    writer of the layer refuses a path through it (ELOOP, naming the link), and the directory
    it points to is unchanged. A link above the marked directories is followed (the user's)."""
    from deepnet_fairseq.storage.directories import make_dirs

    users = tmp_path / "users-link"
    (tmp_path / "real").mkdir()
    users.symlink_to(tmp_path / "real")  # a DEEPNET_WORK that is a link: fine
    ours = make_dirs(str(users / "work"))
    theirs = tmp_path / "theirs"
    (theirs / "sub").mkdir(parents=True)
    (theirs / "theirs.txt").write_text("keep")
    (theirs / "sub" / ".deepnet-recipes").write_text("")  # a marker there changes nothing
    link = os.path.join(ours, "checkpoints")
    os.symlink(theirs, link)
    before = sorted(str(p) for p in theirs.rglob("*"))
    with pytest.raises(OSError, match="a symbolic link") as refused:
        LAYER_DOORS[door](link if depth == 0 else os.path.join(link, "sub"))
    assert refused.value.filename == link
    assert sorted(str(p) for p in theirs.rglob("*")) == before
    assert (theirs / "theirs.txt").read_text() == "keep"


# ---- no module outside the file layer writes a file --------------------------------------------

FILE_LAYER = {"deepnet_fairseq/storage/fileio.py", "deepnet_fairseq/storage/directories.py"}
# every Python source of the checkout that runs as part of a tool: the package, the benchmarks,
# the scripts and the docs' examples (the tests are not tools)
SCANNED = ("deepnet_fairseq", "benchmarks", "scripts", "docs")
# module -> functions that write, replace or delete a file or directory
WRITERS = {
    "os": {"replace", "rename", "renames", "remove", "unlink", "rmdir", "removedirs", "makedirs",
           "mkdir", "open", "truncate", "ftruncate", "symlink", "link", "chmod", "chown",
           "utime", "mkfifo"},
    "shutil": {"rmtree", "move", "copy", "copy2", "copyfile", "copytree", "copymode",
               "copystat", "make_archive", "unpack_archive"},
    "tempfile": {"mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory",
                 "TemporaryFile", "SpooledTemporaryFile"},
    "torch": {"save"},
    "numpy": {"save", "savez", "savez_compressed", "savetxt"},
    "urllib.request": {"urlretrieve"},
    "logging": {"FileHandler"},
    "logging.handlers": {"RotatingFileHandler", "TimedRotatingFileHandler", "WatchedFileHandler"},
}
OPENERS = {"gzip", "bz2", "lzma", "io", "codecs", "tarfile", "zipfile"}  # .open(path, mode)
CONSTRUCTORS = {("zipfile", "ZipFile"), ("tarfile", "TarFile")}  # X(path, mode)
# methods that write whatever object they are called on (pathlib, matplotlib, tarfile)
WRITING_METHODS = {"write_text", "write_bytes", "touch", "unlink", "rmdir", "mkdir", "savefig",
                   "extractall", "extract", "symlink_to", "hardlink_to", "rename"}


def _mode_writes(mode) -> bool:
    """A mode argument writes unless it is a literal without w/a/x/+ (None: the default, reads)."""
    if mode is None:
        return False
    return not (isinstance(mode, ast.Constant) and isinstance(mode.value, str)
                and not set(mode.value) & set("wax+"))


def _mode(call, position):
    return call.args[position] if len(call.args) > position else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)


def _aliases(tree) -> dict:
    """name in this source -> the module it is (``import numpy as np``, ``import os.path``,
    ``from urllib import request``), for the modules of WRITERS and OPENERS."""
    known = set(WRITERS) | OPENERS
    found = {name: name for name in known if "." not in name}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    found[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in known:
                    found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found


def _owner(node, aliases):
    """The module an attribute's object is (``np``, ``urllib.request``, ``logging.handlers``),
    or None."""
    dotted = ast.unparse(node)
    return aliases.get(dotted, dotted if dotted in WRITERS or dotted in OPENERS else None)


def _not_a_file(path) -> bool:
    """os.devnull, or a literal under /proc (a kernel setting, e.g. /proc/self/clear_refs)."""
    return ast.unparse(path) == "os.devnull" or (
        isinstance(path, ast.Constant) and str(path.value).startswith("/proc/"))


def direct_writes(source: str):
    """(line, what) for every write, replace or delete in ``source`` not made through the file
    layer."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in WRITERS:
            found += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names
                      if a.name in WRITERS[node.module]]
        if not isinstance(node, ast.Call) or (node.args and _not_a_file(node.args[0])):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open" and _mode_writes(_mode(node, 1)):
            found.append((node.lineno, "open(..., writing)"))
        elif isinstance(func, ast.Attribute):
            owner = _owner(func.value, aliases)
            if func.attr in WRITERS.get(owner, ()):
                found.append((node.lineno, f"{owner}.{func.attr}"))
            elif (owner, func.attr) in CONSTRUCTORS and _mode_writes(_mode(node, 1)):
                found.append((node.lineno, f"{owner}.{func.attr}(..., writing)"))
            elif owner in OPENERS and func.attr == "open" and _mode_writes(_mode(node, 1)):
                found.append((node.lineno, f"{owner}.open(..., writing)"))
            elif owner is None and func.attr == "open" and _mode_writes(_mode(node, 0)):
                found.append((node.lineno, ".open(writing): pathlib"))  # Path(p).open("w")
            elif func.attr == "replace" and len(node.args) == 1 and not node.keywords:
                found.append((node.lineno, ".replace(target): pathlib"))  # str's takes two
            elif func.attr in WRITING_METHODS:
                found.append((node.lineno, f".{func.attr}()"))
    return found


def test_no_module_outside_the_file_layer_writes_a_file():
    """Every write, replace and delete of the package, the benchmarks and the scripts goes
    through storage/fileio.py or storage/directories.py (what it guarantees: fileio's
    docstring). Directories handed to fairseq, sentencepiece, CTranslate2 or transformers are
    the layer's (made and marked, or built and published by it)."""
    offenders = []
    for top in SCANNED:
        for root, _, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                path = os.path.join(root, name)
                module = os.path.relpath(path, REPO)
                if name.endswith(".py") and module not in FILE_LAYER:
                    with open(path, encoding="utf-8") as f:
                        offenders += [f"{module}:{line}: {what}" for line, what in
                                      direct_writes(f.read())]
    assert not offenders, "direct writes outside the file layer:\n" + "\n".join(offenders)


@pytest.mark.parametrize("code,flagged", [
    ("open(p, 'w')", True), ("open(p, 'ab')", True), ("open(p, mode)", True),
    ("open(p, mode='x')", True), ("open(p)", False), ("open(p, 'rb')", False),
    ("os.replace(a, b)", True), ("s.replace('a', 'b')", False), ("shutil.rmtree(d)", True),
    ("torch.save(x, p)", True), ("torch.load(p)", False), ("gzip.open(p, 'wt')", True),
    ("gzip.open(p)", False), ("Path(p).write_text('x')", True), ("fig.savefig(p)", True),
    ("tar.extractall(d)", True), ("from os import remove", True), ("tempfile.mkdtemp()", True),
    ("os.path.join(a, b)", False), ("os.open(os.devnull, os.O_WRONLY)", False),
    ("os.open(p, os.O_WRONLY)", True),
    # the doors an audit found the first scan blind to
    ("Path(p).open('w')", True), ("Path(p).open()", False), ("Path(p).open('rb')", False),
    ("p.rename(q)", True), ("Path(p).replace(q)", True), ("s.replace('a', 'b')", False),
    ("d.replace(year=1)", False), ("import shutil as sh\nsh.rmtree(d)", True),
    ("import numpy as xp\nxp.save(p, a)", True), ("import os as o\no.replace(a, b)", True),
    ("zipfile.ZipFile(p, 'w')", True), ("zipfile.ZipFile(p)", False),
    ("import zipfile as z\nz.ZipFile(p, mode='a')", True), ("logging.FileHandler(p)", True),
    ("import logging.handlers\nlogging.handlers.RotatingFileHandler(p)", True),
    ("urllib.request.urlretrieve(u, p)", True), ("from urllib.request import urlretrieve", True),
    ("from urllib import request\nrequest.urlretrieve(u, p)", True),
    ("json.loads(s)", False), ("logging.getLogger(n)", False),
    ("open('/proc/self/clear_refs', 'w')", False), ("open('/tmp/x', 'w')", True),
])
def test_the_scan_sees_each_kind_of_write(code, flagged):
    assert bool(direct_writes(code)) == flagged


# ---- disk errors: one line naming the path, from every tool -----------------------------------

def _writing_programs():
    from hostile_tools import PRINT_ONLY, programs

    return sorted((name, spec) for name, spec in programs().items() if name not in PRINT_ONLY)


@pytest.mark.parametrize("name,spec", _writing_programs())
def test_every_tool_ends_a_disk_error_in_one_line(name, spec):
    """Every program of the package that writes (found, not listed: hostile_tools.programs)."""
    from hostile_tools import function

    assert getattr(function(spec), "disk_errors_in_one_line", False), (
        f"{name}: its main is not wrapped by storage.fileio.one_line_os_errors")


def test_an_output_onto_an_input_anywhere_in_a_tool_is_one_line(tmp_path, capsys):
    """curves --export DIR where DIR/<run> is the run itself (its parent given): refused in
    one line, status 2, the run unchanged; and any OutputIsInput a wrapped main lets through
    ends the same way."""
    from deepnet_fairseq.recipes.reporting import curves

    run = tmp_path / "run"
    run.mkdir()
    (run / "valid_loss.csv").write_text("num_updates,valid_loss_bits\n10,5.0\n")
    (run / "status.json").write_text("{}")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    with pytest.raises(SystemExit) as stopped:
        curves.main([str(run), "--export", str(tmp_path)])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"is in the input directory {run}" in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before

    @fileio.one_line_os_errors
    def main():
        fileio.write_atomically(str(run / "status.json"), "x", inputs=[str(run)])

    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {run / 'status.json'} is in the input directory {run}: refusing to write "
        f"there; choose another output")


def test_sentencepiece_writes_into_a_temporary_of_the_layer(tmp_path):
    """spm.train has sentencepiece write into a directory named as the layer's temporaries:
    one a killed run left (its process gone) is removed by the next run; nothing else stays."""
    from deepnet_fairseq import spm

    text = tmp_path / "text.txt"
    words = "the quick brown fox jumps over a lazy dog while seven cats sleep".split()
    text.write_text("".join(" ".join(words[k:] + words[:k]) + "\n" for k in range(40)))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f".tmp-m.model.{dead}.abcd1234"
    stale.mkdir()
    (stale / "spm.model").write_bytes(b"half")
    spm.train([str(text)], str(tmp_path / "m"), 32)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.model", "m.vocab", "text.txt"]


def test_a_full_disk_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys):
    """deepnet-plot-monitors onto a full disk (every new file refused with ENOSPC, as the
    kernel says it: no path): status 1, one line naming its first output (the CSV beside the
    PNG), no temporary left."""
    import errno

    from deepnet_fairseq.diagnostics import plot_monitors

    log = tmp_path / "train.log"
    log.write_text(LOG)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fileio.tempfile, "mkstemp", full)
    with pytest.raises(SystemExit) as stopped:
        plot_monitors.main([str(log), "--output", str(tmp_path / "monitors.png")])
    assert stopped.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1] == (f"error: {tmp_path / 'monitors.csv'}: No space left on device; "
                         f"free some space and run again (runs resume)"), lines
    assert "Traceback" not in "\n".join(lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.log"]


def test_other_errors_keep_their_traceback():
    @fileio.one_line_os_errors
    def main():
        raise FileNotFoundError(2, "No such file or directory", "x")

    with pytest.raises(FileNotFoundError):
        main()


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_a_published_directory_takes_the_umask_whoever_wrote_its_files(tmp_path, umask):
    """What other programs write into a directory the layer publishes (a mkstemp'd 0600 file,
    a script, a subdirectory) ends with the modes a new file of the user's would have."""
    import stat as stat_module
    import tempfile

    from deepnet_fairseq.storage.fileio import directory_published

    saved = os.umask(umask)
    try:
        with directory_published(str(tmp_path / "out"), "test-") as built:
            handle, private = tempfile.mkstemp(dir=built)  # 0600, as safetensors' writer left it
            os.close(handle)
            os.makedirs(os.path.join(built, "sub"), mode=0o700)
            script = os.path.join(built, "sub", "run.sh")
            with open(script, "w") as out:
                out.write("#!/bin/sh\n")
            os.chmod(script, 0o700)
    finally:
        os.umask(saved)
    out = tmp_path / "out"
    mode = lambda path: stat_module.S_IMODE(os.stat(path).st_mode)  # noqa: E731
    assert mode(out / os.path.basename(private)) == 0o666 & ~umask
    assert mode(out / "sub") == mode(out) == 0o777 & ~umask
    assert mode(out / "sub" / "run.sh") == 0o777 & ~umask
