"""Hostile inputs to every checkpoint reader and writer of the plugin, one table row each.

Each row: how its inputs are made (real tiny DeepNet checkpoints, broken on purpose), which
CLI or function gets them, the exit status and message expected (an unreadable checkpoint:
one line, ``cannot read PATH: CAUSE``, no traceback), and the files that must be unchanged on
disk afterwards (bytes and mtime). The CLIs run in this process through their ``main``; the
signal test, which needs a process of its own: integration/test_signals.py.
"""

import dataclasses
import io
import os
import random
import shlex
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import pytest
import torch

from deepnet_fairseq import average_checkpoints, export
from deepnet_fairseq.diagnostics import source_use
from deepnet_fairseq.recipes.evaluation import evaluate
from deepnet_fairseq.recipes.run import runner
from deepnet_fairseq.storage import checkpoint_io
from support import PY


# ---- hostile files: name -> (writer(path, good bytes, marker), expected cause) -------------------

class Payload:
    """Unpickled by a full unpickler, this runs a shell command (creates the marker file)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


def corrupt(data: bytes) -> bytes:
    """``data`` (a torch.save zip) with the bytes of its pickle inverted: still a valid zip
    archive (torch does not check the members' CRCs), but no pickle."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("/data.pkl"))
    assert info.compress_type == zipfile.ZIP_STORED
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    body = bytearray(data)
    for i in range(start + 2, start + info.file_size - 1):  # after the PROTO opcode
        body[i] ^= 0xFF
    return bytes(body)


def write_payload(path, data, marker):
    torch.save({"model": {}, "cfg": Payload(marker)}, path)


HOSTILE = {
    "truncated": (lambda p, d, m: p.write_bytes(d[:len(d) // 2]),
                  "not a torch checkpoint (truncated or not a zip archive)"),
    "empty": (lambda p, d, m: p.write_bytes(b""), "empty file"),
    "random": (lambda p, d, m: p.write_bytes(random.Random(0).randbytes(4096)),
               "not a torch checkpoint (truncated or not a zip archive)"),
    "text": (lambda p, d, m: p.write_text("checkpoint_last.pt\nnot a checkpoint\n"),
             "not a torch checkpoint (truncated or not a zip archive)"),
    "zip-corrupt": (lambda p, d, m: p.write_bytes(corrupt(d)), "corrupt data (UnpicklingError: "),
    "payload": (write_payload, "refused by the weights-only unpickler: Trying to load "
                               "unsupported GLOBAL posix.system"),
}


# ---- the table ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Ctx:
    tmp: Path
    good: Path
    data: Path
    marker: Path
    dead: int = 0  # the pid of a process that has ended

    def copy_good(self, *parts) -> Path:
        path = self.tmp.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.good, path)
        return path


@dataclasses.dataclass
class Row:
    name: str
    make: Callable[[Ctx], None]        # writes the row's inputs under ctx.tmp
    call: Callable[[Ctx], object]      # the CLI or function; returns its status or message
    code: int                          # exit status (0: returned normally)
    expect: str                        # substring of stderr's last line, or of what it returned
    unchanged: Tuple[str, ...] = ()    # paths under ctx.tmp, the same bytes and mtime after
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    check: Optional[Callable[[Ctx], None]] = None  # anything else to verify afterwards


def hostile_file(kind: str, *parts) -> Callable[[Ctx], None]:
    def make(ctx: Ctx) -> None:
        path = ctx.tmp.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        HOSTILE[kind][0](path, ctx.good.read_bytes(), ctx.marker)
    return make


def both(*makers):
    def make(ctx):
        for maker in makers:
            maker(ctx)
    return make


def average(*argv):
    return lambda ctx: average_checkpoints.cli_main([a.format(t=ctx.tmp) for a in argv])


def export_(*argv):
    return lambda ctx: export.main([a.format(t=ctx.tmp, data=ctx.data) for a in argv])


def source_use_(*argv):
    return lambda ctx: source_use.main([a.format(t=ctx.tmp, data=ctx.data) for a in argv])


def evaluate_(ctx):
    return evaluate.main(["--run-dir", str(ctx.tmp / "run"), "--average-last", "1",
                          "--directions", "src-tgt", "--references", str(ctx.tmp), "--",
                          str(ctx.data)])


def repair(ctx):
    return runner.repair_last_checkpoint(str(ctx.tmp / "checkpoints"))


def replaced_by_good(ctx):
    last = ctx.tmp / "checkpoints" / "checkpoint_last.pt"
    assert last.read_bytes() == ctx.good.read_bytes()


NO_PICKLES = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}


def unreadable_rows():
    """Every hostile file given to every reader."""
    rows = []
    for kind, (_, cause) in HOSTILE.items():
        env = NO_PICKLES if kind == "payload" else {}
        line = "cannot read {bad}: " + cause
        rows += [
            Row(f"{kind}-average", hostile_file(kind, "bad.pt"),
                average("--inputs", "{t}/bad.pt", "--output", "{t}/avg.pt"), 1,
                line.format(bad="{t}/bad.pt"), ("bad.pt",), env),
            Row(f"{kind}-export", hostile_file(kind, "bad.pt"),
                export_("{t}/bad.pt", "--output", "{t}/out.pt"), 1,
                line.format(bad="{t}/bad.pt"), ("bad.pt",), env),
            Row(f"{kind}-source-use", hostile_file(kind, "bad.pt"),
                source_use_("{data}", "--checkpoints", "{t}/bad.pt"), 1,
                line.format(bad="{t}/bad.pt"), ("bad.pt",), env),
            Row(f"{kind}-evaluate",
                both(lambda ctx: ctx.copy_good("run", "checkpoints", "checkpoint_last.pt"),
                     hostile_file(kind, "run", "checkpoints", "checkpoint_1_5.pt")),
                evaluate_, 1, line.format(bad="{t}/run/checkpoints/checkpoint_1_5.pt"),
                ("run/checkpoints/checkpoint_last.pt", "run/checkpoints/checkpoint_1_5.pt"), env),
            Row(f"{kind}-resume",
                both(lambda ctx: ctx.copy_good("checkpoints", "checkpoint_1_5.pt"),
                     hostile_file(kind, "checkpoints", "checkpoint_last.pt")),
                repair, 0, f"checkpoint_last.pt was unreadable ({cause}",
                ("checkpoints/checkpoint_1_5.pt",), env, replaced_by_good),
        ]
    return rows


def good_as(*parts):
    return lambda ctx: ctx.copy_good(*parts)


def three_updates(ctx):
    for name in ("checkpoint_1_5.pt", "checkpoint_1_10.pt", "checkpoint_2_15.pt"):
        ctx.copy_good("ckpts", name)


def unrelated_output(ctx):
    (ctx.tmp / "taken.pt").write_bytes(b"someone else's file\n")


def readable(name):
    def check(ctx):
        assert "model" in checkpoint_io.read_checkpoint(str(ctx.tmp / name))
    return check


def symlink(name, target):
    def make(ctx):
        os.symlink(ctx.tmp / target, ctx.tmp / name)
    return make


def other_dictionary(ctx):
    """The toy data with one word more in its dictionaries: not the model's."""
    other = ctx.tmp / "otherdata"
    shutil.copytree(ctx.data, other)
    for lang in ("src", "tgt"):
        text = (ctx.data / f"dict.{lang}.txt").read_text()
        (other / f"dict.{lang}.txt").write_text(text + "unseen 1\n")


def same_size_other_tokens(ctx):
    """The toy data with two words of its dictionaries exchanged: as many entries as the
    model's, other tokens (as prepare with another TRAIN_LINES can give)."""
    other = ctx.tmp / "swapped"
    shutil.copytree(ctx.data, other)
    for lang in ("src", "tgt"):
        lines = (ctx.data / f"dict.{lang}.txt").read_text().splitlines(keepends=True)
        lines[0], lines[1] = lines[1], lines[0]
        (other / f"dict.{lang}.txt").write_text("".join(lines))


def trained_on(directory, name):
    """The good checkpoint as NAME, recorded as trained on {t}/DIRECTORY."""
    def make(ctx):
        state = checkpoint_io.read_checkpoint(str(ctx.good))
        state["cfg"]["task"]["data"] = str(ctx.tmp / directory)
        torch.save(state, ctx.tmp / name)
    return make


def ct2_dir(ctx):
    (ctx.tmp / "ct2").mkdir()
    (ctx.tmp / "ct2" / "model.bin").write_bytes(b"a model\n")


def dead_pid() -> int:
    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()
    return dead.pid


def stale_ct2(ctx):
    ctx.dead = dead_pid()
    (ctx.tmp / f".tmp-ctranslate2-ct2.{ctx.dead}.abcd1234").mkdir()
    (ctx.tmp / f".tmp-ctranslate2-ct2.{ctx.dead}.abcd1234" / "model.bin").write_bytes(b"part")


def ct2_replaced_and_stale_removed(ctx):
    assert (ctx.tmp / "ct2" / "model.bin").read_bytes() != b"a model\n"  # the new model
    assert (ctx.tmp / "ct2" / "config.json").is_file()
    assert sorted(os.listdir(ctx.tmp)) == ["ct2", "in.pt"]


def stale_temporaries(ctx):
    """Temporaries of a killed run (its process is gone) for avg.pt and for another output,
    and one of a process that still runs (pid 1): only the first may go."""
    ctx.dead = dead_pid()
    ctx.copy_good("in.pt")
    for name in (f".tmp-avg.pt.{ctx.dead}.abcd1234", f".tmp-other.pt.{ctx.dead}.abcd1234",
                 ".tmp-avg.pt.1.abcd1234"):
        (ctx.tmp / name).write_bytes(b"partial")
    (ctx.tmp / f".tmp-ctranslate2-ct2.{ctx.dead}.abcd1234").mkdir()


def only_the_stale_one_removed(ctx):
    assert sorted(n for n in os.listdir(ctx.tmp) if n.startswith(".tmp-")) == [
        ".tmp-avg.pt.1.abcd1234", f".tmp-ctranslate2-ct2.{ctx.dead}.abcd1234",
        f".tmp-other.pt.{ctx.dead}.abcd1234"]  # another output's, a live process's: kept


OTHER_ROWS = [
    # outputs that would destroy an input: refused, even with --force
    Row("export-output-is-input", good_as("in.pt"),
        export_("{t}/in.pt", "--output", "{t}/in.pt", "--force"), 2,
        "--output {t}/in.pt is the input {t}/in.pt: refusing to write over it",
        ("in.pt",)),
    Row("export-output-links-to-input", both(good_as("in.pt"), symlink("link.pt", "in.pt")),
        export_("{t}/in.pt", "--output", "{t}/link.pt", "--force"), 2,
        "--output {t}/link.pt is the input {t}/in.pt", ("in.pt",)),
    Row("export-ctranslate2-holds-input", good_as("ct2", "in.pt"),
        export_("{t}/ct2/in.pt", "--ctranslate2", "{t}/ct2", "--force"), 2,
        "--ctranslate2 {t}/ct2 holds the input {t}/ct2/in.pt", ("ct2/in.pt",)),
    Row("average-output-is-an-input", three_updates,
        average("--inputs", "{t}/ckpts", "--num-update-checkpoints", "2",
                "--output", "{t}/ckpts/checkpoint_2_15.pt", "--force"), 2,
        "--output {t}/ckpts/checkpoint_2_15.pt is the input {t}/ckpts/checkpoint_2_15.pt",
        ("ckpts/checkpoint_1_10.pt", "ckpts/checkpoint_2_15.pt")),
    Row("average-output-links-to-an-input", both(good_as("in.pt"), symlink("link.pt", "in.pt")),
        average("--inputs", "{t}/in.pt", "--output", "{t}/link.pt"), 2,
        "--output {t}/link.pt is the input {t}/in.pt", ("in.pt",)),
    # an unrelated existing output: kept without --force, replaced with it
    Row("average-existing-output", both(good_as("in.pt"), unrelated_output),
        average("--inputs", "{t}/in.pt", "--output", "{t}/taken.pt"), 2,
        "--output {t}/taken.pt exists; pass --force to replace it, or choose another --output",
        ("in.pt", "taken.pt")),
    Row("average-existing-output-forced", both(good_as("in.pt"), unrelated_output),
        average("--inputs", "{t}/in.pt", "--output", "{t}/taken.pt", "--force"), 0,
        "wrote {t}/taken.pt", ("in.pt",), check=readable("taken.pt")),
    Row("export-existing-output", both(good_as("in.pt"), unrelated_output),
        export_("{t}/in.pt", "--output", "{t}/taken.pt"), 2,
        "--output {t}/taken.pt exists; pass --force to replace it", ("in.pt", "taken.pt")),
    Row("export-existing-output-forced", both(good_as("in.pt"), unrelated_output),
        export_("{t}/in.pt", "--output", "{t}/taken.pt", "--force"), 0,
        "wrote {t}/taken.pt", ("in.pt",), check=readable("taken.pt")),
    Row("export-existing-ctranslate2-dir", both(good_as("in.pt"), ct2_dir),
        export_("{t}/in.pt", "--ctranslate2", "{t}/ct2"), 2,
        "--ctranslate2 {t}/ct2 is a non-empty directory; pass --force to replace it",
        ("in.pt", "ct2/model.bin")),
    # arguments that were silently misread
    Row("average-zero-checkpoints", three_updates,
        average("--inputs", "{t}/ckpts", "--num-update-checkpoints", "0", "--output", "{t}/a.pt"),
        2, "argument --num-update-checkpoints: must be at least 1, got 0"),
    Row("average-negative-checkpoints", three_updates,
        average("--inputs", "{t}/ckpts", "--num-update-checkpoints", "-2", "--output",
                "{t}/a.pt"), 2, "argument --num-update-checkpoints: must be at least 1, got -2"),
    Row("average-zero-epoch-checkpoints", three_updates,
        average("--inputs", "{t}/ckpts", "--num-epoch-checkpoints", "0", "--output", "{t}/a.pt"),
        2, "argument --num-epoch-checkpoints: must be at least 1, got 0"),
    Row("source-use-missing-data", good_as("in.pt"),
        source_use_("{t}/nowhere", "--checkpoints", "{t}/in.pt"), 2,
        "DATA {t}/nowhere is not a directory", ("in.pt",)),
    Row("source-use-data-without-dictionaries", both(good_as("in.pt"),
                                                     lambda ctx: (ctx.tmp / "empty").mkdir()),
        source_use_("{t}/empty", "--checkpoints", "{t}/in.pt"), 2,
        "DATA {t}/empty has no dict.*.txt", ("in.pt",)),
    Row("source-use-data-other-dictionary", both(good_as("in.pt"), other_dictionary),
        source_use_("{t}/otherdata", "--checkpoints", "{t}/in.pt", "--sentences", "4"), 2,
        "{t}/in.pt: {t}/otherdata/dict.src.txt has 41 entries but the checkpoint's encoder "
        "embedding has 40 rows", ("in.pt", "otherdata/dict.src.txt")),
    Row("export-data-other-dictionary", both(good_as("in.pt"), other_dictionary),
        export_("{t}/in.pt", "--output", "{t}/out.pt", "--data", "{t}/otherdata"), 2,
        "{t}/otherdata/dict.src.txt has 41 entries but the checkpoint's encoder embedding has "
        "40 rows", ("in.pt", "otherdata/dict.src.txt")),
    # a dictionary of the same size with other tokens: compared with the one the checkpoint
    # was trained on (its recorded data directory), naming both and the first difference
    Row("source-use-data-same-size-other-tokens", both(good_as("in.pt"), same_size_other_tokens),
        source_use_("{t}/swapped", "--checkpoints", "{t}/in.pt", "--sentences", "4"), 2,
        "{t}/in.pt: {t}/swapped/dict.src.txt and {data}/dict.src.txt differ at entry 4",
        ("in.pt", "swapped/dict.src.txt")),
    Row("export-data-same-size-other-tokens", both(good_as("in.pt"), same_size_other_tokens),
        export_("{t}/in.pt", "--output", "{t}/out.pt", "--data", "{t}/swapped"), 2,
        "{t}/swapped/dict.src.txt and {data}/dict.src.txt differ at entry 4", ("in.pt",)),
    Row("average-same-size-other-dictionaries",
        both(good_as("in.pt"), same_size_other_tokens, trained_on("swapped", "other.pt")),
        average("--inputs", "{t}/in.pt", "{t}/other.pt", "--output", "{t}/avg.pt"), 2,
        "{t}/other.pt was trained on other dictionaries than {t}/in.pt ({t}/swapped/dict.src.txt "
        "and {data}/dict.src.txt differ at entry 4", ("in.pt", "other.pt")),
    # the recorded data directory gone (a moved work directory): the sizes are what is checked
    Row("average-recorded-data-gone", both(good_as("in.pt"), trained_on("gone", "other.pt")),
        average("--inputs", "{t}/in.pt", "{t}/other.pt", "--output", "{t}/avg.pt"), 0,
        "wrote {t}/avg.pt", ("in.pt", "other.pt")),
    Row("export-ctranslate2-forced", both(good_as("in.pt"), ct2_dir, stale_ct2),
        export_("{t}/in.pt", "--ctranslate2", "{t}/ct2", "--force"), 0, "wrote {t}/ct2",
        ("in.pt",), check=ct2_replaced_and_stale_removed),
    # a killed run's temporary is removed by the next run, and only that one
    Row("stale-temporary-removed", stale_temporaries,
        average("--inputs", "{t}/in.pt", "--output", "{t}/avg.pt"), 0, "wrote {t}/avg.pt",
        ("in.pt", ".tmp-avg.pt.1.abcd1234"), check=only_the_stale_one_removed),
]

ROWS = unreadable_rows() + OTHER_ROWS


def snapshot(ctx: Ctx, paths) -> dict:
    return {p: ((ctx.tmp / p).read_bytes(), os.stat(ctx.tmp / p, follow_symlinks=False).st_mtime_ns)
            for p in paths}


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_hostile_input(row, tiny_checkpoint, toy_data, tmp_path, capsys, monkeypatch):
    ctx = Ctx(tmp=tmp_path, good=tiny_checkpoint, data=toy_data, marker=tmp_path.parent / "MARKER")
    if ctx.marker.exists():
        ctx.marker.unlink()
    row.make(ctx)
    before = snapshot(ctx, row.unchanged)
    for name, value in row.env.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    try:
        result = row.call(ctx)
        code = result if isinstance(result, int) else 0
    except SystemExit as stop:
        code, result = stop.code, None
    err = capsys.readouterr().err
    expect = row.expect.format(t=tmp_path, data=toy_data)
    assert code == row.code, err
    assert "Traceback" not in err
    if isinstance(result, str):  # a function's message (repair_last_checkpoint)
        assert expect in result
    else:
        assert expect in err.strip().splitlines()[-1], err
    if row.code == 1:  # an unreadable checkpoint: exactly one line naming it
        assert err.strip().splitlines()[-1].startswith("cannot read ")
    assert snapshot(ctx, row.unchanged) == before
    assert not ctx.marker.exists(), "the checkpoint's pickle ran code"
    if row.check:
        row.check(ctx)


def test_the_payload_runs_code_when_torch_is_not_told_weights_only(tmp_path, monkeypatch):
    """The control for the payload rows: with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 a torch.load
    that leaves weights_only to torch runs the pickle's code, so the rows test something."""
    marker = tmp_path / "MARKER"
    write_payload(tmp_path / "payload.pt", b"", marker)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.warns(UserWarning, match="forcing weights_only=False"):
        torch.load(tmp_path / "payload.pt")
    assert marker.exists()
    marker.unlink()
    with pytest.raises(checkpoint_io.CheckpointError, match="refused by the weights-only"):
        checkpoint_io.read_checkpoint(str(tmp_path / "payload.pt"))
    assert not marker.exists()


def test_no_unreadable_update_checkpoint_to_resume_from(tmp_path):
    (tmp_path / "checkpoint_last.pt").write_bytes(b"")
    (tmp_path / "checkpoint_1_5.pt").write_bytes(b"PK\x03\x04 cut short")
    message = runner.repair_last_checkpoint(str(tmp_path))
    assert "moved to checkpoint_last.pt.unreadable, training starts again" in message
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_1_5.pt", "checkpoint_last.pt.unreadable"]


@pytest.mark.parametrize("entry", ["load_checkpoint_to_cpu", "load_model_ensemble_and_task"])
def test_fairseqs_own_loading_is_weights_only_once_the_plugin_is_registered(tmp_path, monkeypatch,
                                                                           entry):
    """What fairseq-generate --path, fairseq-interactive, fairseq-train --restore-file and the
    hub interface call: with the plugin registered, the payload does not run, even with
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 (the control above shows it would)."""
    from fairseq import checkpoint_utils

    import deepnet_fairseq

    deepnet_fairseq.register()
    marker = tmp_path / "MARKER"
    write_payload(tmp_path / "evil.pt", b"", marker)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(checkpoint_io.CheckpointError, match="refused by the weights-only"):
        if entry == "load_checkpoint_to_cpu":
            checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "evil.pt"))
        else:
            checkpoint_utils.load_model_ensemble_and_task([str(tmp_path / "evil.pt")])
    assert not marker.exists(), "the checkpoint's pickle ran code"


def test_fairseqs_torch_load_is_weights_only_under_any_wrapper(tmp_path, monkeypatch):
    """Even with load_checkpoint_to_cpu put back to fairseq's own function (a wrapper of
    someone's restored out of order), fairseq's torch.load is weights-only."""
    from fairseq import checkpoint_utils

    import deepnet_fairseq

    deepnet_fairseq.register()
    marker = tmp_path / "MARKER"
    write_payload(tmp_path / "evil.pt", b"", marker)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with open(tmp_path / "evil.pt", "rb") as handle:
        with pytest.raises(Exception, match="[Ww]eights.only|Unsupported global"):
            checkpoint_utils.torch.load(handle, map_location="cpu")
    assert not marker.exists(), "the checkpoint's pickle ran code"
