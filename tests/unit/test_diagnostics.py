"""The diagnostics commands in this process at tiny size: their help, their errors, and the model
update of Figure 5 (DeepNet's below Post-LN's at depth) on real fairseq models. The monitors
during a training: slow/test_diagnostics_end_to_end.py (the depth study, a recipe:
unit/test_depth_study.py)."""

import math

import pytest

from support import assert_png, read_csv


@pytest.mark.parametrize("module", ["model_update", "plot_monitors"])
def test_commands_have_help(module, capsys):
    import importlib

    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(f"deepnet_fairseq.diagnostics.{module}").main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage:" in out and "--output" in out


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
