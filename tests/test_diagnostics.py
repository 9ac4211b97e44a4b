"""The diagnostics commands at tiny size: model update (Figure 5), monitors, their plots, the depth
study and the throughput benchmark. Real fairseq models and training throughout."""

import csv
import json
import math
import os
import re

import pytest

from conftest import PY, REPO, USER_DIR, run

PNG_MAGIC = b"\x89PNG"


def assert_png(path):
    with open(path, "rb") as f:
        assert f.read(4) == PNG_MAGIC, f"{path} is not a PNG"


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("module", ["model_update", "plot_monitors", "depth_study"])
def test_commands_have_help(module, capsys):
    import importlib

    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(f"deepnet_fairseq.diagnostics.{module}").main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage:" in out and "--output" in out


def test_console_script_is_installed():
    assert "deepnet-model-update" in run(["deepnet-model-update", "--help"]).stdout


def test_unknown_method_is_a_clear_error(capsys):
    from deepnet_fairseq.diagnostics import model_update

    with pytest.raises(SystemExit):
        model_update.main(["--methods", "post_ln,no_such_method"])
    assert "unknown method 'no_such_method'" in capsys.readouterr().err


def test_model_update_of_deepnet_is_below_post_ln_at_depth(tmp_path):
    from deepnet_fairseq.diagnostics import model_update

    model_update.main(["--methods", "post_ln,deepnet", "--depths", "2,12", "--steps", "3",
                       "--batch-size", "4", "--length", "6", "--batches", "2",
                       "--output-dir", str(tmp_path), "--quiet"])
    rows = read_csv(tmp_path / "model_update.csv")
    assert_png(tmp_path / "model_update.png")
    assert len(rows) == 2 * 2 * 4  # methods x depths x (step 0 + 3 steps)
    update = {(r["method"], int(r["encoder_layers"]), int(r["step"])): float(r["update"])
              for r in rows}
    assert all(math.isfinite(v) for v in update.values())
    assert update[("deepnet", 12, 0)] == 0.0
    for step in (1, 2, 3):
        assert 0 < update[("deepnet", 12, step)] < update[("post_ln", 12, step)]


def monitored_train(data, log_file, task, *extra):
    return run(["fairseq-train", str(data), "--user-dir", USER_DIR, "--task", task,
                "--arch", "deepnet_transformer_tiny", "--encoder-layers", "3",
                "--decoder-layers", "2", "--cpu", "--optimizer", "adam", "--lr", "1e-3",
                "--max-tokens", "500", "--max-update", "4", "--dropout", "0.1", "--seed", "3",
                "--no-save", "--log-format", "json", "--log-interval", "1",
                "--log-file", str(log_file), *extra])


def train_inner_records(log_file):
    """The train_inner records of a --log-file written with --log-format json."""
    with open(log_file) as f:
        records = [json.loads(line) for line in f if line.startswith('{"')]
    return [r for r in records if "num_updates" in r]


@pytest.mark.slow
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


@pytest.mark.slow
def test_depth_study_writes_table_and_plot_and_reuses_runs(tmp_path):
    out = tmp_path / "study"
    argv = ["deepnet-depth-study", "--methods", "post_ln,deepnet", "--depths", "2",
            "--updates", "8", "--warmup", "4", "--output-dir", str(out)]
    run(argv)
    rows = read_csv(out / "depth_study.csv")
    assert [(r["method"], r["encoder_layers"]) for r in rows] == [("post_ln", "2"), ("deepnet", "2")]
    for row in rows:
        assert row["status"] in ("trained", "stalled", "diverged")
        assert math.isfinite(float(row["valid_loss"])) and int(row["updates"]) == 8
        assert 4 < float(row["baseline"]) < 5.5  # 30 words and </s>
    assert_png(out / "depth_study.png")
    assert "| post_ln |" in (out / "depth_study.md").read_text()
    again = run(argv)
    assert again.stderr.count(": stored (") == 2


@pytest.mark.slow
def test_throughput_benchmark_prints_both_models(tmp_path):
    proc = run([PY, os.path.join(REPO, "benchmarks", "throughput.py"), "--depths", "2",
                "--checkpoint", "on", "--rounds", "1", "--sentences", "4", "--length", "6"])
    row = [line for line in proc.stdout.splitlines() if line.strip().startswith("2L-2L")]
    assert row, proc.stdout
    fields = row[0].split()
    fairseq_tps, deepnet_tps = float(fields[2]), float(fields[3])
    assert fairseq_tps > 0 and deepnet_tps > 0
    assert float(fields[5]) > 0 and float(fields[6]) > 0  # peak GB of each

    proc = run([PY, os.path.join(REPO, "benchmarks", "throughput.py"), "--max-depth",
                "--depths", "1", "--limit-depth", "1", "--checkpoint", "on",
                "--sentences", "4", "--length", "6", "--budget-gb", "100"])
    assert re.search(r"largest depth within 100 GB, checkpointing on: 1L-1L", proc.stdout), proc.stdout
