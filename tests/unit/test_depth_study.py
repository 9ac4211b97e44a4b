"""deepnet-depth-study's verdict on one run, from hand-written fairseq logs: it is the recipes'
rule (fairseq_log.classify for diverged, fairseq_log.stalled for stalled), read from fairseq's output and
never from the command that fairseq echoes into its log. The real runs:
slow/test_diagnostics_end_to_end.py."""

import argparse
import math

import pytest

from deepnet_fairseq.diagnostics import depth_study

VOCAB = 35  # the reverse-copy corpus: 30 words, </s> and fairseq's four specials (31 + 4)


def log_of(output_dir, valid_losses, tail=""):
    """fairseq-train's output in --log-format simple: its dump of the options (which holds the
    paths, so any word in them), training records, one validation per loss, then TAIL."""
    lines = [f"2026-01-01 10:00:00 | INFO | fairseq_cli.train | {{'save_dir': "
             f"'{output_dir}/checkpoints', 'data': '{output_dir}/data/bin'}}"]
    for i, loss in enumerate(valid_losses, 1):
        update = 10 * i
        lines.append(f"2026-01-01 10:00:{i:02d} | INFO | train_inner | epoch 001:     {update} / "
                     f"40 loss={loss + 0.25}, ppl=10, wps=100, num_updates={update}, lr=0.001")
        lines.append(f"2026-01-01 10:00:{i:02d} | INFO | valid | epoch 001 | valid on 'valid' "
                     f"subset | loss {loss} | ppl 10 | wps 100 | num_updates {update}")
    return "\n".join(lines) + "\n" + tail


def run(tmp_path, monkeypatch, log, code):
    def fake_run_forwarding(cmd, env, logs):
        for path in logs:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(log)
        return code, None

    monkeypatch.setattr(depth_study, "run_forwarding", fake_run_forwarding)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "dict.tgt.txt").write_text("".join(f"w{i} 1\n" for i in range(VOCAB - 4)))
    args = argparse.Namespace(output_dir=str(tmp_path / "study"), target_lang="tgt",
                              source_lang="src", warmup=10, margin=0.5, lr=1e-3,
                              max_tokens=512, updates=30, seed=1, fairseq_args="")
    return depth_study.run_one(args, str(data), "deepnet", 2, baseline=4.5)


def test_trained_and_stalled_against_the_baseline_minus_the_margin(tmp_path, monkeypatch):
    trained = run(tmp_path, monkeypatch, log_of(tmp_path, [4.8, 4.2, 3.9]), 0)
    assert trained["status"] == "trained" and trained["valid_loss"] == 3.9
    assert trained["updates"] == 30 and trained["last_train_loss"] == pytest.approx(4.15)
    stalled = run(tmp_path, monkeypatch, log_of(tmp_path, [4.8, 4.3, 4.1]), 0)
    assert stalled["status"] == "stalled"  # 4.1 is not below 4.5 - 0.5


def test_fairseqs_floating_point_error_is_diverged(tmp_path, monkeypatch):
    tail = ("Traceback (most recent call last):\n"
            "FloatingPointError: gradients are Nan/Inf\n")
    row = run(tmp_path, monkeypatch, log_of(tmp_path, [4.8], tail), 1)
    assert row["status"] == "diverged"


def test_a_loss_no_better_than_a_uniform_guess_after_the_warmup_is_diverged(tmp_path,
                                                                          monkeypatch):
    uniform = math.log2(VOCAB)  # 5.13 bits: the recipes' rule, not a stall
    row = run(tmp_path, monkeypatch, log_of(tmp_path, [4.8, uniform + 0.1]), 0)
    assert row["status"] == "diverged"


@pytest.mark.parametrize("words", ["FloatingPointError", "Nan/Inf", "non-finite"])
def test_a_crash_is_an_error_whatever_the_paths_say(tmp_path, monkeypatch, words):
    # the study used to search the whole log for these words: a run whose output directory
    # held one of them and that crashed (out of memory) was reported as diverged
    where = tmp_path / words
    where.mkdir(parents=True)
    tail = "RuntimeError: out of memory\n"
    with pytest.raises(RuntimeError, match="fairseq-train failed for deepnet 2L-2L "
                                           r"\(RuntimeError: out of memory\)"):
        run(where, monkeypatch, log_of(where, [4.8], tail), 1)
