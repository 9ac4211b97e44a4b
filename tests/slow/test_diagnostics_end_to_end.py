"""The diagnostics commands end to end at tiny size: the monitors during a training, the depth
study (a sweep of the recipes), Figure 5's script, deepnet-source-use over checkpoints."""

import csv
import json
import math
import os
import re
import subprocess

import pytest

from deepnet_fairseq.recipes.datasets import reverse_copy

from support import REPO, USER_DIR, assert_png, fairseq_train, read_csv, run


def monitored_train(data, log_file, task, *extra):
    return fairseq_train([data, "--user-dir", USER_DIR, "--task", task,
                          "--arch", "deepnet_transformer_tiny", "--encoder-layers", 3,
                          "--decoder-layers", 2, "--cpu", "--optimizer", "adam", "--lr", "1e-3",
                          "--max-tokens", 500, "--max-update", 4, "--dropout", 0.1, "--seed", 3,
                          "--no-save", "--log-format", "json", "--log-interval", 1,
                          "--log-file", log_file, *extra])


def train_inner_records(log_file):
    """The train_inner records of a --log-file written with --log-format json."""
    with open(log_file) as f:
        records = [json.loads(line) for line in f if line.startswith('{"')]
    return [r for r in records if "num_updates" in r]


def test_monitors_log_per_layer_values_and_leave_training_unchanged(toy_data, tmp_path):
    from deepnet_fairseq.diagnostics import plot_monitors

    monitored_train(toy_data, tmp_path / "plain.log", "translation")
    monitored_train(toy_data, tmp_path / "mon.log", "translation_monitored",
                    "--monitor-interval", "2")
    plain, mon = train_inner_records(tmp_path / "plain.log"), train_inner_records(tmp_path / "mon.log")
    assert [r["loss"] for r in plain] == [r["loss"] for r in mon] and len(plain) == 4
    assert [r["gnorm"] for r in plain] == [r["gnorm"] for r in mon]
    assert not any(k.startswith("mon_") for r in plain for k in r)
    for record in mon:
        values = {k: v for k, v in record.items() if k.startswith("mon_") and v is not None}
        if int(record["num_updates"]) % 2:  # not a monitored update
            assert not values
            continue
        expected = {f"mon_{stat}.{side}.{i}" for stat in ("grad", "lnin", "upd")
                    for side, layers in (("enc", 3), ("dec", 2)) for i in range(layers)}
        assert expected | {"mon_grad", "mon_lnin", "mon_upd"} == set(values)
        assert all(math.isfinite(float(v)) and float(v) > 0 for v in values.values())
        # Post-LN LayerNorm inputs x + G(x) are well above the LN output norm ~ sqrt(64) = 8
        assert float(values["mon_lnin.enc.0"]) > 8
        assert 0 < float(values["mon_upd"]) < 0.1

    plot_monitors.main([str(tmp_path / "mon.log"), "--output", str(tmp_path / "mon.png")])
    assert_png(tmp_path / "mon.png")
    rows = read_csv(tmp_path / "mon.csv")
    assert {r["update"] for r in rows} == {"2", "4"}
    assert len(rows) == 2 * 3 * (3 + 2)
    with pytest.raises(SystemExit):
        plot_monitors.main([str(tmp_path / "plain.log"), "--output", str(tmp_path / "x.png")])


def test_depth_study_writes_table_and_plot_and_reuses_runs(tmp_path):
    """deepnet-depth-study, the console script, end to end: the generated task through
    sentencepiece (a piece per word) and fairseq-preprocess, two real trainings and
    evaluations, the loss table and plot; launched again, it trains nothing."""
    out = tmp_path / "study"
    argv = ["deepnet-depth-study", "--methods", "post_ln,deepnet", "--depths", "2",
            "--updates", "8", "--warmup", "4", "--output-dir", str(out)]
    run(argv)
    with open(out / "data" / "bin" / "dict.src.txt") as handle:
        pieces = [line.split()[0] for line in handle if not line.startswith("madeupword")]
    assert sorted(pieces) == sorted(f"\u2581{word}" for word in reverse_copy.WORDS)
    rows = read_csv(out / "results" / "results.csv")
    assert sorted((r["method"], r["encoder_layers"]) for r in rows) == [("deepnet", "2"),
                                                                        ("post_ln", "2")]
    for row in rows:
        assert row["status"] in ("ok", "diverged") and int(row["num_updates"]) == 8
        assert math.isfinite(float(row["last_valid_nll"]))
    table = (out / "results" / "valid_loss.md").read_text()
    baseline = float(re.search(r"Source-blind baseline ([0-9.]+) bits", table).group(1))
    assert 4.5 < baseline < math.log2(30) + 0.01  # near-uniform over 30 words (and </s>)
    assert "| post_ln |" in table and "| deepnet |" in table
    assert_png(out / "results" / "loss_vs_depth.png")
    again = run(argv)
    assert again.stderr.count("already finished") == 2


def test_figure5_script_runs_a_row_and_refuses_an_unknown_one(tmp_path):
    """scripts/figure5/run.sh as docs/findings.md shows it, one row at tiny depth."""
    env = dict(os.environ, OUT=str(tmp_path), DEPTHS="2,3", SEEDS="1")
    script = os.path.join(REPO, "scripts", "figure5", "run.sh")
    proc = subprocess.run(["bash", script, "sgd_deepnet_ln_lr"], env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("summary.txt", "model_update.csv", "model_update_groups.csv"):
        assert (tmp_path / "sgd_deepnet_ln_lr" / name).stat().st_size > 0, name
    proc = subprocess.run(["bash", script, "no_such_row"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown row no_such_row" in proc.stderr


def test_cli_writes_one_row_per_checkpoint(toy_data, tmp_path):
    """deepnet-source-use on checkpoints of a real fairseq-train run, as docs/diagnostics.md
    shows it: one CSV row per checkpoint, in update order, with the measured columns."""
    save = tmp_path / "run"
    fairseq_train([toy_data, "--user-dir", USER_DIR, "--arch", "deepnet_transformer_tiny",
                   "--cpu", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", 512,
                   "--max-update", 4, "--save-interval-updates", 2, "--save-dir", save,
                   "--no-epoch-checkpoints", "--disable-validation"])
    checkpoints = sorted(str(p) for p in save.glob("checkpoint_*_*.pt"))
    assert len(checkpoints) == 2
    out = tmp_path / "source_use.csv"
    run(["deepnet-source-use", str(toy_data), "--checkpoints", *checkpoints,
         "--sentences", "16", "--out", str(out)])
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [int(row["update"]) for row in rows] == [2, 4]
    assert [row["direction"] for row in rows] == ["src-tgt", "src-tgt"]  # the toy pair's one
    assert all(0 < float(row["encoder_spread"]) for row in rows)
    assert all(math.isfinite(float(row["source_gain"])) for row in rows)
