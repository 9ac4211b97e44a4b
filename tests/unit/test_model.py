"""DeepNorm as built through fairseq: skip scale, init statistics, agreement with fairseq."""

import math
import re

import pytest
import torch
from fairseq.models.transformer import TransformerConfig
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase

from deepnet_fairseq import constants
from deepnet_fairseq.nn.initialization import BETA_GAIN_ROLES, UNIT_GAIN_ROLES, deepnorm_init_
from deepnet_fairseq.nn.method_layers import DeepNormDecoderLayer, DeepNormEncoderLayer
from support import (
    NARROW, WIDE, assert_decodes_incrementally_as_in_one_pass, build, sample_batch, train,
)


# Wide enough that a weight's sample std is within about 1% of its expected value.


def unwrapped_layers(stack):
    return list(stack.layers)


def xavier_std(weight, gain):
    fan_out, fan_in = weight.shape
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


def test_named_depth_sets_every_layer_skip_scale_and_gain(toy_data):
    model, _, _ = build(toy_data, "deepnet_transformer_100_100", *NARROW)
    expected = constants.encoder_decoder(100, 100)
    assert len(model.encoder.layers) == 100 and len(model.decoder.layers) == 100
    for layer in model.encoder.layers:
        assert isinstance(layer, DeepNormEncoderLayer)
        assert (layer.alpha, layer.beta) == (expected.encoder_alpha, expected.encoder_beta)
    for layer in model.decoder.layers:
        assert isinstance(layer, DeepNormDecoderLayer)
        assert (layer.alpha, layer.beta) == (expected.decoder_alpha, expected.decoder_beta)


def test_uneven_depths_use_actual_n_and_m(toy_data):
    model, _, _ = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 18,
                        "--decoder-layers", 6)
    expected = constants.encoder_decoder(18, 6)
    assert model.encoder.layers[0].alpha == expected.encoder_alpha
    assert model.decoder.layers[0].beta == expected.decoder_beta


def test_overrides_reach_the_layers(toy_data):
    model, _, _ = build(toy_data, "deepnet_transformer_tiny", "--deepnorm-encoder-alpha", 1.5,
                        "--deepnorm-decoder-beta", 0.25)
    default = constants.encoder_decoder(2, 2)
    enc, dec = model.encoder.layers[0], model.decoder.layers[0]
    assert (enc.alpha, enc.beta) == (1.5, default.encoder_beta)
    assert (dec.alpha, dec.beta) == (default.decoder_alpha, 0.25)


# The paper's Algorithm 1, written out by hand (not the package's role lists): Xavier with gain
# beta for the feed-forward layers and the value and output projections of every attention,
# gain 1 for the query and key projections
PAPER_BETA_ROLES = ("fc1", "fc2", "self_attn.v_proj", "self_attn.out_proj",
                    "encoder_attn.v_proj", "encoder_attn.out_proj")
PAPER_UNIT_ROLES = ("self_attn.q_proj", "self_attn.k_proj", "encoder_attn.q_proj",
                    "encoder_attn.k_proj")


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_init_std_of_each_role_matches_xavier_normal_times_gain(toy_data, side):
    model, _, _ = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 3,
                        "--decoder-layers", 3, *WIDE)
    c = constants.encoder_decoder(3, 3)
    beta = c.encoder_beta if side == "encoder" else c.decoder_beta
    layers = getattr(model, side).layers
    checked = 0
    for layer in layers:
        modules = dict(layer.named_modules())
        roles = [(r, beta) for r in PAPER_BETA_ROLES] + [(r, 1.0) for r in PAPER_UNIT_ROLES]
        for role, gain in roles:
            if role not in modules:
                assert side == "encoder" and role.startswith("encoder_attn")
                continue
            weight, bias = modules[role].weight, modules[role].bias
            assert weight.std().item() == pytest.approx(xavier_std(weight, gain), rel=0.03), role
            assert abs(weight.mean().item()) < 0.1 * xavier_std(weight, gain), role
            assert torch.count_nonzero(bias) == 0, role
            checked += 1
    assert checked == len(layers) * (6 if side == "encoder" else 10)


def test_init_rescales_exactly_the_deepnorm_roles():
    """deepnorm_init_ changes the weights of exactly fc1, fc2, q/k/v/out_proj and zeroes their
    biases; LayerNorms are untouched."""
    cfg = TransformerConfig()
    cfg.encoder.embed_dim, cfg.encoder.ffn_embed_dim, cfg.encoder.attention_heads = 32, 64, 2
    torch.manual_seed(0)
    layer = TransformerEncoderLayerBase(cfg)
    before = {name: p.detach().clone() for name, p in layer.named_parameters()}
    deepnorm_init_(layer, beta=0.5)
    changed = {name for name, p in layer.named_parameters() if not torch.equal(p, before[name])}
    roles = [r for r in BETA_GAIN_ROLES + UNIT_GAIN_ROLES if not r.startswith("encoder_attn")]
    assert {n for n in changed if n.endswith(".weight")} == {f"{r}.weight" for r in roles}
    assert changed <= {f"{r}.{w}" for r in roles for w in ("weight", "bias")}
    for role in roles:
        assert torch.count_nonzero(dict(layer.named_parameters())[f"{role}.bias"]) == 0
    assert not any("layer_norm" in name for name in changed)


def test_embeddings_and_layer_norms_keep_fairseq_defaults(toy_data):
    model, _, _ = build(toy_data, "deepnet_transformer_tiny", *WIDE)
    emb = model.encoder.embed_tokens.weight
    assert emb[1:].std().item() == pytest.approx(256 ** -0.5, rel=0.05)  # fairseq: N(0, d^-0.5)
    for name, p in model.named_parameters():
        if "layer_norm" in name:
            assert torch.all(p == (1.0 if name.endswith("weight") else 0.0)), name


def _logits(model, batch):
    model.eval()
    with torch.no_grad():
        return model(**batch["net_input"])[0]


def test_alpha_one_with_fairseq_weights_equals_fairseq_post_ln(toy_data):
    reference, task, _ = build(toy_data, "transformer_tiny", "--encoder-layers", 3,
                               "--decoder-layers", 3, "--encoder-ffn-embed-dim", 128)
    deepnet, _, _ = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 3,
                          "--decoder-layers", 3, "--deepnorm-encoder-alpha", 1,
                          "--deepnorm-decoder-alpha", 1, seed=2)
    scaled, _, _ = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 3,
                         "--decoder-layers", 3)
    deepnet.load_state_dict(reference.state_dict(), strict=True)
    scaled.load_state_dict(reference.state_dict(), strict=True)
    batch = sample_batch(task)
    expected = _logits(reference, batch)
    assert torch.equal(_logits(deepnet, batch), expected)
    # the paper's alpha changes the function: the comparison above can fail
    assert not torch.allclose(_logits(scaled, batch), expected, atol=1e-3)


def test_incremental_decoding_equals_full_decoding(toy_data):
    model, task, _ = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 3,
                           "--decoder-layers", 3)
    assert_decodes_incrementally_as_in_one_pass(model, task)


def test_save_then_load_through_fairseq_gives_identical_outputs(toy_data, tmp_path):
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    model, task, cfg = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 4,
                             "--decoder-layers", 4, "--optimizer", "adam", "--lr", 1e-3)
    path = tmp_path / "checkpoint.pt"
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    trainer.consolidate_optimizer()  # what fairseq-train does before each save
    trainer.save_checkpoint(str(path), {})  # fairseq's own checkpoint writer
    # fairseq loads with torch.load's weights-only default: checkpoint_compat must allow it
    (loaded,), _ = checkpoint_utils.load_model_ensemble([str(path)], task=task)
    batch = sample_batch(task)
    assert loaded.encoder.layers[0].alpha == model.encoder.layers[0].alpha
    assert torch.equal(_logits(loaded, batch), _logits(model, batch))


def test_100l_100l_tiny_width_forward_backward_is_finite(toy_data):
    model, task, _ = build(toy_data, "deepnet_transformer_100_100", *NARROW)
    model.train()
    batch = sample_batch(task)
    logits = model(**batch["net_input"])[0]
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["target"].flatten())
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(grads) > 0 and all(torch.isfinite(g).all() for g in grads)


def test_checkpoint_activations_still_checkpoints_deepnorm_layers(toy_data):
    plain, task, _ = build(toy_data, "deepnet_transformer_tiny", "--dropout", 0)
    ckpt, _, _ = build(toy_data, "deepnet_transformer_tiny", "--dropout", 0,
                       "--checkpoint-activations")
    ckpt.load_state_dict(plain.state_dict())
    for layer in list(ckpt.encoder.layers) + list(ckpt.decoder.layers):
        assert isinstance(layer, (DeepNormEncoderLayer, DeepNormDecoderLayer))
        assert hasattr(layer, "precheckpoint_forward"), "layer is not wrapped for checkpointing"
    calls = {"plain": 0, "ckpt": 0}

    def counter(key):
        def hook(*_):
            calls[key] += 1
        return hook

    plain.encoder.layers[0].fc1.register_forward_hook(counter("plain"))
    ckpt.encoder.layers[0].fc1.register_forward_hook(counter("ckpt"))
    batch = sample_batch(task)
    grads = {}
    for key, model in (("plain", plain), ("ckpt", ckpt)):
        model.train()
        model(**batch["net_input"])[0].sum().backward()
        grads[key] = model.encoder.layers[0].fc1.weight.grad
    assert calls == {"plain": 1, "ckpt": 2}  # checkpointing recomputes the forward in backward
    assert torch.allclose(grads["plain"], grads["ckpt"], atol=1e-6)


def test_checkpointing_changes_nothing_but_time_and_memory(toy_data, tmp_path):
    """fairseq-train with dropout, with and without --checkpoint-activations: the same losses to
    the last digit it logs, update by update, and the same weights at the end within float
    rounding. Checkpointing restores the dropout RNG before it recomputes a layer, so
    CHECKPOINT_ACTIVATIONS=auto may choose differently when a run resumes on another machine
    (on CPU, by its memory)."""
    logs, weights = {}, {}
    for name, extra in (("plain", []), ("ckpt", ["--checkpoint-activations"])):
        logs[name] = train(toy_data, tmp_path / name, "--dropout", 0.1, "--max-update", 8,
                           "--disable-validation", *extra)
        weights[name] = torch.load(tmp_path / name / "checkpoint_last.pt",
                                   weights_only=False)["model"]
    losses = {name: re.findall(r"train_inner .*? loss=([0-9.]+)", log)
              for name, log in logs.items()}
    assert len(losses["plain"]) == 8 and losses["plain"] == losses["ckpt"]
    assert weights["plain"].keys() == weights["ckpt"].keys()
    # the same within float rounding: the recomputed backward sums in another order (without
    # the RNG restored, dropout would draw other masks and the losses would part at once); not
    # k_proj's bias, whose gradient is rounding alone (softmax ignores a constant added to every
    # score of a query), which Adam's normalised steps turn into noise of the step's size.
    # atol 2e-5: on one thread the summation order leaves up to 5.5e-6 in fc1 (measured); other
    # dropout masks would differ by the steps themselves, about 1e-3, and part the losses above
    assert all(torch.allclose(weights["plain"][k], weights["ckpt"][k], rtol=1e-5, atol=2e-5)
               for k in weights["plain"] if not k.endswith("k_proj.bias"))
# SHARED with test_train_generate.py: ['TINY_TRAIN', 'train']


@pytest.mark.parametrize("extra,message", [
    (["--encoder-normalize-before"], "deepnet is a Post-LN method"),
    (["--decoder-normalize-before"], "deepnet is a Post-LN method"),
    (["--encoder-layers", "0"], "--encoder-layers must be a positive number of layers"),
    (["--decoder-layers", "-2"], "--decoder-layers must be a positive number of layers"),
    (["--deepnorm-encoder-alpha", "0"], "--deepnorm-encoder-alpha must be positive"),
    (["--deepnorm-decoder-beta", "-0.1"], "--deepnorm-decoder-beta must be positive"),
], ids=["enc-pre-ln", "dec-pre-ln", "enc-depth", "dec-depth", "alpha", "beta"])
def test_bad_settings_fail_clearly_and_write_nothing(toy_data, tmp_path, extra, message):
    save_dir = tmp_path / "checkpoints"
    """fairseq-train's own main (in this process) stops with the plugin's error, before its
    checkpoint directory is made."""
    with pytest.raises(ValueError, match=re.escape(message)):
        train(toy_data, save_dir, "--max-update", 2, *extra)
    assert not save_dir.exists()
