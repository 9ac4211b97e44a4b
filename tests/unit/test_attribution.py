"""deepnet-model-update's parameter groups, --freeze and --attribute (diagnostics/attribution.py):
the groups' contributions sum to the whole update on a tiny model, frozen groups do not move."""

import csv
import math

import pytest

from deepnet_fairseq.diagnostics import attribution, model_update


@pytest.mark.parametrize("name,group", [
    ("encoder.layers.0.self_attn_layer_norm.weight", "layernorm"),
    ("decoder.layers.3.encoder_attn_layer_norm.bias", "layernorm"),
    ("decoder.layernorm_embedding.weight", "layernorm"),
    ("encoder.embed_tokens.weight", "embed"),
    ("decoder.embed_positions.weight", "embed"),
    ("decoder.output_projection.weight", "embed"),
    ("encoder.layers.1.self_attn.v_proj.bias", "bias"),
    ("decoder.layers.0.fc2.bias", "bias"),
    ("encoder.layers.1.self_attn.q_proj.weight", "self_attn"),
    ("decoder.layers.2.self_attn.out_proj.weight", "self_attn"),
    ("decoder.layers.2.encoder_attn.k_proj.weight", "cross_attn"),
    ("encoder.layers.0.fc1.weight", "ffn"),
    ("encoder.layers.0.omega", "other"),
])
def test_parameter_groups(name, group):
    assert attribution.group_of(name) == group


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def run_update(tmp_path, *extra):
    model_update.main(["--methods", "deepnet", "--depths", "3", "--steps", "2", "--batch-size", "4",
                       "--length", "6", "--batches", "2", "--optimizer", "sgd", "--lr", "1e-2",
                       "--seed", "1,2", "--attribute", "--output-dir", str(tmp_path), "--quiet",
                       *extra])
    update = {(r["seed"], r["step"]): float(r["update"])
              for r in read_csv(tmp_path / "model_update.csv")}
    groups = {}
    for r in read_csv(tmp_path / "model_update_groups.csv"):
        groups.setdefault((r["seed"], r["step"]), {})[r["group"]] = r
    assert (tmp_path / "model_update_groups.png").read_bytes()[:4] == b"\x89PNG"
    return update, groups


def test_group_contributions_sum_to_the_update(tmp_path):
    update, groups = run_update(tmp_path)
    assert set(groups) == {(s, t) for s in ("1", "2") for t in ("1", "2")}
    for key, rows in groups.items():
        whole = update[key]
        assert whole > 0 and float(rows["all"]["contribution"]) == pytest.approx(whole, rel=1e-5)
        parts = [float(r["contribution"]) for g, r in rows.items() if g in attribution.GROUPS]
        assert len(parts) == 6  # every group of a DeepNet model but "other"
        # first order: the projections of the groups' separate steps add up to the update
        assert sum(parts) == pytest.approx(whole, rel=0.01)
        assert abs(float(rows["interaction"]["share"])) < 0.01
        # each group's step alone moves F at least as far as its projection on the update
        for g, r in rows.items():
            if g in attribution.GROUPS:
                assert float(r["alone"]) >= abs(float(r["contribution"])) - 1e-9


def test_frozen_group_does_not_move_and_contributes_nothing(tmp_path):
    update, groups = run_update(tmp_path, "--freeze", "layernorm,embed")
    for rows in groups.values():
        for g in ("layernorm", "embed"):
            assert rows[g]["trained"] == "0" and float(rows[g]["contribution"]) == 0.0
        assert rows["ffn"]["trained"] == "1" and float(rows["ffn"]["contribution"]) != 0.0
        assert all(math.isfinite(float(rows[g]["share"])) for g in rows)


def test_unknown_group_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        model_update.main(["--freeze", "layernorm,attention"])
    assert "unknown parameter group(s) attention" in capsys.readouterr().err
