"""Hostile and careless inputs to the recipe runtime and the quickstart, one row each: the input,
the message expected, and what must be unchanged (or not created) on disk. The checkpoint and
corpus cases are in test_hostile_checkpoints.py and test_hostile_data.py."""

import json
import os
import re
import signal
import subprocess
from dataclasses import dataclass, field
from typing import Dict

import pytest

from deepnet_fairseq.recipes import __main__ as recipes_cli, quickstart
from deepnet_fairseq.recipes.run import runner
from deepnet_fairseq.storage import directories as workdir, fileio
from deepnet_fairseq.storage.records import write_record
from deepnet_fairseq.recipes.spec.settings import (DATA, SETTINGS, TRAINED, SettingError, affecting,
                                                   resolve)
from deepnet_fairseq.recipes.data.checks import data_otherwise, prepared_otherwise
from deepnet_fairseq.recipes.evaluation import step as evaluation_step
from deepnet_fairseq.recipes.evaluation.step import evaluate as evaluate_step
from deepnet_fairseq.recipes.pipeline.sweeps import sweep as run_sweep
from deepnet_fairseq.recipes.spec.paths import paths
from support import REPO, settings_read


BASE = {"DEVICE": "cpu", "SIZE": "smoke"}


@dataclass
class Row:
    name: str
    env: Dict[str, str]
    message: str
    extra: Dict[str, str] = field(default_factory=dict)


# Settings refused by resolve(), before any directory exists.
SETTING_ROWS = [
    Row("absolute RUN_NAME", {"RUN_NAME": "/tmp/victim"}, "plain directory name"),
    Row("RUN_NAME with ..", {"RUN_NAME": "../../victim"}, "plain directory name"),
    Row("RUN_NAME hidden", {"RUN_NAME": ".."}, "plain directory name"),
    Row("negative LR", {"LR": "-0.001"}, "LR=-0.001 (from environment LR): must be > 0"),
    Row("zero LR", {"LR": "0"}, "must be > 0"),
    Row("betas out of range", {"ADAM_BETAS": "(2, -1)"}, "both betas must lie in [0, 1)"),
    Row("training that never ends", {"MAX_UPDATE": "0", "MAX_EPOCH": "0"}, "would never end"),
    Row("lower-case name", {"layers": "2"}, "layers=2: setting names are upper case; did you "
                                             "mean LAYERS?"),
    Row("lower-case prefixed name", {"deepnet_lr": "1"}, "did you mean DEEPNET_LR?"),
    Row("unknown device", {"DEVICE": "tpu"}, "expected one of auto, cuda, cpu"),
    Row("zero layers", {"LAYERS": "0"}, "LAYERS=0 (from environment LAYERS): must be >= 1"),
    Row("zero decoder layers", {"DEC_LAYERS": "0"}, "DEC_LAYERS=0"),
    Row("source equals target", {"SRC": "en", "TGT": "en"}, "copy task"),
    Row("dropout of 1", {"DROPOUT": "1"}, "DROPOUT=1"),
    Row("width not a multiple of heads", {"EMBED_DIM": "65"}, "multiple of HEADS"),
    Row("beam as wide as the vocabulary", {"BEAM": "1000", "VOCAB": "1000"},
        "BEAM=1000 (from environment BEAM): must be smaller than VOCAB=1000"),
    Row("unknown encoding", {"ENCODING": "klingon"}, "not a text encoding Python knows"),
    Row("zero checkpoints averaged", {"AVERAGE_LAST": "0"}, "AVERAGE_LAST=0"),
    Row("port out of range", {"MASTER_PORT": "70000"}, "must be >= 1 and < 65536"),
]


@pytest.mark.parametrize("row", SETTING_ROWS, ids=lambda row: row.name)
def test_bad_settings_are_refused_before_anything_is_written(row, tmp_path):
    env = {**BASE, "DEEPNET_WORK": str(tmp_path / "work"), **row.env}
    with pytest.raises(SettingError) as err:
        resolve("wmt17", env, REPO)
    assert row.message in str(err.value)
    assert not (tmp_path / "work").exists()


def prepared_work(tmp_path):
    """A work directory whose data step is marked done (training itself is not reached)."""
    work = tmp_path / "work"
    workdir.make_dirs(str(work / "data" / "bin"))
    (work / "data" / "bin" / ".done").touch()
    return work


def train(monkeypatch, capsys, env):
    for name, value in {**BASE, **env}.items():
        monkeypatch.setenv(name, value)
    code = recipes_cli.main(["wmt17", "train"])
    return code, capsys.readouterr().err


def test_a_run_directory_the_recipes_did_not_create_is_left_alone(tmp_path, monkeypatch, capsys):
    work = prepared_work(tmp_path)
    mine = work / "runs" / "deepnet-1L-1L"
    mine.mkdir(parents=True)
    for name in ("config.json", "command.sh"):
        (mine / name).write_text("the user's own\n")
    (mine / "results").mkdir()
    before = sorted(os.listdir(mine))
    code, err = train(monkeypatch, capsys, {"DEEPNET_WORK": str(work), "LAYERS": "1"})
    assert code == 2 and f"{mine} exists and the recipes did not create it" in err
    assert sorted(os.listdir(mine)) == before
    assert (mine / "config.json").read_text() == "the user's own\n"


class _FairseqStarted(Exception):
    pass


def _train_until_fairseq(monkeypatch, capsys, work):
    """Run the train step up to the start of fairseq-train (not run): (status, stderr,
    fairseq's command or None, what every directory under WORK held then)."""
    seen = {}

    def fairseq(command, *args, **kwargs):
        seen["command"] = command
        seen["marked"] = {p: workdir.is_ours(p) for p in _directories(work)}
        raise _FairseqStarted

    monkeypatch.setattr(runner, "run_forwarding", fairseq)
    try:
        code, err = train(monkeypatch, capsys, {"DEEPNET_WORK": str(work), "LAYERS": "1"})
    except _FairseqStarted:
        code, err = None, capsys.readouterr().err
    return code, err, seen.get("command"), seen.get("marked", {})


def _directories(work):
    return sorted(str(p) for p in work.rglob("*") if p.is_dir() and not p.is_symlink())


def _handed_over(work, command):
    """The directories under WORK in fairseq's command line: its data and --save-dir."""
    return [arg for arg in command if arg.startswith(str(work) + os.sep)]


def _trained_once(tmp_path, monkeypatch, capsys):
    work = prepared_work(tmp_path)
    (work / "data" / "bin" / "dict.en.txt").write_text("a 1\n")
    code, err, command, marked = _train_until_fairseq(monkeypatch, capsys, work)
    assert command, err
    return work, command, marked


def test_every_directory_handed_to_fairseq_is_made_and_marked_first(tmp_path, monkeypatch,
                                                                     capsys):
    work, command, marked = _trained_once(tmp_path, monkeypatch, capsys)
    for directory in _handed_over(work, command):
        assert marked.get(directory), f"{directory} handed to fairseq unmade or unmarked"
    assert all(marked.values()), [d for d, ours in marked.items() if not ours]


def test_a_link_planted_for_a_directory_of_a_run_is_not_followed(tmp_path, monkeypatch, capsys):
    """Each directory the train step makes or hands to fairseq (found by running it, up to
    fairseq), replaced by a link to a copy elsewhere, marker included: the step stops with
    one line naming the link before fairseq starts, and nothing elsewhere changes."""
    import shutil

    work, _, marked = _trained_once(tmp_path / "first", monkeypatch, capsys)
    relative = [os.path.relpath(d, work) for d in marked if d != str(work)]
    relative = [r for r in relative if not r.startswith("data")]  # read here, made by prepare
    assert {"runs", "runs/deepnet-1L-1L", "runs/deepnet-1L-1L/checkpoints"} <= set(relative)
    for number, name in enumerate(relative):
        case = tmp_path / f"case-{number}"
        shutil.copytree(work, case / "work", symlinks=True)
        elsewhere = case / "elsewhere"
        shutil.move(case / "work" / name, elsewhere)
        (case / "work" / name).symlink_to(elsewhere, target_is_directory=True)
        before = {str(p): p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()}
        code, err, command, _ = _train_until_fairseq(monkeypatch, capsys, case / "work")
        assert command is None and code == 1, (name, err)
        last = err.strip().splitlines()[-1]
        assert last.startswith(f"error: {case / 'work' / name}: a symbolic link"), err
        assert {str(p): p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()} == before


def test_a_second_launch_of_a_run_says_which_process_holds_it(tmp_path, monkeypatch, capsys):
    work = prepared_work(tmp_path)
    run_dir = workdir.make_dirs(str(work / "runs" / "deepnet-1L-1L"))
    with workdir.RunLock(run_dir, step="evaluate"):  # the step holding it is named
        code, err = train(monkeypatch, capsys, {"DEEPNET_WORK": str(work), "LAYERS": "1"})
    assert code == 2 and f"is in use by pid {os.getpid()}" in err
    assert "(evaluate): one step (train or evaluate) at a time per run directory" in err
    assert not os.path.exists(os.path.join(run_dir, "status.json"))


def test_an_unwritable_work_directory_ends_in_one_line(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    work = blocker / "work"
    code, err = train(monkeypatch, capsys, {"DEEPNET_WORK": str(work), "LAYERS": "1"})
    # the data check comes first and names the missing data; a write below a file fails so:
    assert code in (1, 2) and "Traceback" not in err
    with pytest.raises(OSError) as raised:
        workdir.make_dirs(str(work / "runs"))
    line = fileio.describe_os_error(raised.value)
    assert str(work) in line and "Not a directory" in line and "\n" not in line


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 kB tmpfs (root can mount one, as on the project's machines and CI)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root): the full-disk case is not checked")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_leaves_the_status_failed_not_running(tiny_disk):
    run_dir = workdir.make_dirs(str(tiny_disk / "run"))
    status = os.path.join(run_dir, "status.json")
    with open(status, "w") as handle:
        json.dump({"status": "running", "reason": "attempt 1 started"}, handle)
    filler = os.open(os.path.join(tiny_disk, "filler"), os.O_WRONLY | os.O_CREAT)
    with pytest.raises(OSError):  # fill the disk
        while True:
            os.write(filler, b"\0" * 4096)
    os.close(filler)
    error = OSError(28, "No space left on device", os.path.join(run_dir, "train.log"))
    runner._mark_failed(run_dir, fileio.describe_os_error(error))
    with open(status) as handle:
        written = json.load(handle)
    assert written["status"] == "failed"
    assert "No space left on device; free some space" in written["reason"]
    assert not [name for name in os.listdir(run_dir) if name.startswith(".tmp-")]


def test_stale_temporaries_of_a_killed_attempt_are_found(tmp_path):
    run_dir = workdir.make_dirs(str(tmp_path / "run"))
    os.makedirs(os.path.join(run_dir, "checkpoints"))
    stale = [os.path.join(run_dir, ".tmp-abc123"),
             os.path.join(run_dir, "checkpoints", "checkpoint_1_20.pt.tmp")]
    kept = [os.path.join(run_dir, "notes.txt"),
            os.path.join(run_dir, "checkpoints", "checkpoint_1_10.pt")]
    for path in stale + kept:
        open(path, "w").close()
    assert runner._stale_temporaries(run_dir) == sorted(stale)


# The quickstart's settings, checked before anything runs: its own two, then the recipes'.
QUICKSTART_ROWS = [
    Row("misspelled name", {"MAX_UPDATES": "5"}, "did you mean MAX_UPDATE?"),
    Row("lower-case name", {"size": "smoke"}, "size=smoke: setting names are upper case"),
    Row("unknown device", {"DEVICE": "tpu"}, "DEVICE=tpu: the quickstart runs on cpu or cuda"),
    Row("unknown size", {"SIZE": "mini"}, "the quickstart's sizes are quickstart and smoke"),
    Row("zero updates", {"MAX_UPDATE": "0"}, "MAX_UPDATE and MAX_EPOCH are both 0"),
    Row("local text without a directory", {"SOURCE": "local"}, "SOURCE=local needs LOCAL_DIR"),
]


@pytest.mark.parametrize("row", QUICKSTART_ROWS, ids=lambda row: row.name)
def test_quickstart_settings_are_checked(row, tmp_path, capsys, monkeypatch):
    for name in ("SIZE", "DEVICE", "SOURCE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {**row.env, "DEEPNET_WORK": str(tmp_path / "work")}.items():
        monkeypatch.setenv(name, value)
    assert quickstart.main([]) == 2
    assert row.message in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "work" / "runs")  # nothing trained


def test_quickstart_leaves_a_directory_it_did_not_create_alone(tmp_path, capsys, monkeypatch):
    """DEEPNET_WORK may be any directory; the data directory in it must be the recipes'."""
    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "config.json").write_text("x")
    monkeypatch.setenv("SIZE", "smoke")
    monkeypatch.setenv("DEEPNET_WORK", str(mine))
    handler_before = signal.getsignal(signal.SIGTERM)
    assert quickstart.main([]) == 2
    assert f"{mine / 'data'} exists and the recipes did not create it" in capsys.readouterr().err
    assert os.listdir(mine) == ["data"] and os.listdir(mine / "data") == ["config.json"]
    assert (mine / "data" / "config.json").read_text() == "x"
    assert signal.getsignal(signal.SIGTERM) == handler_before  # the caller's handler is back


def test_training_progress_line_has_update_validation_and_eta():
    from deepnet_fairseq.recipes.run.runlog import Progress

    progress = Progress(total=1000)
    progress.feed("2026-01-01 10:00:00 | INFO | "
                  "train_inner | epoch 001:  25 / 200 loss=9.1, num_updates=25, lr=1e-4")
    progress.first = (25, progress.first[1] - 10.0)  # 10 s ago
    progress.feed("2026-01-01 10:00:00 | INFO | "
                  "train_inner | epoch 001:  50 / 200 loss=8.0, num_updates=50, lr=2e-4")
    progress.feed("2026-01-01 10:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | "
                  "loss 7.25 | nll_loss 7.0 | num_updates 50")
    line = progress.line()
    assert line.startswith("update 50/1000 (5%)")
    # the nll (fairseq's nll_loss), not the label-smoothed loss: docs/findings.md's figure
    assert "validation nll 7.00 bits at update 50" in line and "7.25" not in line
    # 25 updates in about 10 s: 950 left take about 380 s
    eta = int(line.split("ETA ")[1].split(" min")[0])
    assert 5 <= eta <= 7
    epochs = Progress(total=0)  # an epoch limit decides: no fraction, no ETA
    epochs.feed("2026-01-01 10:00:00 | INFO | "
                "train_inner | epoch 001:  25 / 200 loss=9.1, num_updates=25, lr=1e-4")
    assert epochs.line().startswith("update 25, no validation yet") and "ETA" not in epochs.line()


@pytest.mark.parametrize("directory", ["eval", "eval.tmp"])
def test_evaluation_leaves_an_eval_directory_it_did_not_create_alone(tmp_path, capsys, directory):
    from deepnet_fairseq.recipes.evaluation import evaluate

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "checkpoint_last.pt").write_bytes(b"")
    (run_dir / directory).mkdir()
    (run_dir / directory / "mine.txt").write_text("x")
    with pytest.raises(SystemExit) as exit_:
        evaluate.main(["--run-dir", str(run_dir), "--average-last", "2", "--directions", "en-de",
                       "--references", str(tmp_path), "--", str(tmp_path)])
    assert exit_.value.code == 2
    assert f"{run_dir / directory} exists and the recipes did not create it" in \
        capsys.readouterr().err
    assert (run_dir / directory / "mine.txt").read_text() == "x"


@pytest.mark.parametrize("directory", ["eval", "eval.tmp"])
def test_evaluation_follows_no_link_planted_for_its_directories(tmp_path, capsys, directory):
    """In a run directory of the recipes, eval/ or eval.tmp/ (fairseq-generate's
    --results-path) as a link to a marked directory elsewhere: refused in one line naming the
    link, before anything is generated; what it points to is unchanged."""
    from deepnet_fairseq.recipes.evaluation import evaluate

    run_dir = workdir.make_dirs(str(tmp_path / "run"))
    checkpoints = workdir.make_dirs(os.path.join(run_dir, "checkpoints"))
    with open(os.path.join(checkpoints, "checkpoint_last.pt"), "wb"):
        pass
    elsewhere = workdir.make_dirs(str(tmp_path / "elsewhere"))
    with open(os.path.join(elsewhere, "theirs.txt"), "w") as handle:
        handle.write("keep")
    os.symlink(elsewhere, os.path.join(run_dir, directory))
    before = sorted(os.listdir(elsewhere))
    with pytest.raises(SystemExit) as exit_:
        evaluate.main(["--run-dir", run_dir, "--average-last", "1", "--directions", "en-de",
                       "--references", str(tmp_path), "--", str(tmp_path)])
    assert exit_.value.code in (1, 2)
    err = capsys.readouterr().err
    assert os.path.join(run_dir, directory) in err.strip().splitlines()[-1], err
    assert "Traceback" not in err
    assert sorted(os.listdir(elsewhere)) == before


@pytest.mark.parametrize("count", ["0", "-2"])
def test_evaluation_averages_at_least_one_checkpoint(tmp_path, capsys, count):
    from deepnet_fairseq.recipes.evaluation import evaluate

    with pytest.raises(SystemExit):
        evaluate.main(["--run-dir", str(tmp_path), "--average-last", count, "--directions",
                       "en-de", "--references", str(tmp_path), "--", str(tmp_path)])
    assert "--average-last" in capsys.readouterr().err


def _prepare_cfg(work, **env):
    from deepnet_fairseq.recipes.spec import settings

    return settings.resolve("wmt17", {"DEEPNET_WORK": str(work), "SIZE": "smoke",
                                      "SOURCE": "multi30k", "DEVICE": "cpu", **env}, REPO,
                            lambda: 0)


def test_data_prepared_with_other_settings_is_refused_not_reused(tmp_path):
    """Re-preparing a data directory with another VOCAB (any data setting): refused, naming
    the setting's two values, before anything is written; the same settings go on."""
    from deepnet_fairseq.recipes.data import prepare

    work = tmp_path / "work"
    data = workdir.make_dirs(str(work / "data"))
    first = _prepare_cfg(work, VOCAB="500")
    write_record(os.path.join(data, "config.json"), "data-config",
                 {"step": "prepare", "dataset": "wmt17", "settings": first.as_json()})
    assert prepared_otherwise(first, data) is None  # nothing prepared yet
    workdir.make_dirs(os.path.join(data, "raw"))
    open(os.path.join(data, "raw", ".done"), "w").close()
    assert prepared_otherwise(first, data) is None
    before = sorted(os.listdir(data))
    with pytest.raises(prepare.PrepareError, match="VOCAB=500 before, 600 now"):
        prepare.prepare(_prepare_cfg(work, VOCAB="600"))
    assert sorted(set(os.listdir(data)) - {".prepare.lock"}) == before  # the lock: nothing else
    assert json.load(open(os.path.join(data, "config.json")))["settings"]["VOCAB"]["value"] == "500"


def _other_value(name, value):
    """A value of setting NAME other than VALUE (text only: the record is compared, not
    checked)."""
    other = {"int": "12345", "float": "0.125", "ints": "7 9"}.get(SETTINGS[name].kind, "other")
    return other if other != value else "1"


@pytest.mark.parametrize("name", affecting(DATA))
def test_every_data_setting_changed_is_refused_by_prepare(tmp_path, name):
    """Every setting declared to affect the data (TRAIN_LINES=2000, then 0 ...), changed, and
    prepare refuses the data directory prepared with the other value, naming it."""
    work = tmp_path / "work"
    data = workdir.make_dirs(str(work / "data"))
    cfg = _prepare_cfg(work)
    settings = cfg.as_json()
    settings[name] = {"value": _other_value(name, cfg.get(name)), "from": "an earlier run"}
    if name == "LOCAL_DIR":  # a directory of the user's (the shipped corpus's is no difference)
        settings["SOURCE"] = {"value": "local", "from": "an earlier run"}
    write_record(os.path.join(data, "config.json"), "data-config",
                 {"step": "prepare", "dataset": "wmt17", "settings": settings})
    workdir.make_dirs(os.path.join(data, "raw"))
    open(os.path.join(data, "raw", ".done"), "w").close()
    assert f"{name}={settings[name]['value']} before" in prepared_otherwise(cfg, data)


def test_the_shipped_corpus_is_the_same_data_wherever_the_package_is(tmp_path):
    """SOURCE=multi30k derives LOCAL_DIR from the package's folder: data prepared, or a run
    trained, from another checkout or worktree of the package is the same data (a study run
    from two worktrees at two commits shares one DEEPNET_WORK), and a user's own LOCAL_DIR
    still is compared."""
    work = tmp_path / "work"
    data = workdir.make_dirs(str(work / "data"))
    cfg = _prepare_cfg(work)
    settings = cfg.as_json()
    settings["LOCAL_DIR"] = {"value": "/elsewhere/deepnet_fairseq/corpora/multi30k",
                             "from": "derived: SOURCE=multi30k"}
    write_record(os.path.join(data, "config.json"), "data-config",
                 {"step": "prepare", "dataset": "wmt17", "settings": settings})
    workdir.make_dirs(os.path.join(data, "raw"))
    open(os.path.join(data, "raw", ".done"), "w").close()
    assert prepared_otherwise(cfg, data) is None
    run = workdir.make_dirs(str(work / "runs" / cfg["RUN_NAME"]))
    write_record(os.path.join(run, "config.json"), "run-config",
                 {"step": "train", "dataset": "wmt17", "settings": settings})
    assert runner.trained_otherwise(cfg, run) is None
    local = _prepare_cfg(work, SOURCE="local", LOCAL_DIR=str(tmp_path))
    assert "LOCAL_DIR=/elsewhere" in prepared_otherwise(local, data)


def _tree(path):
    return sorted((os.path.relpath(os.path.join(d, n), path), os.path.getsize(os.path.join(d, n)))
                  for d, _, names in os.walk(path) for n in names)


@pytest.mark.parametrize("name", affecting(DATA))
def test_every_data_setting_changed_is_refused_by_train_evaluate_and_the_sweep(
        tmp_path, monkeypatch, capsys, name):
    """Data prepared with another value of a data setting (VOCAB=1000, then 2000): train,
    evaluate and the sweep refuse it as prepare does, naming the setting and both values,
    before they write anything (a run recorded as VOCAB=2000 would have trained on 1000); a
    data setting they leave unset is no difference (prepare was given TRAIN_TEXT, train is
    not: the slow test of the parallel dataset's chain caught a refusal there)."""
    work = prepared_work(tmp_path)
    cfg = _prepare_cfg(work, LAYERS="1")
    settings = cfg.as_json()
    other = _other_value(name, cfg.get(name))
    settings[name] = {"value": other, "from": "an earlier prepare"}
    if name == "LOCAL_DIR":  # a directory of the user's (the shipped corpus's is no difference)
        settings["SOURCE"] = {"value": "local", "from": "an earlier prepare"}
    write_record(str(work / "data" / "config.json"), "data-config",
                 {"step": "prepare", "dataset": "wmt17", "settings": settings})
    before = _tree(work)
    if cfg.get(name) is None:
        # a setting these steps leave unset (the raw text's paths, given to prepare alone)
        # says nothing against the data: no refusal for it
        data_otherwise(cfg)
        return
    said = f"{name}={other} before, {cfg.get(name)} now"
    env = {"DEEPNET_WORK": str(work), "SOURCE": "multi30k", "LAYERS": "1"}
    code, err = train(monkeypatch, capsys, env)
    assert code == 2 and said in err.splitlines()[-1]
    for step in (evaluate_step, run_sweep):
        with pytest.raises(SettingError, match=re.escape(said)):
            step(cfg, {**BASE, **env})
    assert _tree(work) == before


def test_what_prepare_reads_is_declared_to_affect_the_data():
    """Every setting the data steps read (prepare, raw text, cleaning, the datasets'
    declarations) is tagged affects=DATA, but those that change where or how fast, not what:
    so a new data setting is recorded and compared once it is read."""
    import ast
    import glob

    not_data = {"WORKERS": "the same bytes with any number (test_prepare.py compares them)",
                "DOWNLOAD_DIR": "where the verified archives are kept",
                # the datasets' tasks declare their training options beside their data: a
                # setting of how a run trains, read by train, not by prepare
                "TEMPERATURE": "MANY_PAIRS' fairseq-train options (datasets/__init__.py)"}
    read = set()
    # what prepare runs: the data stage, the datasets' hooks and the raw-text tools they use
    for path in [path for stage in ("base", "data", "datasets") for path in
                 glob.glob(os.path.join(REPO, "deepnet_fairseq", "recipes", stage, "*.py"))]:
        read |= settings_read(ast.parse(open(path, encoding="utf-8").read()))
    # split_limits reads LOCAL_<SPLIT> and <SPLIT>_LINES through f-strings
    read |= {f"LOCAL_{s}" for s in ("TRAIN", "VALID", "TEST")} | {
        f"{s}_LINES" for s in ("TRAIN", "VALID", "TEST")}
    assert "VOCAB" in read and "SOURCE" in read  # the scan sees them
    assert read - set(affecting(DATA)) - set(not_data) == set()


def _run_record(run_dir, cfg, name=None, value=None):
    settings = cfg.as_json()
    if name:
        settings[name] = {"value": value, "from": "an earlier launch"}
    write_record(os.path.join(run_dir, "config.json"), "run-config",
                 {"step": "train", "dataset": "wmt17", "settings": settings})


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_a_run_is_resumed_only_with_the_settings_it_trained_with(tmp_path, name):
    """Every setting declared to affect what is trained or the data, changed, makes a run
    trained before refused (named, both values); the others (log interval, layout, length:
    a longer MAX_UPDATE trains further on the same schedule) may change."""
    work = prepared_work(tmp_path)
    # a directory of the user's (the shipped corpus's is no difference: the test above)
    cfg = _prepare_cfg(work, LAYERS="1", **({"SOURCE": "local", "LOCAL_DIR": str(tmp_path)}
                                           if name == "LOCAL_DIR" else {}))
    run_dir = workdir.make_dirs(str(work / "runs" / "deepnet-1L-1L"))
    _run_record(run_dir, cfg)
    assert runner.trained_otherwise(cfg, run_dir) is None
    other = _other_value(name, cfg.get(name))
    _run_record(run_dir, cfg, name, other)
    problem = runner.trained_otherwise(cfg, run_dir)
    if SETTINGS[name].affects in (DATA, TRAINED):
        assert f"{name}={other} before, {cfg.get(name, '(unset)')} now" in problem
        assert "another RUN_NAME" in problem
    else:
        assert problem is None


def test_train_refuses_a_run_trained_with_another_lr(tmp_path, monkeypatch, capsys):
    """LR=1e-3, interrupted, then LR=2e-3: refused before anything is written, the record
    still 1e-3; the same rate written otherwise (0.001) is the same setting."""
    work = prepared_work(tmp_path)
    run_dir = workdir.make_dirs(str(work / "runs" / "deepnet-1L-1L"))
    _run_record(run_dir, _prepare_cfg(work, LAYERS="1", LR="1e-3"))
    write_record(os.path.join(run_dir, "status.json"), "status", {"status": "interrupted"})
    before = {n: open(os.path.join(run_dir, n)).read() for n in ("config.json", "status.json")}
    code, err = train(monkeypatch, capsys, {"DEEPNET_WORK": str(work), "LAYERS": "1",
                                            "LR": "2e-3"})
    assert code == 2 and "LR=1e-3 before, 2e-3 now" in err.splitlines()[-1]
    assert {n: open(os.path.join(run_dir, n)).read() for n in before} == before
    assert runner.trained_otherwise(_prepare_cfg(work, LAYERS="1", LR="0.001",
                                                 LOG_INTERVAL="7"), run_dir) is None


def test_a_second_evaluation_of_a_run_is_refused_before_it_writes(tmp_path, monkeypatch):
    """The runner takes the run's lock before it writes evaluate.config.json or starts
    evaluate.log, and passes it on to the evaluation: a second evaluation of the run while the
    first decodes is refused (Busy), the first's log and record intact."""
    from deepnet_fairseq.recipes.evaluation import evaluate

    cfg = _prepare_cfg(tmp_path / "work")
    env = {"DEEPNET_WORK": str(tmp_path / "work"), **BASE}
    run_dir = workdir.make_dirs(paths(cfg).run_dir)
    write_record(os.path.join(run_dir, "status.json"), "status", {"status": "ok"})
    seen = {}

    def first(command, env, logs, echo, pass_fds=()):
        fd = command[command.index("--lock-fd") + 1]
        assert pass_fds == (int(fd),) and evaluate._holds_lock(int(fd), run_dir)
        with open(logs[0], "a") as out:
            out.write("the first evaluation decodes\n")
        records = {n: open(os.path.join(run_dir, n)).read()
                   for n in ("evaluate.log", "evaluate.config.json")}
        with pytest.raises(workdir.Busy, match=r"in use by pid .*\(evaluate\): one step"):
            evaluate_step(cfg, env)
        seen["kept"] = records == {n: open(os.path.join(run_dir, n)).read() for n in records}
        # a lock file opened anew is not the one held: an evaluation handed it is refused
        other = os.open(os.path.join(run_dir, workdir.LOCK), os.O_RDONLY)
        seen["other refused"] = not evaluate._holds_lock(other, run_dir)
        os.close(other)
        return 0, None

    monkeypatch.setattr(evaluation_step, "run_forwarding", first)
    assert evaluate_step(cfg, env) == 0
    assert seen == {"kept": True, "other refused": True}
    assert open(os.path.join(run_dir, "evaluate.log")).read() == "the first evaluation decodes\n"


@pytest.mark.parametrize("dataset,env,why", [
    ("wmt17", {}, "needs LOCAL_DIR"),
    ("wmt17", {"LOCAL_DIR": "{tmp}/nowhere"}, "needs LOCAL_DIR"),
    ("wmt17", {"LOCAL_DIR": "{tmp}/text"}, "train.en[.gz] not found"),
    ("wmt17", {"TRAIN_TEXT": "{tmp}/text/none", "VALID_TEXT": "{tmp}/text/valid",
               "TEST_TEXT": "{tmp}/text/test"}, "none.en[.gz] not found"),
    ("parallel", {"SRC": "de", "TGT": "en", "TRAIN_TEXT": "{tmp}/text/valid",
                  "VALID_TEXT": "{tmp}/text/valid", "TEST_TEXT": "{tmp}/text/gone"},
     "gone.de[.gz] not found"),
    ("opus100", {"LANGS": "de"}, "needs LOCAL_DIR"),
])
def test_missing_local_text_is_refused_before_prepare_creates_anything(tmp_path, dataset, env,
                                                                       why):
    from deepnet_fairseq.recipes.data import prepare
    from deepnet_fairseq.recipes.base.rawtext import PrepareError

    (tmp_path / "text").mkdir()
    for split in ("valid", "test"):
        for lang in ("en", "de"):
            (tmp_path / "text" / f"{split}.{lang}").write_text("a line\n")
    work = tmp_path / "work"
    cfg = resolve(dataset, {"DEEPNET_WORK": str(work), "SIZE": "smoke", "DEVICE": "cpu",
                            "SOURCE": "local", **{k: v.format(tmp=tmp_path)
                                                  for k, v in env.items()}}, REPO)
    with pytest.raises(PrepareError, match=re.escape(why)):
        prepare.prepare(cfg)
    assert not work.exists()


def test_one_prepare_per_data_directory(tmp_path):
    from deepnet_fairseq.recipes.data import prepare

    work = tmp_path / "work"
    data = workdir.make_dirs(str(work / "data"))
    with workdir.RunLock(data, ".prepare.lock", "one prepare per data directory"):
        with pytest.raises(workdir.Busy, match="in use by pid .*: one prepare per data directory"):
            prepare.prepare(_prepare_cfg(work))
