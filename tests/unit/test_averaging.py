"""deepnet-average-checkpoints on hand-made checkpoints: the mean (against hand-written values
and a float64 reference), a model-only output that fairseq's loader accepts, tied tensors kept
tied, one file memory-mapped at a time, and its errors."""

import argparse
import os
import sys

import pytest
import torch

from deepnet_fairseq import average_checkpoints as avg
from deepnet_fairseq.storage.fileio import save_torch
from support import REPO


CFG = {"model": argparse.Namespace(arch="deepnet_transformer_tiny"),
       "task": {"_name": "translation"}}


def checkpoint(path, weight, half, step, num_updates, tie=True):
    """A fairseq-shaped checkpoint: model, Adam state, history, metrics, an EMA copy."""
    embed = torch.tensor(weight, dtype=torch.float32).reshape(1, -1)
    model = {"encoder.embed_tokens.weight": embed,
             "decoder.embed_tokens.weight": embed if tie else embed.clone(),
             "decoder.layers.0.fc1.weight": torch.tensor(half, dtype=torch.float16),
             "encoder.version": torch.tensor([step])}
    torch.save({
        "args": None, "cfg": CFG, "model": model, "criterion": {},
        "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion",
                               "optimizer_name": "FairseqAdam", "lr_scheduler_state": {"best": 3.0},
                               "num_updates": num_updates, "best_loss": 3.0}],
        "last_optimizer_state": {"state": {0: {"exp_avg": torch.ones(1000)}}},
        "task_state": {}, "extra_state": {"train_iterator": {"epoch": 2}, "metrics": {"x": 1},
                                          "ema": {"w": torch.ones(1000)}},
    }, path)
    return str(path)


@pytest.fixture
def three(tmp_path):
    return [checkpoint(tmp_path / "checkpoint_1_10.pt", [1.0, 2.0, 3.0], [0.5, 1.0], 1, 10),
            checkpoint(tmp_path / "checkpoint_1_20.pt", [2.0, 3.0, 4.0], [1.5, 2.0], 2, 20),
            checkpoint(tmp_path / "checkpoint_2_30.pt", [4.0, 5.0, 7.0], [2.5, 6.0], 3, 30)]


def test_mean_by_hand_newest_counters_and_dtypes(three):
    model = avg.average(three)["model"]
    embed = model["encoder.embed_tokens.weight"]
    assert embed.dtype == torch.float32
    assert torch.allclose(embed, torch.tensor([[7 / 3, 10 / 3, 14 / 3]]), rtol=0, atol=1e-6)
    fc1 = model["decoder.layers.0.fc1.weight"]
    assert fc1.dtype == torch.float16 and fc1.tolist() == [1.5, 3.0]  # (0.5+1.5+2.5)/3, 9/3
    assert model["encoder.version"].tolist() == [3]  # copied from the newest, not averaged
    assert list(model) == ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                           "decoder.layers.0.fc1.weight", "encoder.version"]


def test_output_is_model_only_and_fairseq_loads_it(three, tmp_path):
    out = tmp_path / "avg.pt"
    save_torch(avg.average(three), str(out))
    state = torch.load(out, weights_only=True)
    assert sorted(state) == ["args", "cfg", "extra_state", "model", "optimizer_history",
                             "task_state"]
    assert state["optimizer_history"] == [{
        "criterion_name": "LabelSmoothedCrossEntropyCriterion", "optimizer_name": "FairseqAdam",
        "lr_scheduler_state": {"best": 3.0}, "num_updates": 30}]
    assert state["extra_state"] == {"train_iterator": {"epoch": 2}, "averaged_checkpoints": [
        "checkpoint_1_10.pt", "checkpoint_1_20.pt", "checkpoint_2_30.pt"]}
    # tied embeddings stay one tensor: stored once, as in the inputs
    model = state["model"]
    assert model["decoder.embed_tokens.weight"].data_ptr() == \
        model["encoder.embed_tokens.weight"].data_ptr()
    from fairseq import checkpoint_utils
    loaded = checkpoint_utils.load_checkpoint_to_cpu(str(out))  # fairseq's upgrade path
    assert loaded["cfg"].model.arch == "deepnet_transformer_tiny"
    assert loaded["optimizer_history"][-1]["num_updates"] == 30


def test_untied_inputs_stay_untied(tmp_path):
    paths = [checkpoint(tmp_path / f"c{i}.pt", [float(i)] * 3, [1.0, 1.0], i, i, tie=False)
             for i in (1, 2)]
    model = avg.average(paths)["model"]
    assert model["decoder.embed_tokens.weight"].data_ptr() != \
        model["encoder.embed_tokens.weight"].data_ptr()
    assert model["decoder.embed_tokens.weight"].tolist() == [[1.5, 1.5, 1.5]]


def test_float32_sum_is_as_good_as_float64(tmp_path):
    torch.manual_seed(0)
    weights = [torch.randn(4096) * 10 ** torch.randint(-4, 2, (4096,)) for _ in range(10)]
    paths = []
    for i, w in enumerate(weights):
        torch.save({"cfg": CFG, "model": {"w": w, "h": w.half(), "b": w.bfloat16()}},
                   tmp_path / f"c{i}.pt")
        paths.append(str(tmp_path / f"c{i}.pt"))
    model = avg.average(paths)["model"]
    exact = torch.stack([w.double() for w in weights]).mean(0)
    bound = 9 * 2.0 ** -24 * torch.stack([w.double().abs() for w in weights]).sum(0) / 10
    assert ((model["w"].double() - exact).abs() <= bound + 2.0 ** -24 * exact.abs()).all()
    for name, dtype in (("h", torch.float16), ("b", torch.bfloat16)):
        reference = torch.stack([w.to(dtype).double() for w in weights]).mean(0).to(dtype)
        # the float64 mean's rounding, or its neighbour (one step of the dtype) on a tie
        step = torch.finfo(dtype).eps * reference.double().abs().clamp(min=torch.finfo(dtype).tiny)
        assert ((model[name].double() - reference.double()).abs() <= step).all()
        assert (model[name] == reference).float().mean() > 0.99


def test_inputs_are_memory_mapped_one_at_a_time(three, monkeypatch):
    real_load, calls = torch.load, []

    def load(path, *args, **kwargs):
        calls.append((path, kwargs.get("mmap"), kwargs.get("weights_only")))
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(torch, "load", load)
    avg.average(three)
    assert calls == [(p, True, True) for p in three]


def test_different_models_are_refused(tmp_path, three):
    other = tmp_path / "other.pt"
    torch.save({"cfg": CFG, "model": {"encoder.embed_tokens.weight": torch.zeros(1, 4)}}, other)
    with pytest.raises(ValueError, match="different parameters"):
        avg.average([three[0], str(other)])
    wider = checkpoint(tmp_path / "wider.pt", [1.0, 2.0, 3.0, 4.0], [1.0, 1.0], 1, 1)
    with pytest.raises(ValueError, match=r"has shape \(1, 4\), \(1, 3\)"):
        avg.average([three[0], wider])
    with pytest.raises(ValueError, match="no checkpoints"):
        avg.average([])


def test_cli_writes_the_mean_of_the_last_update_checkpoints(three, tmp_path, capsys):
    out = tmp_path.parent / f"{tmp_path.name}-out" / "avg.pt"  # not in the input directory
    out.parent.mkdir()  # an output's directory is the user's to make
    avg.cli_main(["--inputs", str(tmp_path), "--num-update-checkpoints", "2", "--output", str(out)])
    model = torch.load(out, weights_only=True)["model"]
    assert model["encoder.embed_tokens.weight"].tolist() == [[3.0, 4.0, 5.5]]
    assert "averaging 2 checkpoints" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        avg.cli_main(["--inputs", str(tmp_path), "--num-update-checkpoints", "4",
                      "--output", str(out)])
    assert "holds 3" in capsys.readouterr().err


def test_output_is_written_atomically_and_readable_per_umask(three, tmp_path, monkeypatch):
    out = tmp_path / "out" / "avg.pt"
    umask = os.umask(0o022)
    try:
        save_torch(avg.average(three), str(out))
    finally:
        os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o644

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_torch({}, str(tmp_path / "out" / "second.pt"))
    assert os.listdir(tmp_path / "out") == ["avg.pt"]  # no partial file, no temporary left


# ---- benchmarks/average_memory.py: its "before" is the old averaging, its table ------------

def test_benchmark_before_keeps_everything_and_agrees_on_the_mean(three):
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import average_memory

    before = average_memory.average_before(three)
    assert "last_optimizer_state" in before and before["extra_state"]["ema"] is not None
    assert before["model"]["encoder.embed_tokens.weight"].tolist()[0] == pytest.approx(
        [7 / 3, 10 / 3, 14 / 3])
    rows = [{"method": "before", "peak_kb": 4 * 2 ** 20, "imports_kb": 2 ** 20, "seconds": 9.5,
             "output_bytes": 3 * 2 ** 30},
            {"method": "after", "peak_kb": 2 * 2 ** 20, "imports_kb": 2 ** 20, "seconds": 2.0,
             "output_bytes": 2 ** 30}]
    text = average_memory.table(rows, params=100_000_000, checkpoint_bytes=3 * 2 ** 30)
    assert "5 checkpoints of 100.0M parameters, 3072 MiB each" in text
    assert "the model alone is 381 MiB in fp32" in text  # 4e8 bytes / 2**20
    assert "| before | 4096 | 3072 | 9.5 | 3072 |" in text
    assert "| after | 2048 | 1024 | 2.0 | 1024 |" in text
    assert "before / after: peak RSS x2.00, above imports x3.00" in text


@pytest.mark.parametrize("options,named", [
    ({"arch": "deepnet_transformer_tiny", "deepnorm_constants": "adam"},
     "deepnorm_constants paper vs adam"),
    ({"arch": "post_ln_transformer_tiny"}, "arch deepnet_transformer_tiny vs post_ln_transformer_tiny"),
    ({"arch": "deepnet_transformer_tiny", "encoder_layers": 3}, "encoder_layers 2 vs 3"),
    ({"arch": "deepnet_transformer_tiny", "depth_transfer": "completep"},
     "depth_transfer none vs completep"),
])
def test_checkpoints_of_different_model_configurations_are_refused_by_name(tmp_path, options,
                                                                           named):
    """Same parameter names, other models (deepnet and deepnet_adam, another depth with the
    same tensors, ...): refused, naming the option that differs, nothing written."""
    base = {"arch": "deepnet_transformer_tiny", "encoder_layers": 2, "deepnorm_constants": "paper",
            "depth_transfer": "none"}
    paths = []
    for name, model_options in (("a", base), ("b", {**base, **options})):
        path = tmp_path / f"{name}.pt"
        torch.save({"cfg": {"model": argparse.Namespace(**model_options)},
                    "model": {"w": torch.ones(2)}}, path)
        paths.append(str(path))
    with pytest.raises(ValueError, match="its model options differ") as refused:
        avg.average(paths)
    assert named in str(refused.value)


def test_recorded_deepnorm_constants_are_kept_never_averaged(tmp_path):
    """The (alpha, beta) each DeepNorm layer records: equal across inputs, copied; unequal (two
    runs built with other constants), refused."""
    paths = []
    for name, alpha in (("a", 2.0), ("b", 2.0), ("c", 3.0)):
        path = tmp_path / f"{name}.pt"
        torch.save({"cfg": CFG, "model": {
            "encoder.layers.0.deepnorm_constants": torch.tensor([alpha, 0.5], dtype=torch.float64),
            "encoder.layers.0.fc1.weight": torch.ones(2)}}, path)
        paths.append(str(path))
    kept = avg.average(paths[:2])["model"]["encoder.layers.0.deepnorm_constants"]
    assert kept.tolist() == [2.0, 0.5] and kept.dtype == torch.float64
    with pytest.raises(ValueError, match="built with other constants"):
        avg.average(paths[1:])
