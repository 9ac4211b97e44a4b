"""The learning-rate transfer report (recipes/reporting/lr_transfer.py): each depth's optimum
and its drift from hand-made run records, diverged runs kept out of the optimum, and the epsilon
check's median sqrt(v) / eps per parameter group against one computed here from the checkpoint
with the parameter names of a model built separately."""

import json

import pytest
import torch

from deepnet_fairseq.recipes.reporting import lr_transfer
from support import assert_png, build, train


def fake_run(root, name, method, layers, lr, status="ok", loss=None, bleu=None):
    run = root / name
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({
        "method": method, "encoder_layers": layers, "decoder_layers": layers,
        "status": status, "last_valid_loss": loss}))
    (run / "config.json").write_text(json.dumps({"settings": {"LR": {"value": str(lr)}}}))
    if bleu is not None:
        (run / "eval.json").write_text(json.dumps({"directions": {"en-de": {"tok_bleu": bleu}}}))


def test_optimum_and_drift_per_depth(tmp_path):
    runs = tmp_path / "runs"
    for lr, loss in ((5e-4, 6.9), (1e-3, 6.2), (2e-3, 6.4)):  # 6L: optimum 1e-3
        fake_run(runs, f"a6-{lr}", "deepnet", 6, lr, loss=loss, bleu=10.0)
    for lr, loss in ((5e-4, 6.1), (1e-3, 6.5)):  # 18L: optimum 5e-4, drift 0.5, at the edge
        fake_run(runs, f"a18-{lr}", "deepnet", 18, lr, loss=loss)
    fake_run(runs, "a18-div", "deepnet", 18, 2.5e-4, status="diverged", loss=13.0)
    for lr, loss in ((5e-4, 6.0), (1e-3, 6.3)):  # 50L: optimum at the grid's edge, a bound
        fake_run(runs, f"a50-{lr}", "deepnet", 50, lr, loss=loss)
    (runs / ".deepnet-recipes").write_text("marker")  # not a run
    out = tmp_path / "out"
    lr_transfer.main([str(runs), "--out", str(out)])
    text = (out / "lr_transfer.md").read_text()
    assert "| deepnet | 6 | 0.0005: 6.900, 10.0; 0.001: 6.200, 10.0; 0.002: 6.400, 10.0 | " \
           "0.001 | 1.00 | - |" in text
    # the diverged run at a lower lr is listed but is no optimum, and leaves 5e-4 at no edge;
    # the optimum halved for 3x the depth: lr ~ L^-k with k = ln 2 / ln 3 = 0.631
    assert "| deepnet | 18 | 0.00025: diverged; 0.0005: 6.100, -; 0.001: 6.500, - | 0.0005 | " \
           "0.50 | 0.63 |" in text
    assert "| deepnet | 50 | 0.0005: 6.000, -; 0.001: 6.300, - | 0.0005 (at the edge) | " \
           "0.50 | - |" in text
    assert_png(out / "lr_transfer.png")
    rows = (out / "lr_transfer.csv").read_text().splitlines()
    assert rows[0] == ",".join(lr_transfer.FIELDS) and len(rows) == 1 + 8


def test_no_run_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit):
        lr_transfer.main([str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert "no run with a status and a learning rate" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_eps_check_medians_per_group(toy_data, tmp_path):
    run = tmp_path / "run"
    arch = ["--encoder-layers", "2", "--decoder-layers", "2", "--share-all-embeddings"]
    train(toy_data, run / "checkpoints", *arch, "--max-update", "3", "--adam-eps", "1e-6")
    ratios = lr_transfer.eps_ratios(str(run))
    # by hand: the trainer gives Adam the model's trainable parameters in order; name them with
    # a model built here through fairseq's parser, not the checkpoint's loader
    model, _, _ = build(toy_data, "deepnet_transformer_tiny", *arch)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    state = torch.load(run / "checkpoints" / "checkpoint_last.pt",
                       weights_only=False)["last_optimizer_state"]
    weights = [state["state"][i]["exp_avg_sq"].sqrt().flatten() / 1e-6
               for i, n in enumerate(names)
               if n.startswith("decoder.layers.") and n.endswith("weight")
               and "layer_norm" not in n]
    assert ratios["decoder layers: weights"] == pytest.approx(torch.cat(weights).median().item())
    assert set(ratios) == {f"{side} layers: {kind}" for side in ("encoder", "decoder")
                           for kind in ("weights", "biases", "LayerNorms")} | \
        {"encoder embeddings/final LN/output"}
