"""A run as the recipes leave it (prepared and trained for real, a tiny model, once), then
attacked file by file: a link planted for any file that train or evaluate hands to fairseq is
refused in one line, what it points to untouched; a run whose checkpoint_last.pt is at
MAX_UPDATE or MAX_EPOCH is finished, not trained past it or started again."""

import os
import shutil
import subprocess
import sys

import pytest

from deepnet_fairseq.recipes import __main__ as recipes_cli
from deepnet_fairseq.recipes.run import runner
from deepnet_fairseq.recipes.evaluation import evaluate
from deepnet_fairseq.recipes.evaluation import step as evaluation_step
from support import REPO

ENV = {"SIZE": "smoke", "SOURCE": "multi30k", "LAYERS": "1", "MAX_UPDATE": "4",
       "DEVICE": "cpu", "OMP_NUM_THREADS": "1"}


def _prepared_and_trained(work, **settings):
    """WORK prepared and trained by the recipes themselves (fairseq-train), with SETTINGS."""
    env = {**os.environ, **ENV, "DEEPNET_WORK": str(work), **settings}
    for step in ("prepare", "train"):
        proc = subprocess.run([sys.executable, "-m", "deepnet_fairseq.recipes", "wmt17", step],
                              env=env, cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """WORK, prepared and trained to update 4 by the recipes themselves (fairseq-train)."""
    work = tmp_path_factory.mktemp("run-safety") / "work"
    _prepared_and_trained(work)
    # the records a training writes before fairseq starts (an early return once skipped them)
    run = work / "runs" / "deepnet-1L-1L"
    for record in ("config.json", "command.sh", "status.json"):
        assert (run / record).is_file(), record
    return work


class _FairseqStarted(Exception):
    pass


def _step(monkeypatch, capsys, work, step, **env):
    """The recipes' STEP in this process, fairseq (or the evaluation) not started: its status
    and stderr, or None as status if it got as far as starting it."""
    def started(*args, **kwargs):
        raise _FairseqStarted

    monkeypatch.setattr(runner, "run_forwarding", started)  # training
    monkeypatch.setattr(evaluation_step, "run_forwarding", started)  # the evaluation
    for name, value in {**ENV, "DEEPNET_WORK": str(work), **env}.items():
        monkeypatch.setenv(name, value)
    try:
        code = recipes_cli.main(["wmt17", step])
    except _FairseqStarted:
        code = None
    return code, capsys.readouterr().err


def _files(*directories):
    return sorted(os.path.join(root, name) for directory in directories
                  for root, _, names in os.walk(directory) for name in names)


def _each_file_linked(work, files, tmp_path):
    """Each of FILES in turn replaced by a link to a copy elsewhere: yields (link, copy, its
    bytes then); the file is put back after."""
    for number, path in enumerate(files):
        copy = tmp_path / f"elsewhere-{number}-{os.path.basename(path)}"
        shutil.move(path, copy)
        os.symlink(copy, path)
        try:
            yield path, copy, copy.read_bytes()
        finally:
            os.remove(path)
            shutil.move(copy, path)


def _run_files(work):
    return os.path.join(work, "runs", "deepnet-1L-1L"), os.path.join(work, "data", "bin")


def test_train_follows_no_link_inside_what_it_hands_to_fairseq(trained, tmp_path, monkeypatch,
                                                                capsys):
    """Every file a real training left in the run directory, and every file of data/bin, in
    turn a link to a copy elsewhere (checkpoint_last.pt linked to another run's): RETRY=1
    with a higher MAX_UPDATE, which would resume and train on, stops in one line naming the
    link before fairseq starts, the copy untouched."""
    run_dir, bin_dir = _run_files(trained)
    files = _files(run_dir, bin_dir)
    assert os.path.join(run_dir, "checkpoints", "checkpoint_last.pt") in files
    for link, copy, before in _each_file_linked(trained, files, tmp_path):
        code, err = _step(monkeypatch, capsys, trained, "train", RETRY="1", MAX_UPDATE="6")
        assert code == 1, (link, err)
        assert err.strip().splitlines()[-1].startswith(f"error: {link}: a symbolic link"), err
        assert copy.read_bytes() == before, link


def test_evaluation_follows_no_link_inside_what_it_reads(trained, tmp_path, monkeypatch, capsys):
    """Every file of the checkpoints, data/bin and data/raw (the references) in turn a link:
    evaluate.sh stops in one line naming it before the evaluation starts; the evaluation
    program itself (run by hand) refuses a linked checkpoint alike."""
    run_dir, bin_dir = _run_files(trained)
    checkpoints = os.path.join(run_dir, "checkpoints")
    files = _files(checkpoints, bin_dir, os.path.join(trained, "data", "raw"))
    for link, copy, before in _each_file_linked(trained, files, tmp_path):
        code, err = _step(monkeypatch, capsys, trained, "evaluate")
        assert code == 1, (link, err)
        assert err.strip().splitlines()[-1].startswith(f"error: {link}: a symbolic link"), err
        assert copy.read_bytes() == before, link
    last = [f for f in files if f.endswith("checkpoint_last.pt")]
    for link, copy, before in _each_file_linked(trained, last, tmp_path):
        with pytest.raises(SystemExit):
            evaluate.main(["--run-dir", run_dir, "--average-last", "1", "--directions", "en-de",
                           "--references", os.path.join(trained, "data", "raw"), "--",
                           bin_dir])
        assert f"{link}: a symbolic link" in capsys.readouterr().err
        assert copy.read_bytes() == before


def _status(work):
    return runner.status_of(os.path.join(work, "runs", "deepnet-1L-1L"))


@pytest.mark.parametrize("how", ["interrupted after its last save", "RETRY=1"])
def test_a_run_at_max_update_is_finished_not_trained_past_it(trained, monkeypatch, capsys, how):
    """checkpoint_last.pt at update 4 of MAX_UPDATE=4 (fairseq would take a 5th update after
    loading it): a relaunch after a SIGTERM that came right after the last save, or RETRY=1,
    trains nothing; the status is the one fairseq's log gives for a run that ended there."""
    run_dir, _ = _run_files(trained)
    last = os.path.join(run_dir, "checkpoints", "checkpoint_last.pt")
    assert runner.training_done(os.path.dirname(last))[0] == 4
    before = open(last, "rb").read()
    status = _status(trained)
    if how == "RETRY=1":
        code, err = _step(monkeypatch, capsys, trained, "train", RETRY="1")
    else:
        runner.write_record(os.path.join(run_dir, "status.json"), "status",
                            {**status, "status": "interrupted", "reason": "stopped by SIGTERM"})
        code, err = _step(monkeypatch, capsys, trained, "train")
    assert code == 0, err
    assert "checkpoint_last.pt is at update 4, MAX_UPDATE=4: nothing more to train (set " \
           "MAX_UPDATE higher to train on)" in err
    now = _status(trained)
    assert (now["status"], now["num_updates"], now["attempt"]) == ("ok", 4, status["attempt"])
    assert open(last, "rb").read() == before


def test_a_run_at_max_epoch_is_finished_not_started_again(tmp_path, monkeypatch, capsys):
    """A run trained by epochs (MAX_UPDATE=0, MAX_EPOCH=1, as OPUS-100's recipe trains) and
    killed after its last save: relaunched, fairseq would load the checkpoint, train nothing,
    log no validation and exit 0, a "failed" run that a sweep retries. It is finished: fairseq
    is not started, the status is the one its log gives."""
    work, epochs = tmp_path / "work", {"MAX_UPDATE": "0", "MAX_EPOCH": "1"}
    _prepared_and_trained(work, **epochs)
    run_dir, _ = _run_files(work)
    last = os.path.join(run_dir, "checkpoints", "checkpoint_last.pt")
    updates, whole_epochs = runner.training_done(os.path.dirname(last))
    assert whole_epochs == 1 and updates > 4  # an epoch of the smoke data is many updates
    before, status = open(last, "rb").read(), _status(work)
    runner.write_record(os.path.join(run_dir, "status.json"), "status",
                        {**status, "status": "interrupted", "reason": "stopped by SIGTERM"})
    code, err = _step(monkeypatch, capsys, work, "train", **epochs)
    assert code == 0, err
    assert (f"checkpoint_last.pt is at the end of epoch 1 (update {updates}), MAX_EPOCH=1: "
            "nothing more to train (set MAX_EPOCH higher to train on)") in err
    now = _status(work)
    assert (now["status"], now["num_updates"], now["attempt"]) == ("ok", updates, 1)
    assert open(last, "rb").read() == before
    # a higher limit trains on (fairseq is started)
    code, _ = _step(monkeypatch, capsys, work, "train", RETRY="1", MAX_UPDATE="0", MAX_EPOCH="2")
    assert code is None
