"""--depth-transfer (CompleteP, Depth-muP) on any method: the multipliers pinned by hand from
the papers' table (constants.py), the branch multiplier against fairseq's own Transformer with
the multiplier folded into the branch's last affine map, DeepNet's composition (alpha and beta of
the base depth), and one Adam update against Adam's formula written out by hand. fp16 and
ZeRO-1: test_layernorm_lr.py and slow/test_distributed.py; the export: test_export.py."""

import math

import pytest
import torch

from deepnet_fairseq import constants, methods
from deepnet_fairseq.nn import layernorm_lr
from support import build, decoder_outputs, sample_batch

# (rule, layers, base, branch, hidden lr, hidden eps), by hand: m = layers / base,
# completep (a = 1): m^-1, 1, m^-1; depth_mup (a = 1/2): m^-1/2, m^-1/2, m^-1/2
PINNED = [
    ("completep", 50, 6, 0.12, 1.0, 0.12),
    ("completep", 500, 50, 0.1, 1.0, 0.1),
    ("completep", 3, 6, 2.0, 1.0, 2.0),       # shallower than the base: everything x 2
    ("depth_mup", 24, 6, 0.5, 0.5, 0.5),
    ("depth_mup", 100, 1, 0.1, 0.1, 0.1),
    ("none", 100, None, 1.0, 1.0, 1.0),
    ("completep", 6, 6, 1.0, 1.0, 1.0),       # the base model itself is unchanged
]


@pytest.mark.parametrize("rule,layers,base,branch,lr,eps", PINNED)
def test_multipliers_are_pinned(rule, layers, base, branch, lr, eps):
    t = constants.depth_transfer(rule, layers, base)
    assert (t.branch, t.hidden_lr, t.hidden_eps) == pytest.approx((branch, lr, eps), rel=1e-12)


@pytest.mark.parametrize("rule,base,message", [
    ("completep", None, "needs --depth-base"), ("depth_mup", 0, "needs --depth-base"),
    ("completep", 2.5, "needs --depth-base"), ("mup", 6, "unknown --depth-transfer")])
def test_bad_settings_are_refused_by_name(rule, base, message):
    with pytest.raises(ValueError, match=message):
        constants.depth_transfer(rule, 12, base)


def _fold_branch_into_fairseq(model, plain):
    """``plain`` (fairseq's transformer) loaded with ``model``'s weights, each branch's last
    affine map (out_proj of every attention, fc2) multiplied by its layer's multiplier:
    x + m G(x) is G with its last map scaled by m."""
    weights = dict(model.state_dict())
    for side in ("encoder", "decoder"):
        for i, layer in enumerate(getattr(model, side).layers):
            for sub in ("self_attn.out_proj", "encoder_attn.out_proj", "fc2"):
                for kind in ("weight", "bias"):
                    key = f"{side}.layers.{i}.{sub}.{kind}"
                    if key in weights:
                        weights[key] = weights[key] * layer.branch_multiplier
    plain.load_state_dict(weights)
    return plain


@pytest.mark.parametrize("arch,placement", [("pre_ln_transformer_tiny", ["--encoder-normalize-before", "--decoder-normalize-before"]),
                                            ("post_ln_transformer_tiny", [])],
                         ids=["pre-ln", "post-ln"])
def test_branch_multiplier_equals_fairseqs_transformer_with_the_branch_scaled(toy_data, arch,
                                                                              placement):
    depths = ["--encoder-layers", 3, "--decoder-layers", 2, "--dropout", 0]
    model, task, _ = build(toy_data, arch, *depths, "--depth-transfer", "completep",
                           "--depth-base", 1)
    assert [l.branch_multiplier for l in model.encoder.layers] == [1 / 3] * 3
    assert [l.branch_multiplier for l in model.decoder.layers] == [1 / 2] * 2
    plain, _, _ = build(toy_data, "transformer", *depths, *placement,
                        "--encoder-embed-dim", 64, "--encoder-ffn-embed-dim", 128,
                        "--encoder-attention-heads", 2, "--decoder-attention-heads", 2)
    plain = _fold_branch_into_fairseq(model, plain)
    batch = sample_batch(task, size=8)
    reference, ours = decoder_outputs(plain, batch), decoder_outputs(model, batch)
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
    # and the multiplier does something: the unscaled weights give another output
    plain.load_state_dict(model.state_dict())
    assert (decoder_outputs(plain, batch) - ours).abs().max() > 1e-2


def test_deepnet_takes_alpha_and_beta_at_the_base_depth(toy_data):
    model, _, _ = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 12,
                        "--decoder-layers", 4, "--depth-transfer", "completep",
                        "--depth-base", 2)
    base = constants.encoder_decoder(2, 2)  # the grown model's constants are the 2L-2L model's
    assert {l.alpha for l in model.encoder.layers} == {base.encoder_alpha}
    assert {l.alpha for l in model.decoder.layers} == {base.decoder_alpha}
    assert {l.beta for l in model.decoder.layers} == {base.decoder_beta}
    assert {l.branch_multiplier for l in model.encoder.layers} == {2 / 12}
    assert {l.branch_multiplier for l in model.decoder.layers} == {2 / 4}
    # without the option: the depth's own constants, no multiplier
    plain, _, _ = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 12,
                        "--decoder-layers", 4)
    assert plain.encoder.layers[0].alpha == pytest.approx(constants.encoder_decoder(12, 4).encoder_alpha)
    assert plain.encoder.layers[0].branch_multiplier == 1.0


def test_only_the_layers_parameters_are_tagged(toy_data):
    model, _, _ = build(toy_data, "pre_ln_transformer_tiny", "--encoder-layers", 4,
                        "--decoder-layers", 2, "--depth-transfer", "depth_mup",
                        "--depth-base", 1)
    for name, p in model.named_parameters():
        k = layernorm_lr.multiplier_of(p)
        e = layernorm_lr.multiplier_of(p, layernorm_lr.EPS_KEY)
        if ".layers." in name:
            expected = 4 ** -0.5 if name.startswith("encoder") else 2 ** -0.5
            assert (k, e) == pytest.approx((expected, expected)), name
        else:  # embeddings, final LayerNorms, output projection
            assert k is None and e is None, name


def test_composes_with_the_layernorm_multiplier_by_product(toy_data):
    model, _, _ = build(toy_data, "deepnet_transformer_tiny", "--depth-transfer", "depth_mup",
                        "--depth-base", 1, "--deepnorm-ln-lr-multiplier", "0.5")
    norm = model.encoder.layers[0].final_layer_norm.weight
    fc = model.encoder.layers[0].fc1.weight
    assert layernorm_lr.multiplier_of(norm) == pytest.approx(0.5 * 2 ** -0.5)
    assert layernorm_lr.multiplier_of(fc) == pytest.approx(2 ** -0.5)


def test_the_layers_lr_multiplier_tags_the_layers_alone_and_composes(toy_data):
    """--layers-lr-multiplier: the depth rule on the hidden weights only (embeddings, output
    and final LayerNorms at --lr); with --depth-transfer the two multiply."""
    model, _, _ = build(toy_data, "deepnet_transformer_tiny", "--layers-lr-multiplier", "0.5")
    for name, p in model.named_parameters():
        k = layernorm_lr.multiplier_of(p)
        assert k == (0.5 if ".layers." in name else None), name
        assert layernorm_lr.multiplier_of(p, layernorm_lr.EPS_KEY) is None, name
    model, _, _ = build(toy_data, "deepnet_transformer_tiny", "--layers-lr-multiplier", "0.5",
                        "--depth-transfer", "depth_mup", "--depth-base", 1)
    fc = model.encoder.layers[0].fc1.weight
    assert layernorm_lr.multiplier_of(fc) == pytest.approx(0.5 * 2 ** -0.5)
    assert layernorm_lr.multiplier_of(fc, layernorm_lr.EPS_KEY) == pytest.approx(2 ** -0.5)


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan"])  # a non-number: argparse
def test_a_bad_layers_lr_multiplier_is_refused_while_parsing(toy_data, value):
    with pytest.raises(ValueError, match="--layers-lr-multiplier must be a positive number"):
        build(toy_data, "deepnet_transformer_tiny", "--layers-lr-multiplier", value)


# (arch, options, the layers' lr multiplier k and epsilon multiplier e; 1 elsewhere)
UPDATES = [
    ("pre_ln_transformer_tiny", ["--depth-transfer", "depth_mup", "--depth-base", "1"],
     2 ** -0.5, 2 ** -0.5),
    ("deepnet_transformer_tiny", ["--depth-transfer", "depth_mup", "--depth-base", "1"],
     2 ** -0.5, 2 ** -0.5),
    ("deepnet_transformer_tiny", ["--layers-lr-multiplier", "0.25"], 0.25, 1.0),
]


@pytest.mark.parametrize("arch,transfer,k_layers,e_layers", UPDATES)
def test_one_adam_update_is_adams_formula_with_the_lr_and_eps_multipliers(
        tmp_path, arch, transfer, k_layers, e_layers):
    """fairseq's Adam, first step from zero state: m = (1 - b1) g, v = (1 - b2) g^2 and the
    step lr sqrt(1 - b2) / (1 - b1) m / (sqrt(v) + eps) = lr g / (|g| + eps / sqrt(1 - b2)).
    With the multipliers: lr k and eps e. A large epsilon makes e visible in the step."""
    from fairseq.trainer import Trainer

    from deepnet_fairseq.diagnostics.common import (build_training, reverse_copy_batch,
                                                    write_dictionary)

    write_dictionary(str(tmp_path), 30)
    lr, eps, beta2 = 1e-2, 1e-3, 0.98
    options = ["--optimizer", "adam", "--lr", str(lr), "--lr-scheduler", "fixed",
               "--adam-eps", str(eps), "--adam-betas", f"(0.9, {beta2})", "--dropout", "0",
               "--criterion", "cross_entropy", "--share-all-embeddings", *transfer]
    method = "pre_ln" if arch.startswith("pre_ln") else "deepnet"
    cfg, task, model, criterion = build_training(str(tmp_path), method, 2, options, seed=1)
    trainer = Trainer(cfg, task, model, criterion)
    batch = reverse_copy_batch(task.source_dictionary, 4, 5, torch.Generator().manual_seed(0))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train_step([batch])
    checked = 0
    for name, p in model.named_parameters():
        g = p.grad  # the gradient as clipped and stepped; the hook restores it after the step
        k, e = (k_layers, e_layers) if ".layers." in name else (1.0, 1.0)
        expected = -k * lr * g / (g.abs() + e * eps / math.sqrt(1 - beta2))
        # float32: the step is read back as a difference of parameters near 1 (half an ulp)
        ulp = torch.finfo(torch.float32).eps * (before[name].abs() + 1)
        assert ((p.detach() - before[name] - expected).abs() <= ulp + 1e-4 * expected.abs()).all()
        checked += ".layers." in name and bool((g.abs() < 10 * eps).any())
    assert checked or e_layers == 1.0  # some tagged gradients are small enough for eps to matter


@pytest.mark.parametrize("extra,message", [
    (["--optimizer", "sgd"], "defined for Adam"),
    (["--fp16"], "--depth-transfer needs the optimizer to step each parameter tensor"),
    (["--depth-transfer", "completep"], "needs --depth-base"),
])
def test_settings_it_cannot_serve_are_refused_while_parsing(toy_data, extra, message):
    options = ["--depth-transfer", "completep", "--depth-base", "1", "--optimizer", "adam", *extra]
    if extra == ["--depth-transfer", "completep"]:
        options = extra
    with pytest.raises(ValueError, match=message):
        build(toy_data, "pre_ln_transformer_tiny", *options)


# every architecture the plugin registers (each method's model has --depth-base:
# methods.DEPTH_TRANSFER_OPTIONS)
ARCHS = sorted(arch for method in methods.METHODS.values() for arch in method.archs
               if arch.endswith("_tiny"))


@pytest.mark.parametrize("arch", ARCHS)
def test_a_depth_base_without_a_depth_transfer_is_refused_while_parsing(toy_data, arch):
    """--depth-base alone was a silent no-op: the model trained as if it were not given. Every
    registered architecture refuses it while fairseq parses the options (the one check, in
    constants.depth_transfer, that every layer rule's validate reaches), and still builds
    without it."""
    with pytest.raises(ValueError, match="--depth-base 6 is read only with --depth-transfer"):
        build(toy_data, arch, "--depth-base", "6")
    with pytest.raises(ValueError, match="--depth-base 6 is read only with --depth-transfer"):
        build(toy_data, arch, "--depth-base", "6", "--depth-transfer", "none")
    build(toy_data, arch)
