"""The memory plan (deepnet_fairseq/recipes/run/memory.py) and the launcher's use of it."""

import glob
import json
import os

import pytest

from deepnet_fairseq.recipes.run.memory import (
    GB, TRANSIENT, MemoryPlanError, estimate, layer_parameters, parameter_count, plan)
from deepnet_fairseq.recipes.spec import settings
from deepnet_fairseq.recipes.spec.settings import SettingError
from deepnet_fairseq.recipes.run.commands import method_args, task_args, train_command
from deepnet_fairseq.recipes.run.layout import plan_layout
from support import REPO


MEASURED = os.path.join(REPO, "results", "memory", "h200-fairseq-trainer-peaks.jsonl")
BASE = dict(embed_dim=512, ffn_dim=2048)
VOCAB = 32004  # fairseq's dictionary of 32,000 words and its 4 special symbols

# Measured on an H200 (fairseq's models, shared embeddings, base width, vocabulary 32,004)
REFERENCE_PARAMS = {6: 60_524_544, 18: 148_801_536, 50: 384_206_848, 100: 752_027_648,
                    200: 1_487_669_248}


@pytest.mark.parametrize("layers, count", sorted(REFERENCE_PARAMS.items()))
def test_parameter_count_matches_the_h200_models(layers, count):
    assert parameter_count(layers, layers, vocab=VOCAB, **BASE) == count


@pytest.mark.parametrize("method, layers, extra", [
    ("deepnet", 2, []), ("post_ln", 3, []),
    ("deepnet", 6, ["--encoder-embed-dim", "512", "--decoder-embed-dim", "512",
                    "--encoder-ffn-embed-dim", "2048", "--decoder-ffn-embed-dim", "2048",
                    "--encoder-attention-heads", "8", "--decoder-attention-heads", "8"]),
])
def test_parameter_count_matches_models_built_here(tmp_path, method, layers, extra):
    from deepnet_fairseq.diagnostics.common import build_training, write_dictionary

    write_dictionary(str(tmp_path), 32000)
    cfg, task, model, _ = build_training(str(tmp_path), method, layers,
                                         ["--share-all-embeddings", *extra])
    built = sum(p.numel() for p in model.parameters())
    assert built == parameter_count(layers, layers, cfg.model.encoder_embed_dim,
                                    cfg.model.encoder_ffn_embed_dim, len(task.source_dictionary))


def _measured():
    with open(MEASURED, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@pytest.mark.parametrize("row", _measured(), ids=lambda r: f"{r['layers']}L-{r['precision']}"
                         f"{'-ckpt' if r['ckpt'] else ''}")
def test_estimate_within_15_percent_of_each_h200_point(row):
    """Peak above the resident set (what the fit models) and the whole peak, per point."""
    memory_efficient = row["precision"] == "mefp16"
    est = estimate(row["params"], 2 * row["layers"], 512, VOCAB, row["tokens"],
                   "fp16" if memory_efficient else row["precision"], row["ckpt"],
                   memory_efficient=memory_efficient)
    parts = est.components
    resident = est.peak - max(parts["activations"] - parts["gradients"],
                              parts["optimizer-step temporaries"])
    assert resident == pytest.approx(row["resident"], rel=0.15)
    assert est.peak - resident == pytest.approx(row["peak"] - row["resident"], rel=0.15)
    assert est.peak == pytest.approx(row["peak"], rel=0.15)


# ---- on CPU ---------------------------------------------------------------------------------

CPU_MEASURED = sorted(glob.glob(os.path.join(REPO, "results", "memory", "cpu-*.jsonl")))


def test_cpu_estimate_components_by_hand():
    """One small config, every component written out (memory.py's CPU terms: 12.4 bytes per
    token per vocabulary entry, 71.0 / 36.6 bytes per token per layer per width unit in fp32 /
    bf16; resident bytes per parameter as on a GPU)."""
    P, L, d, V, T = 10_000_000, 4, 512, 1000, 1024
    fp32 = estimate(P, L, d, V, T, "fp32", device="cpu").components
    activations = T * (12.4 * V + L * d * 71.0)  # 161,595,392
    assert activations == pytest.approx(161_595_392)
    assert fp32 == pytest.approx({
        "weights": 4 * P, "gradients": 4 * P, "fp32 master + its gradient": 0,
        "Adam m and v": 8 * P, "DDP gradient buckets": 0, "activations": activations,
        "optimizer-step temporaries": 4 * V * d})  # Adam's denominator of the embedding
    # peak = resident 160 MB + (activations - gradients) 121.6 MB
    assert estimate(P, L, d, V, T, "fp32", device="cpu").peak == pytest.approx(281_595_392)
    # bf16, ZeRO-1 over 2 processes: half weights and gradients, fp32 masters with their
    # gradient, Adam's state halved, fairseq's legacy_ddp buffer (a copy of the gradients)
    bf16 = estimate(P, L, d, V, T, "bf16", zero=True, world=2, device="cpu")
    activations = T * (12.4 * V + L * d * 36.6)  # 89,453,363.2
    assert bf16.components == pytest.approx({
        "weights": 2 * P, "gradients": 2 * P, "fp32 master + its gradient": 8 * P,
        "Adam m and v": 4 * P, "DDP gradient buckets": 2 * P, "activations": activations,
        "optimizer-step temporaries": 4 * V * d})  # per tensor: ZeRO's masters are not flat
    assert bf16.peak == pytest.approx(180_000_000 + 89_453_363.2 - 20_000_000)
    # the CUDA terms differ: the fp32 output term there is 1.611 x 12.22, not 12.4
    assert estimate(P, L, d, V, T, "fp32").components["activations"] == pytest.approx(
        T * 1.611 * (12.22 * V + L * d * 34.10))


def test_cpu_estimate_refuses_what_was_not_measured():
    with pytest.raises(ValueError, match="checkpointing"):
        estimate(10**6, 4, 512, 1000, 1024, "fp32", checkpointing=True, device="cpu")
    with pytest.raises(ValueError, match="device"):
        estimate(10**6, 4, 512, 1000, 1024, "fp32", device="tpu")


def _cpu_measured():
    rows = []
    for path in CPU_MEASURED:  # the fit's points, the check's, fp16 at 1,024 tokens
        with open(path, encoding="utf-8") as handle:
            rows += [json.loads(line) for line in handle if line.strip()]
    return rows


@pytest.mark.parametrize("row", _cpu_measured(),
                         ids=lambda r: f"{r['precision']}-{r['layers']}L-{r['tokens']}")
def test_cpu_estimate_within_15_percent_of_each_cpu_point(row):
    """benchmarks/memory_plan.py on this repository's CPU (results/memory/cpu-*.jsonl): fp32,
    bf16, fp16 (the compat launcher's lifted CUDA calls), and in 2 processes ZeRO-1, full
    sharding (FSDP2) and their unsharded reference (legacy_ddp), fp32 and bf16, three depths
    each, and the fit's points. The benchmark measures a training update, never validation:
    full sharding's peak is compared without the validation transient (whole weights)."""
    mode = row["precision"]
    zero, full_shard = mode.startswith("zero"), mode.startswith("fsdp")
    two = zero or full_shard or mode.startswith("ddp")
    precision = "bf16" if mode.endswith("-bf16") else "fp32" if two else mode
    est = estimate(row["params"], 2 * row["layers"], 512, row["vocab"], row["tokens"],
                   precision, zero=zero, world=2 if two else 1, device="cpu",
                   full_shard=full_shard, layer_params=layer_parameters(512, 2048))
    parts = est.components
    resident = sum(v for k, v in parts.items() if k not in TRANSIENT)
    training = resident + max(parts["activations"] - parts["gradients"],
                              parts["optimizer-step temporaries"])
    assert row["estimate"] == pytest.approx(training)  # what the benchmark printed
    assert est.peak == pytest.approx(training if not full_shard else max(
        training, resident + parts["validation: whole weights"]))
    assert training == pytest.approx(row["peak"], rel=0.15)


def _side_by_side(mode):
    return {row["layers"]: row for row in _cpu_measured() if row["precision"] == mode}


@pytest.mark.parametrize("precision", ["", "-bf16"])
def test_cpu_full_sharding_divides_the_resident_state(precision):
    """FSDP2 over 2 processes against the same 2 processes unsharded (one run of the benchmark,
    results/memory/cpu-peaks-fsdp.jsonl): the resident state after an update is the sharded
    part of the plan (16 / 2 bytes per parameter in fp32, 20 / 2 in bf16: weights, gradients,
    fp32 masters, Adam) within 10%, against 20 and 22 unsharded (its legacy_ddp buffer of the
    gradients and, in bf16, FP16Optimizer's flat master); nothing stays gathered after it."""
    sharded, whole = _side_by_side("fsdp" + precision), _side_by_side("ddp" + precision)
    assert sorted(sharded) == sorted(whole) == [6, 12, 24]
    per_param = 8 if not precision else 10
    for layers, row in sharded.items():
        assert row["resident"] / row["params"] == pytest.approx(per_param, rel=0.10)
        assert row["resident"] / whole[layers]["resident"] < 0.5


def _grid_plan(layers, gpus, card):
    return plan(layers, layers, vocab=VOCAB, gpus_per_node=min(gpus, 8), nodes=max(1, gpus // 8),
                gpu_memory_gb=card, tokens_per_gpu=4096, tokens_per_update=262144,
                precision="fp16", **BASE)


# (layers per side, GPUs, GB per GPU) -> the expected choice, or None: refused
EXPECTED = {
    (6, 1, 80): "plain DDP", (6, 8, 24): "plain DDP", (50, 1, 24): "plain DDP",
    (100, 1, 24): "activation checkpointing", (100, 8, 40): "plain DDP",
    (200, 8, 80): "plain DDP", (200, 8, 40): "activation checkpointing + ZeRO-1",
    (200, 1, 40): "activation checkpointing",
    (200, 1, 24): "activation checkpointing + memory-efficient fp16",
    (500, 8, 80): "activation checkpointing + ZeRO-1",
    (500, 64, 40): "activation checkpointing + ZeRO-1 + memory-efficient fp16",
    (500, 1, 80): "activation checkpointing + memory-efficient fp16",
    (500, 8, 24): "activation checkpointing + full sharding (FSDP2)",
    (500, 64, 24): "activation checkpointing + full sharding (FSDP2)",
    (500, 1, 24): None, (500, 1, 40): None,
}


@pytest.mark.parametrize("layers", [6, 18, 50, 100, 200, 500])
@pytest.mark.parametrize("gpus", [1, 8, 64])
@pytest.mark.parametrize("card", [24, 40, 80])
def test_grid_fits_the_card_or_is_refused_with_numbers(layers, gpus, card):
    try:
        chosen = _grid_plan(layers, gpus, card)
    except MemoryPlanError as err:
        assert EXPECTED.get((layers, gpus, card), None) is None
        assert f"against {card * 0.9:.1f} GB usable" in str(err)
        assert "It would fit on" in str(err)
        return
    assert EXPECTED.get((layers, gpus, card), chosen.choice.name) == chosen.choice.name
    assert chosen.fits and chosen.estimate.peak <= card * 0.9 * GB
    assert chosen.choice.max_tokens * gpus * chosen.choice.update_freq >= 262144
    if chosen.choice.zero:
        assert gpus >= 2 and "--zero-sharding" in chosen.flags
    if chosen.choice.full_shard:
        assert gpus >= 2 and chosen.ddp_backend("pytorch_ddp") == "fully_sharded"


def test_500l_on_8x80_needs_checkpointing_and_zero1():
    chosen = _grid_plan(500, 8, 80)
    assert chosen.flags == ["--checkpoint-activations", "--zero-sharding", "os",
                            "--fp16-no-flatten-grads", "--max-tokens", "4096",
                            "--update-freq", "8"]
    # the two cheaper layouts were tried and did not fit
    assert [line.split(",")[0] for line in chosen.tried] == [
        "plain DDP", "activation checkpointing", "activation checkpointing + ZeRO-1"]


def test_500l_on_8x24_shards_fully_where_zero1_does_not_fit():
    """The paper's 1,000-layer model on 24 GB cards: every ZeRO-1 layout was tried first and
    did not fit; full sharding (FSDP2) with per-tensor fp32 masters does, at full batch."""
    chosen = _grid_plan(500, 8, 24)
    assert chosen.flags == ["--checkpoint-activations", "--ddp-backend", "fully_sharded",
                            "--fp16-no-flatten-grads", "--max-tokens", "4096",
                            "--update-freq", "8"]
    assert [line.split(",")[0] for line in chosen.tried] == [
        "plain DDP", "activation checkpointing", "activation checkpointing + ZeRO-1",
        "activation checkpointing + ZeRO-1 + memory-efficient fp16",
        "full sharding (FSDP2)", "activation checkpointing + full sharding (FSDP2)"]


def test_full_sharding_estimate_by_hand():
    """FSDP2 over 8 processes, fp16 with FP16Optimizer's per-tensor masters: the resident
    parts divided by 8, no DDP buckets, two decoder layers and the shared embedding whole
    (parameters and gradients), and validation's whole weights as a transient."""
    P, L, d, f, V, T = 1_000_000_000, 200, 512, 2048, 32004, 4096
    layer = 4 * (d * d + d) * 2 + (d * f + f + f * d + d) + 3 * 2 * d  # a decoder layer
    est = estimate(P, L, d, V, T, "fp16", checkpointing=True, full_shard=True, world=8,
                   layer_params=layer)
    activations = T * (12.22 * V + L * d * 1.96)
    assert est.components == pytest.approx({
        "weights": 2 * P / 8, "gradients": 2 * P / 8, "fp32 master + its gradient": 8 * P / 8,
        "Adam m and v": 8 * P / 8, "DDP gradient buckets": 0,
        "FSDP2 gathered (whole)": 2 * 2 * (2 * layer + V * d), "activations": activations,
        "optimizer-step temporaries": 4 * V * d / 8, "validation: whole weights": 2 * P})
    resident = (2 + 2 + 8 + 8) * P / 8 + 2 * 2 * (2 * layer + V * d)
    assert est.peak == pytest.approx(resident + max(activations - 2 * P / 8, 2 * P))
    with pytest.raises(ValueError, match="exclude each other"):
        estimate(P, L, d, V, T, "fp16", zero=True, full_shard=True, world=8)


def test_ddp_backend_fully_sharded_keeps_to_full_sharding():
    """DDP_BACKEND=fully_sharded: the plan chooses among full sharding's layouts only (a 6L
    model needs no checkpointing under it), and the command says the backend once; one
    process has nothing to shard and plans as without it."""
    _, layout, command = _layout({**CUDA8, "LAYERS": "6", "DDP_BACKEND": "fully_sharded"})
    assert layout.memory.choice.name == "full sharding (FSDP2)"
    assert command.count("--ddp-backend") == 1
    assert command[command.index("--ddp-backend") + 1] == "fully_sharded"
    one = plan(6, 6, vocab=VOCAB, gpus_per_node=1, nodes=1, gpu_memory_gb=80,
               tokens_per_gpu=4096, tokens_per_update=262144, precision="fp16",
               full_shard=True, **BASE)
    assert one.choice.name == "plain DDP"


def test_fewer_tokens_per_gpu_keep_the_tokens_per_update():
    chosen = plan(6, 6, vocab=VOCAB, gpus_per_node=1, nodes=1, gpu_memory_gb=6,
                  tokens_per_gpu=16384, tokens_per_update=65536, precision="fp16", **BASE)
    assert chosen.choice.name == "activation checkpointing + memory-efficient fp16"
    assert chosen.choice.max_tokens == 8192 and chosen.choice.update_freq == 8


def test_refusal_names_what_would_fit():
    with pytest.raises(MemoryPlanError) as err:
        _grid_plan(500, 1, 40)
    message = str(err.value)
    assert "does not fit 1 x 40 GB" in message and "It would fit on 1 GPU(s) of at least" \
        in message and "or on 2 GPUs of 40 GB" in message and "full sharding" in message


def test_a_forced_setting_is_kept_and_the_plan_says_it_does_not_fit():
    chosen = plan(500, 500, vocab=VOCAB, gpus_per_node=1, nodes=1, gpu_memory_gb=50,
                  tokens_per_gpu=4096, tokens_per_update=262144, precision="fp16",
                  checkpointing=False, **BASE)
    assert not chosen.fits and not chosen.choice.checkpointing
    assert "CHECKPOINT_ACTIVATIONS=0 does not fit" in chosen.warning
    assert "auto would choose activation checkpointing" in chosen.warning


# ---- through the launcher -------------------------------------------------------------------

def _layout(env, dataset="opus100"):
    cfg = settings.resolve(dataset, env, REPO, lambda: 8)
    layout = plan_layout(cfg, env, lambda: 8, memory_probe=lambda: None)
    command = train_command(cfg, layout, method_args(cfg),
                                   task_args(cfg, dry_run=True), python="PY")
    return cfg, layout, command


CUDA8 = {"DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "GPU_MEMORY_GB": "80"}


@pytest.mark.parametrize("layers", [6, 12, 24, 50, 100, 250, 500])  # the opus100 preset's DEPTHS
def test_opus100_sweep_plans_every_depth_on_8x80(layers):
    cfg, layout, command = _layout({**CUDA8, "LAYERS": str(layers)})
    assert str(layers) in cfg["DEPTHS"].split()
    assert layout.memory.fits and layout.memory.estimate.peak <= 72 * GB
    assert layout.tokens_per_update >= cfg.optim.tokens_per_update
    assert command[command.index("--max-tokens") + 1] == str(layout.max_tokens)
    assert ("--checkpoint-activations" in command) is layout.checkpoint_activations
    if layers == 500:
        assert layout.memory.choice.name == "activation checkpointing + ZeRO-1"
        assert command[command.index("--zero-sharding") + 1] == "os"
    if layers <= 100:
        assert layout.memory.choice.name == "plain DDP"
    assert command[command.index("--ddp-backend") + 1] == "pytorch_ddp"


def test_opus100_1000_layers_on_8x24_plans_full_sharding():
    _, layout, command = _layout({**CUDA8, "LAYERS": "500", "GPU_MEMORY_GB": "24"})
    assert layout.memory.fits and layout.memory.estimate.peak <= 21.6 * GB
    assert layout.memory.choice.name == "activation checkpointing + full sharding (FSDP2)"
    assert command.count("--ddp-backend") == 1
    assert command[command.index("--ddp-backend") + 1] == "fully_sharded"
    assert "--fp16-no-flatten-grads" in command and "--zero-sharding" not in command


def test_memory_text_for_the_dry_run():
    _, layout, _ = _layout({**CUDA8, "LAYERS": "500"})
    text = layout.memory_text()
    for part in ("weights", "gradients", "fp32 master", "Adam m and v", "activations",
                 "peak (estimated)", "choice: activation checkpointing + ZeRO-1"):
        assert part in text
    assert "memory plan:" in layout.summary()


def test_explicit_checkpointing_is_respected():
    _, layout, command = _layout({**CUDA8, "LAYERS": "6", "CHECKPOINT_ACTIVATIONS": "1"})
    assert layout.checkpoint_activations and "--checkpoint-activations" in command


def test_a_refused_plan_is_a_setting_error():
    with pytest.raises(SettingError, match="memory plan: 500L-500L .* does not fit 8 x 8 GB"):
        _layout({**CUDA8, "GPU_MEMORY_GB": "8", "LAYERS": "500"})


def test_gpu_memory_gb_must_be_positive():
    with pytest.raises(SettingError, match="GPU_MEMORY_GB"):
        _layout({**CUDA8, "GPU_MEMORY_GB": "0"})


def test_no_plan_on_cpu_nor_without_a_gpu_size():
    _, layout, command = _layout({"DEVICE": "cpu", "LAYERS": "100", "PRECISION": "fp32"})
    assert layout.memory is None and layout.memory_text() == ""
    env = {"DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": "0", "LAYERS": "100"}
    _, layout, _ = _layout(env, "wmt17")
    assert layout.memory is None and layout.checkpoint_activations  # the depth threshold


def test_the_gpu_size_is_probed_only_without_the_setting():
    env = {"DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": "0", "LAYERS": "6"}
    cfg = settings.resolve("wmt17", env, REPO)
    assert plan_layout(cfg, env, memory_probe=lambda: 40.0).memory.gpu_memory_gb == 40
    cfg = settings.resolve("wmt17", {**env, "GPU_MEMORY_GB": "24"}, REPO)

    def no_probe():
        raise AssertionError("probed although GPU_MEMORY_GB is set")

    assert plan_layout(cfg, env, memory_probe=no_probe).memory.gpu_memory_gb == 24


def test_without_a_gpu_size_the_dry_run_says_why_there_is_no_plan(tmp_path, capsys, monkeypatch):
    """The README's 1,000-layer dry run on a machine without a GPU: no plan (checkpointing by
    depth, no ZeRO-1), and it says so and how to get one; with GPU_MEMORY_GB, the plan."""
    env = {k: v for k, v in CUDA8.items() if k != "GPU_MEMORY_GB"}
    env.update(LAYERS="500", DEEPNET_WORK=str(tmp_path / "work"))
    _, layout, command = _layout(env)
    assert layout.memory is None and "--zero-sharding" not in command
    text = layout.memory_text()
    assert "GPU memory is unknown" in text and "cannot plan memory" in text
    assert "Set GPU_MEMORY_GB=<GB per GPU>" in text and "no ZeRO-1" in text
    assert "no memory plan (GPU memory unknown)" in layout.summary()
    _, planned, _ = _layout({**env, "GPU_MEMORY_GB": "80"})
    assert planned.memory_unknown == "" and "GPU_MEMORY_GB" not in planned.memory_text()
    _, cpu, _ = _layout({"DEVICE": "cpu", "LAYERS": "6", "PRECISION": "fp32"})
    assert cpu.memory_text() == ""  # CPU: no plan to miss

    # through the runner's dry run (train.sh --dry-run), on a machine where torch sees no GPU
    from deepnet_fairseq.recipes.run import runner

    real = runner.plan_layout
    monkeypatch.setattr(runner, "plan_layout", lambda cfg, env: real(
        cfg, env, lambda: 8, memory_probe=lambda: None))
    cfg = settings.resolve("opus100", env, REPO, lambda: 8)
    assert runner.train(cfg, env, dry_run=True) == 0
    err = capsys.readouterr().err
    assert "cannot plan memory" in err and "GPU_MEMORY_GB=<GB per GPU>" in err
    monkeypatch.setattr(runner, "plan_layout", lambda cfg, env: real(
        cfg, env, lambda: 8, memory_probe=lambda: None))
    cfg = settings.resolve("opus100", {**env, "GPU_MEMORY_GB": "80"}, REPO, lambda: 8)
    assert runner.train(cfg, env, dry_run=True) == 0
    out, err = capsys.readouterr()
    assert "choice: activation checkpointing + ZeRO-1" in out and "cannot plan" not in out + err
    assert "--zero-sharding os" in out
