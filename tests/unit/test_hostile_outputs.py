"""Every output argument of every tool, against every hostile place to write (issue: recipes
safe by construction). The table is generated: the tools are every program of the package
(setup.py's console scripts and every module with a ``__main__`` block), their output arguments
are read from their own argparse parsers, and each (tool, output, hostility) is one case:

* **onto an input**: the output is one of the files the command reads: refused (status 2),
  the input unchanged;
* **into an input directory**: the output in a directory the command reads (a run's, the
  data's), new or existing: refused (status 2), even with ``--force``, nothing added there;
* **onto an existing file**: an unrelated file where the output goes: refused without
  ``--force`` (status 2, one line), left as it was; replaced with ``--force``;
* **in a directory the recipes made**: a file output's existing file there: refused even with
  ``--force``, left as it was (a new one may be added);
* **onto a symlink**: the output path (or each file a directory or prefix output writes) is a
  link to someone else's file: whatever the tool does, what the link points to is unchanged;
* **read-only, not permitted, full**: creating anything in the output's directory fails with
  EROFS, EACCES or ENOSPC (injected, as the kernel reports them from a write: no path): status
  1, one line naming the path, no traceback, nothing left behind;
* **a directory the user may not write, for real**: the same, from the kernel itself: the
  output's directory is mode 0555, and a root run gives up the capability that lets root write
  there anyway (CAP_DAC_OVERRIDE) while the tool runs.

A new program, or a new output argument of one, that the table does not know fails
``test_every_program_is_in_the_table_or_says_why_not``. The table: ``tests/hostile_tools.py``; a
read-only file system for real: ``integration/test_read_only_disk.py``."""

import ctypes
import errno
import os
import tempfile

import pytest

from hostile_tools import (ELSEWHERE, PRINT_ONLY, TABLE, WRITES_WITHOUT_OUTPUT_ARGUMENT, Output,
                           call as _call, output_arguments, programs)
from support import REPO


def test_every_program_is_in_the_table_or_says_why_not():
    """Every program of the package (found: hostile_tools.programs) with an output argument
    has each one in the table (or ELSEWHERE, with the tests that cover it); one without is
    declared as printing only, or as writing where its own tests look."""
    declared = {(o.tool, o.option) for o in TABLE} | set(ELSEWHERE)
    found, unaccounted = set(), []
    for name, spec in programs().items():
        outputs = {(name, option) for option in output_arguments(spec)} if spec else set()
        found |= outputs
        if name in PRINT_ONLY:
            assert not outputs, f"{name} is declared to print only but has {sorted(outputs)}"
        elif not outputs and name not in WRITES_WITHOUT_OUTPUT_ARGUMENT:
            unaccounted.append(name)
    assert not unaccounted, (f"programs neither in the table nor declared (PRINT_ONLY, "
                             f"WRITES_WITHOUT_OUTPUT_ARGUMENT): {unaccounted}")
    assert found == declared, (f"not in the table: {sorted(found - declared)}; "
                               f"no longer in any parser: {sorted(declared - found)}")


def test_the_discovery_finds_the_kinds_of_program():
    """programs() sees console scripts, ``python -m`` modules, a package's __main__, and the
    modules that only print; output_arguments sees options of sub-commands."""
    found = programs()
    assert found["deepnet-export"] == "deepnet_fairseq.export:main"
    assert found["recipes"] == "deepnet_fairseq.recipes.__main__:main"
    assert found["score"] == "deepnet_fairseq.recipes.evaluation.score:main"
    assert found["constants"] == ""
    assert output_arguments(found["spm"]) == {"--model-prefix"}


@pytest.fixture
def fixtures(toy_data, tiny_checkpoint):
    return {"data": toy_data, "checkpoint": tiny_checkpoint}


def _case_id(output):
    return f"{output.tool}{output.option}"


# the file outputs the table names an input for (spm's is a text it would not name .model)
FILE_OUTPUTS = [o for o in TABLE if not o.directory
                and o.inputs is not Output.__dataclass_fields__["inputs"].default]
CODES = [errno.EROFS, errno.EACCES, errno.ENOSPC]


@pytest.mark.parametrize("output", FILE_OUTPUTS, ids=_case_id)
def test_an_output_onto_an_input_is_refused_and_the_input_kept(tmp_path, fixtures, output):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for victim in output.inputs(inputs, fixtures):
        before = victim.read_bytes()
        status, said = _call(output.main, output.argv(inputs, fixtures, output.onto(victim)))
        assert status == 2, said
        assert str(victim) in said and "Traceback" not in said, said
        assert victim.read_bytes() == before


def _files(root):
    return sorted(p for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("output", TABLE, ids=_case_id)
def test_an_output_onto_a_symlink_leaves_what_it_points_to_alone(tmp_path, fixtures, output):
    """A file output that is a link, or (directory outputs) a link planted at each file the
    tool writes into its directory: the link is replaced or refused, never written through."""
    inputs, out, elsewhere = tmp_path / "in", tmp_path / "out", tmp_path / "someone-elses"
    for directory in (inputs, out, elsewhere):
        directory.mkdir()
    target = out / ("result" if output.directory else output.name)
    if output.directory or output.prefix:  # learn what it writes, then plant a link at each
        status, said = _call(output.main, output.argv(inputs, fixtures, str(target)))
        assert status == 0, said
        links = _files(out)
        assert links, f"{output.tool} {output.option} wrote nothing"
    else:
        links = [target]
    for number, link in enumerate(links):
        victim = elsewhere / f"theirs-{number}"
        victim.write_bytes(b"theirs")
        if link.exists():
            link.unlink()
        link.symlink_to(victim)
    _call(output.main, output.argv(inputs, fixtures, str(target)))
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == {
        f"theirs-{number}": b"theirs" for number in range(len(links))}


@pytest.mark.parametrize("output", TABLE, ids=_case_id)
def test_an_existing_output_is_replaced_only_with_force(tmp_path, fixtures, output):
    """An existing file where the tool writes (the output itself, or each file a directory or
    prefix output writes), unrelated to its inputs: refused without --force (status 2, one line
    naming it, or the directory output holding it, and --force), left as it was; replaced with
    --force."""
    inputs, out = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    out.mkdir()
    target = out / ("result" if output.directory else output.name)
    argv = output.argv(inputs, fixtures, str(target))
    if output.directory or output.prefix:  # learn what it writes
        status, said = _call(output.main, argv)
        assert status == 0, said
        existing = _files(out)
    else:
        existing = [target]
    for path in existing:
        path.write_bytes(b"unrelated")
    status, said = _call(output.main, argv)
    assert status == 2 and "--force" in said and "Traceback" not in said, said
    assert any(str(path) in said for path in [target, *existing]), said
    assert all(path.read_bytes() == b"unrelated" for path in existing)
    status, said = _call(output.main, argv + ["--force"])
    assert status == 0, said
    assert any(path.read_bytes() != b"unrelated" for path in existing)


@pytest.mark.parametrize("output", [o for o in TABLE if not o.directory], ids=_case_id)
def test_a_file_in_a_directory_the_recipes_made_is_never_replaced(tmp_path, fixtures, output):
    """A directory holding the recipes' marker (a run's: its records and checkpoints): the tool
    may add a new file there, but an existing one is refused even with --force (status 2, one
    line naming it), left as it was: the recipes' own steps write there."""
    from deepnet_fairseq.storage.directories import make_dirs

    inputs = tmp_path / "in"
    inputs.mkdir()
    out = tmp_path / "run"
    make_dirs(str(out))
    argv = output.argv(inputs, fixtures, str(out / output.name))
    status, said = _call(output.main, argv)  # new files: allowed
    assert status == 0, said
    written = [p for p in _files(out) if p.name != ".deepnet-recipes"]
    assert written
    for path in written:
        path.write_bytes(b"the recipes'")
    status, said = _call(output.main, argv + ["--force"])
    assert status == 2 and "the recipes made" in said and "Traceback" not in said, said
    assert all(path.read_bytes() == b"the recipes'" for path in written)


# the outputs of the programs that read directories (a run's, the data's)
INTO_DIRECTORIES = [o for o in TABLE
                    if o.directories is not Output.__dataclass_fields__["directories"].default]


@pytest.mark.parametrize("output", INTO_DIRECTORIES, ids=_case_id)
def test_an_output_into_an_input_directory_is_refused_and_writes_nothing(
        tmp_path, fixtures, output):
    """The output in a directory the command reads (new, or a new subdirectory of it, or, a
    directory output, that directory itself: curves --export R would write R/R): refused,
    status 2 naming the directory, nothing added there, even with --force."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    for directory in output.directories(inputs, fixtures):
        before = sorted(directory.rglob("*"))
        name = "result" if output.directory else output.name
        for target in (directory / name, directory / "sub" / name,
                       *([directory] if output.directory else [])):
            for force in ([], ["--force"]):
                status, said = _call(output.main,
                                     output.argv(inputs, fixtures, str(target)) + force)
                assert status == 2 and str(directory) in said and "Traceback" not in said, said
                assert sorted(directory.rglob("*")) == before


class _Refusing:
    """Creation of any file or directory under ROOT fails with ERRNO, as on a read-only,
    forbidden or full file system: os.open and os.mkdir name the path (as Python does), a new
    temporary file does not (as a write that fills the disk does not: the layer must name the
    file itself)."""

    def __init__(self, root, code):
        self.root, self.code = str(root), code

    def under(self, path) -> bool:
        return path is not None and os.path.abspath(os.fsdecode(path)).startswith(self.root)

    def refuse(self, path=None):
        if path is None:
            raise OSError(self.code, os.strerror(self.code))
        raise OSError(self.code, os.strerror(self.code), os.fsdecode(path))

    def install(self, monkeypatch):
        real_open, real_mkdir = os.open, os.mkdir
        real_mkstemp, real_mkdtemp = tempfile.mkstemp, tempfile.mkdtemp

        def guarded_open(path, flags, *args, **kwargs):
            if flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR) and self.under(path):
                self.refuse(path)
            return real_open(path, flags, *args, **kwargs)

        def guarded_mkdir(path, *args, **kwargs):
            if self.under(path):
                self.refuse(path)
            return real_mkdir(path, *args, **kwargs)

        def guarded_mkstemp(suffix=None, prefix=None, dir=None, text=False):
            if self.under(dir):
                self.refuse()
            return real_mkstemp(suffix, prefix, dir, text)

        def guarded_mkdtemp(suffix=None, prefix=None, dir=None):
            if self.under(dir):
                self.refuse()
            return real_mkdtemp(suffix, prefix, dir)

        monkeypatch.setattr(os, "open", guarded_open)
        monkeypatch.setattr(os, "mkdir", guarded_mkdir)
        monkeypatch.setattr(tempfile, "mkstemp", guarded_mkstemp)
        monkeypatch.setattr(tempfile, "mkdtemp", guarded_mkdtemp)


@pytest.mark.parametrize("code", CODES,
                         ids=lambda code: errno.errorcode[code])
@pytest.mark.parametrize("output", TABLE, ids=_case_id)
def test_a_disk_that_refuses_the_output_is_one_line_and_leaves_nothing(
        tmp_path, fixtures, monkeypatch, output, code):
    inputs, out = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    out.mkdir()
    argv = output.argv(inputs, fixtures, str(out / ("result" if output.directory else output.name)))
    _Refusing(out, code).install(monkeypatch)
    status, said = _call(output.main, argv)
    monkeypatch.undo()
    lines = said.strip().splitlines()
    assert status == 1, said
    assert "Traceback" not in said
    assert lines[-1].startswith(f"error: {out}") and os.strerror(code) in lines[-1], lines[-1]
    assert list(out.iterdir()) == []


class _Capabilities(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


_DAC = (1 << 1) | (1 << 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH (linux/capability.h)


class _FileModesApply:
    """While inside, this thread obeys file modes as any user does: the two capabilities that
    let root ignore them are taken out of its effective set (they stay permitted, so they come
    back on exit; Linux keeps capabilities per thread, and the tools write from this one). A
    user who is not root has neither, and nothing changes."""

    def __init__(self):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
        self.saved = (_Capabilities * 2)()

    def _set(self, data):
        if self.libc.capset(ctypes.byref(self.header), data) != 0:
            raise OSError(ctypes.get_errno(), "capset")

    def __enter__(self):
        if self.libc.capget(ctypes.byref(self.header), self.saved) != 0:
            raise OSError(ctypes.get_errno(), "capget")
        lowered = (_Capabilities * 2)(*self.saved)
        lowered[0].effective &= ~_DAC
        self._set(lowered)
        return self

    def __exit__(self, *exc):
        self._set(self.saved)


def test_file_modes_apply_inside_and_not_after(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    with _FileModesApply():
        with pytest.raises(PermissionError):
            (locked / "x").write_text("x")
    if os.geteuid() == 0:  # root again: the mode no longer stops it
        (locked / "x").write_text("x")
    locked.chmod(0o755)


@pytest.mark.parametrize("output", TABLE, ids=_case_id)
def test_a_directory_the_user_may_not_write_is_one_line_and_leaves_nothing(
        tmp_path, fixtures, output):
    inputs, out = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    out.mkdir()
    argv = output.argv(inputs, fixtures, str(out / ("result" if output.directory else output.name)))
    out.chmod(0o555)
    try:
        with _FileModesApply():
            status, said = _call(output.main, argv)
    finally:
        out.chmod(0o755)
    lines = said.strip().splitlines()
    assert status == 1, said
    assert "Traceback" not in said
    assert lines[-1].startswith(f"error: {out}") and os.strerror(errno.EACCES) in lines[-1], \
        lines[-1]
    assert list(out.iterdir()) == []


def test_the_docs_count_the_cases():
    """docs/running.md gives this table's number of cases and the read-only file system's
    (integration/test_read_only_disk.py, one per output): kept true here."""
    cases = (len(FILE_OUTPUTS) + len(INTO_DIRECTORIES) + len([o for o in TABLE if not o.directory])
             + len(TABLE) * (1 + 1 + len(CODES) + 1))
    with open(os.path.join(REPO, "docs", "running.md"), encoding="utf-8") as handle:
        text = " ".join(handle.read().split())
    assert f"{len(TABLE)} outputs of {len({o.tool for o in TABLE})} programs" in text
    assert f"{cases} cases in all" in text
    assert f"test_read_only_disk.py`, {len(TABLE)} cases" in text
