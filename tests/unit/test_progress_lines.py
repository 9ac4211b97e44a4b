"""The progress lines of training and decoding (recipes/run/runlog.py,
recipes/evaluation/evaluate.py, recipes/run/runner.py, recipes/evaluation/step.py): the loss they show is the nll that
docs/findings.md tables, and decoding reports as training does."""

import io
import json
import os
import re
import time

import pytest

from deepnet_fairseq.recipes.evaluation import evaluate
from deepnet_fairseq.recipes.run import runlog
from deepnet_fairseq.recipes.evaluation import step as evaluation_step
from deepnet_fairseq.recipes.evaluation.step import evaluate as evaluate_step
from deepnet_fairseq.recipes.spec.paths import paths

# fairseq's valid line with the recipes' criterion (label_smoothed_cross_entropy): the loss is
# label-smoothed, nll_loss the references' cross-entropy (bits)
VALID = ("2026-01-01 10:00:00 | INFO | valid | epoch 003 | valid on 'valid' subset | loss 4.74 | "
         "nll_loss 3.51 | ppl 11.39 | wps 9000 | wpb 1000 | bsz 40 | num_updates 600 | "
         "best_loss 4.74\n")


def test_the_progress_line_shows_the_nll_not_the_label_smoothed_loss():
    progress = runlog.Progress(total=1000)
    progress.feed(VALID)
    line = progress.line()
    assert "validation nll 3.51 bits at update 600" in line
    assert "4.74" not in line and "validation loss" not in line


def test_a_criterion_without_nll_loss_shows_its_loss_which_is_the_nll():
    # cross_entropy logs no nll_loss: its loss is the nll
    plain = VALID.replace("nll_loss 3.51 | ", "").replace("loss 4.74", "loss 3.60")
    assert runlog.valid_nll(plain) == 3.60
    assert runlog.valid_nll(VALID) == 3.51
    assert runlog.valid_nll("| train_inner | loss 4.1 | nll_loss 3.2 | num_updates 5") is None


def test_the_status_keeps_both_losses():
    status = runlog.classify(VALID, 0, vocab_size=1024)
    assert status["status"] == "ok"
    assert status["last_valid_loss"] == 4.74 and status["last_valid_nll"] == 3.51
    watch = runlog.DivergenceWatch(vocab_size=8, warmup=0, patience=1)  # log2(8) = 3 bits
    assert watch.feed(VALID)
    assert watch.stopped["last_valid_nll"] == 3.51 and watch.stopped["last_valid_loss"] == 4.74


def test_the_decoding_line_has_sentences_direction_and_eta():
    progress = runlog.DecodeProgress(total=2000, directions=2)
    assert progress.line().startswith("decoded 0/2,000 sentences (0%), 0 min 00 s elapsed")
    progress.begin(1, "en-de")
    progress.decoding()
    progress.first = (0, progress.first[1] - 20.0)  # decoding began 20 s ago
    progress.add(400)
    line = progress.line()
    assert line.startswith("decoded 400/2,000 sentences (20%), direction 1/2 en-de, ")
    # 400 sentences in about 20 s: 1,600 left take about 80 s
    minutes_, seconds = map(int, re.search(r"ETA (\d+) min (\d+) s", line).groups())
    assert 70 <= 60 * minutes_ + seconds <= 90
    one = runlog.DecodeProgress(total=0, directions=1)  # no total known: no share, no ETA
    one.begin(1, "en-de")
    one.add(8)
    assert one.line().startswith("decoded 8 sentences, 0 min") and "ETA" not in one.line()


class Bar:
    """A stand-in for fairseq's progress bar: the batches, and a method of its own."""

    def __init__(self, batches):
        self.batches, self.logged = batches, []

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)

    def log(self, stats):
        self.logged.append(stats)


def test_a_batch_counts_once_decoded_and_the_bar_stays_the_bar():
    import torch

    batches = [{"id": torch.arange(8), "net_input": {}}, {"id": torch.arange(5), "net_input": {}},
               {"id": torch.arange(3)}]  # fairseq skips a batch without net_input: not counted
    progress = runlog.DecodeProgress(total=13)
    bar = Bar(batches)
    counted = evaluate._Counted(bar, progress)
    seen = []
    for batch in counted:
        seen.append(progress.done)  # while a batch is decoded, it is not counted yet
        counted.log({"wps": 1})
    assert seen == [0, 8, 13] and progress.done == 13
    assert bar.logged == [{"wps": 1}] * 3 and len(counted) == 3


def test_progress_lines_come_while_the_block_runs_and_once_at_its_end(monkeypatch):
    out = io.StringIO()
    progress = runlog.DecodeProgress(total=10)
    with evaluate.progress_lines(progress, every=0.02, out=out):
        progress.decoding()
        for _ in range(10):
            progress.add(1)
            time.sleep(0.01)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith(runlog.DECODING) for line in lines)
    assert lines[-1].startswith(f"{runlog.DECODING}decoded 10/10 sentences (100%)")


def test_an_evaluation_reports_its_decoding(toy_data, tiny_checkpoint, tmp_path, capsys,
                                            monkeypatch):
    """evaluate.py decodes through fairseq-generate's own code and prints the progress line,
    with the test set's size, while it decodes and at the end."""
    import shutil

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("checkpoint_1_5.pt", "checkpoint_last.pt"):
        shutil.copy(tiny_checkpoint, run / "checkpoints" / name)
    refs = tmp_path / "raw"
    refs.mkdir()
    shutil.copy(toy_data.parent / "test.tgt", refs / "test.src-tgt.tgt")
    sentences = len((refs / "test.src-tgt.tgt").read_text().splitlines())
    monkeypatch.setattr(runlog, "PROGRESS_EVERY_S", 0.001)
    evaluate.main(["--run-dir", str(run), "--average-last", "1", "--directions", "src-tgt",
                   "--references", str(refs), "--", str(toy_data), "--gen-subset", "test",
                   "--beam", "2", "--batch-size", "8", "--required-batch-size-multiple", "1",
                   "--max-len-a", "0", "--max-len-b", "5", "--cpu", "--no-progress-bar",
                   # no DataLoader worker forked from pytest's many-threaded process (one died
                   # there once, under a full suite); the progress lines are what is tested
                   "--num-workers", "0"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(runlog.DECODING)]
    assert lines and lines[-1].startswith(
        f"{runlog.DECODING}decoded {sentences}/{sentences} sentences (100%)")
    assert json.load(open(run / "eval" / "eval.json"))["directions"]["src-tgt"]["sentences"] \
        == sentences


def test_the_runner_shows_the_decoding_lines(tmp_path, capsys, monkeypatch):
    from deepnet_fairseq.storage.records import write_record
    from deepnet_fairseq.recipes.spec import settings
    from support import REPO

    env = {"SIZE": "smoke", "DEVICE": "cpu", "DEEPNET_WORK": str(tmp_path / "work")}
    cfg = settings.resolve("wmt17", env, REPO)
    run_dir = paths(cfg).run_dir
    os.makedirs(run_dir)
    write_record(os.path.join(run_dir, "status.json"), "status", {"status": "ok"})

    def run_forwarding(command, env, logs, echo, pass_fds=()):
        for line in (f"{runlog.DECODING}decoded 8/60 sentences (13%), 0 min 30 s elapsed\n",
                     "2026-01-01 10:00:00 | INFO | fairseq_cli.generate | NOTE: hypothesis\n",
                     "en-de: sacreBLEU 0.5\n"):
            echo(line)
        return 0, None

    monkeypatch.setattr(evaluation_step, "run_forwarding", run_forwarding)
    assert evaluate_step(cfg, env) == 0
    err = capsys.readouterr().err
    assert re.search(r"\[wmt17/evaluate \d\d:\d\d:\d\d\] " + re.escape(cfg["RUN_NAME"])
                     + r": decoded 8/60 sentences \(13%\), 0 min 30 s elapsed", err)
    assert "en-de: sacreBLEU 0.5" in err and "NOTE" not in err and runlog.DECODING not in err


# fairseq.trainer's note when a run resumes (the line a resumed 1,000-layer run wrote; its first
# progress record came 16 minutes later)
RESUMED = ("2026-11-27 14:24:48 | INFO | fairseq.trainer | Loaded checkpoint /w/runs/x+LR=0.008/"
           "checkpoints/checkpoint_last.pt (epoch 1 @ 150 updates)\n")


def test_a_resumed_attempt_starts_at_its_checkpoints_update_not_at_zero():
    progress = runlog.Progress(total=1000)
    progress.feed(RESUMED)
    assert progress.line().startswith("update 150/1000 (15%), no validation yet")
    progress.first = (150, time.time() - 600)  # 50 updates in the ten minutes since the load
    progress.feed("2026-11-27 14:34:48 | INFO | train_inner | epoch 001:    200 / 575 loss=7.52, "
                  "num_updates=200, lr=0.004\n")
    assert "update 200/1000 (20%)" in progress.line()
    assert re.search(r"ETA 160 min 0\d s$", progress.line())  # 800 left at 5 a minute


def test_only_the_trainers_own_note_counts_as_a_resume():
    # the same words inside another logger's line, or in the attempt header's command, say nothing
    for line in (RESUMED.replace("fairseq.trainer", "fairseq_cli.train"),
                 "==== attempt 2: fairseq-train ... (epoch 1 @ 150 updates)\n",
                 RESUMED.replace("updates)\n", "updates) and more\n")):
        progress = runlog.Progress(total=1000)
        progress.feed(line)
        assert progress.line().startswith("update 0/1000"), line


def test_a_resumed_attempt_shows_the_last_earlier_validation_of_the_weights_it_continues():
    # the run's log before this attempt: validations at 600 and 800, the checkpoint at 600
    # (800's was never saved); a 100-layer attempt validates again only an hour after its load
    earlier = VALID + VALID.replace("nll_loss 3.51", "nll_loss 3.20").replace(
        "num_updates 600", "num_updates 800")
    progress = runlog.Progress(total=1000, earlier=earlier)
    assert progress.line().startswith("update 0/1000 (0%), no validation yet")
    progress.feed(RESUMED.replace("@ 150 updates", "@ 600 updates"))
    assert "validation nll 3.51 bits at update 600" in progress.line()
    progress.feed(RESUMED.replace("@ 150 updates", "@ 800 updates"))
    assert "validation nll 3.20 bits at update 800" in progress.line()
    progress.feed(VALID.replace("nll_loss 3.51", "nll_loss 2.90").replace(
        "num_updates 600", "num_updates 1000"))  # this attempt's own validation wins
    assert "validation nll 2.90 bits at update 1000" in progress.line()
    assert runlog.Progress(total=1000, earlier="").line().endswith("0 min 00 s elapsed")


def test_a_run_with_source_gain_shows_it_and_keeps_it_in_its_status():
    # SOURCE_GAIN=1: the plugin's criterion adds source_gain to fairseq's valid line
    line = VALID.replace("| ppl 11.39", "| source_gain 2.83 | ppl 11.39")
    progress = runlog.Progress(total=1000)
    progress.feed(line)
    assert "validation nll 3.51 bits, source gain 2.83 bits at update 600" in progress.line()
    assert runlog.classify(line, 0, vocab_size=1024)["last_source_gain"] == 2.83
    assert "last_source_gain" not in runlog.classify(VALID, 0, vocab_size=1024)
    # resumed, from the earlier attempt's line; a line without it shows none
    resumed = runlog.Progress(total=1000, earlier=VALID + line)
    resumed.feed(RESUMED.replace("@ 150 updates", "@ 600 updates"))
    assert "source gain 2.83 bits at update 600" in resumed.line()
    assert "source gain" not in runlog.Progress(total=1000, earlier=VALID).line()
