"""Every output argument of every tool, against every hostile place to write (issue: recipes
safe by construction). The table is generated: the tools are setup.py's console scripts plus
the ``python -m`` report tools, their output arguments are read from their own ``--help``, and
each (tool, output, hostility) is one case:

* **onto an input**: the output is one of the files the command reads: refused (status 2),
  the input unchanged;
* **onto a symlink**: the output path is a link to someone else's file or directory: whatever
  the tool does, what the link points to is unchanged;
* **read-only, not permitted, full**: creating anything in the output's directory fails with
  EROFS, EACCES or ENOSPC (as the kernel reports them from a write: no path): status 1, one
  line naming the path, no traceback, nothing left behind;
* **a directory the user may not write, for real**: the same, from the kernel itself: the
  output's directory is mode 0555, and a root run gives up the capability that lets root write
  there anyway (CAP_DAC_OVERRIDE) while the tool runs.

A new tool, or a new output argument of a tool, that the table does not know fails
``test_the_table_knows_every_output_argument``."""

import ctypes
import errno
import importlib
import io
import json
import os
import re
import shutil
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Callable, List, Tuple

import pytest

from support import REPO

LOG = ("2026 | INFO | train_inner | epoch 001: loss=5, mon_grad.enc.0=0.1, mon_lnin.enc.0=1, "
       "mon_upd.enc.0=0.01, num_updates=1\n")
OUTPUT_OPTION = re.compile(r"^\s+(--(?:output-dir|output|out|plot|export|ctranslate2|"
                           r"transformers))(?=[\s,=])", re.M)


def _fake_run(runs, name="deepnet-6L-6L+LR=0.001"):
    run = runs / name
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({
        "method": "deepnet", "encoder_layers": 6, "decoder_layers": 6, "status": "ok",
        "last_valid_loss": 6.2, "label": "deepnet", "dataset": "wmt17", "seed": 1,
        "num_updates": 10}))
    (run / "config.json").write_text(json.dumps({"settings": {"LR": {"value": "0.001"},
                                                              "SEED": {"value": "1"}}}))
    (run / "valid_loss.csv").write_text("num_updates,valid_loss_bits\n10,6.2\n")
    return run


@dataclass
class Output:
    """One output argument of one tool: how to call it, writing to OUTPUT, with inputs made
    under IN; which of its inputs a file output may be pointed at."""
    tool: str
    option: str
    main: str  # module:function
    argv: Callable  # (inputs dir, fixtures, output path) -> argv
    inputs: Callable = lambda inputs, fixtures: []  # files the command reads
    directory: bool = False  # the output is a directory
    name: str = "result.csv"  # a file output's name where the tool is free to write


def _monitor_log(inputs, fixtures):
    log = inputs / "train.log"
    log.write_text(LOG)
    return log


def _checkpoint(inputs, fixtures):
    target = inputs / "checkpoint_1_5.pt"
    if not target.exists():
        shutil.copyfile(fixtures["checkpoint"], target)
    return target


def _runs(inputs, fixtures):
    runs = inputs / "runs"
    if not runs.exists():
        _fake_run(runs)
    return runs


TABLE: List[Output] = [
    Output("deepnet-plot-monitors", "--output", "deepnet_fairseq.diagnostics.plot_monitors:main",
           lambda i, f, out: [str(_monitor_log(i, f)), "--output", out],
           lambda i, f: [_monitor_log(i, f)], name="result.png"),
    Output("curves", "--plot", "deepnet_fairseq.recipes.reporting.curves:main",
           lambda i, f, out: [str(_runs(i, f) / "deepnet-6L-6L+LR=0.001"), "--plot", out],
           lambda i, f: [_runs(i, f) / "deepnet-6L-6L+LR=0.001" / "valid_loss.csv"],
           name="result.png"),
    Output("curves", "--export", "deepnet_fairseq.recipes.reporting.curves:main",
           lambda i, f, out: [str(_runs(i, f) / "deepnet-6L-6L+LR=0.001"), "--export", out],
           directory=True),
    Output("lr_transfer", "--out", "deepnet_fairseq.recipes.reporting.lr_transfer:main",
           lambda i, f, out: [str(_runs(i, f)), "--out", out], directory=True),
    Output("deepnet-export", "--output", "deepnet_fairseq.export:main",
           lambda i, f, out: [str(_checkpoint(i, f)), "--output", out],
           lambda i, f: [_checkpoint(i, f)], name="result.pt"),
    Output("deepnet-export", "--ctranslate2", "deepnet_fairseq.export:main",
           lambda i, f, out: [str(_checkpoint(i, f)), "--data", str(f["data"]),
                              "--ctranslate2", out], directory=True),
    Output("deepnet-export", "--transformers", "deepnet_fairseq.export:main",
           lambda i, f, out: [str(_checkpoint(i, f)), "--data", str(f["data"]),
                              "--transformers", out], directory=True),
    Output("deepnet-average-checkpoints", "--output", "deepnet_fairseq.average_checkpoints:cli_main",
           lambda i, f, out: ["--inputs", str(_checkpoint(i, f)), "--output", out],
           lambda i, f: [_checkpoint(i, f)], name="result.pt"),
    Output("deepnet-source-use", "--out", "deepnet_fairseq.diagnostics.source_use:main",
           lambda i, f, out: [str(f["data"]), "--checkpoints", str(_checkpoint(i, f)),
                              "--sentences", "4", "--out", out],
           lambda i, f: [_checkpoint(i, f)]),
]

# output arguments the table leaves to other tests, and why
ELSEWHERE = {
    ("report", "--out"): "a sweep's results directory, written only into a directory the "
                         "recipes created and marked (tests/unit/test_recipe_reports.py)",
    ("deepnet-model-update", "--output-dir"): "trains models before it writes; its directory "
                                              "is a marked one (tests/slow/test_diagnostics_end_to_end.py)",
    ("deepnet-depth-study", "--output-dir"): "a recipe's DEEPNET_WORK, refused by the recipes' "
                                             "own checks (tests/integration/test_recipe_scripts.py)",
}

TOOLS = {"curves": "deepnet_fairseq.recipes.reporting.curves:main",
         "lr_transfer": "deepnet_fairseq.recipes.reporting.lr_transfer:main",
         "report": "deepnet_fairseq.recipes.reporting.report:main"}


PRINT_ONLY = {"deepnet-user-dir", "deepnet-model-options"}  # they write nothing but stdout


def _console_scripts():
    with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
        found = dict(re.findall(r'"(deepnet-[\w-]+)=([\w.]+:\w+)"', f.read()))
    assert PRINT_ONLY <= set(found) and len(found) > len(PRINT_ONLY)
    return {**{k: v for k, v in found.items() if k not in PRINT_ONLY}, **TOOLS}


def _function(spec):
    module, function = spec.split(":")
    return getattr(importlib.import_module(module), function)


def _call(spec, argv) -> Tuple[int, str]:
    """Run a tool's main in this process: (status, what it printed on stderr)."""
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        try:
            status = _function(spec)(argv) or 0
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else 1
    return status, err.getvalue()


def test_the_table_knows_every_output_argument():
    declared = {(o.tool, o.option) for o in TABLE} | set(ELSEWHERE)
    found = set()
    for tool, spec in _console_scripts().items():
        text = io.StringIO()
        with redirect_stdout(text), redirect_stderr(io.StringIO()):
            try:
                _function(spec)(["--help"])
            except SystemExit:
                pass
        found |= {(tool, option) for option in OUTPUT_OPTION.findall(text.getvalue())}
    assert found == declared, (f"not in the table: {sorted(found - declared)}; "
                               f"no longer in any --help: {sorted(declared - found)}")


@pytest.fixture
def fixtures(toy_data, tiny_checkpoint):
    return {"data": toy_data, "checkpoint": tiny_checkpoint}


def _case_id(output):
    return f"{output.tool}{output.option}"


FILE_OUTPUTS = [o for o in TABLE if not o.directory]


@pytest.mark.parametrize("output", FILE_OUTPUTS, ids=_case_id)
def test_an_output_onto_an_input_is_refused_and_the_input_kept(tmp_path, fixtures, output):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for victim in output.inputs(inputs, fixtures):
        before = victim.read_bytes()
        status, said = _call(output.main, output.argv(inputs, fixtures, str(victim)))
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
    if output.directory:  # learn what it writes, then plant a link at each of those files
        status, said = _call(output.main, output.argv(inputs, fixtures, str(target)))
        assert status == 0, said
        links = _files(target)
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


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.ENOSPC],
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
