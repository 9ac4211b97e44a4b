"""The core against independent references: every method's layers recomputed by hand from their
own sub-modules (encoder and decoder: self-attention, cross-attention, FFN in order), DeepNorm's
init against the normal distribution it must draw from, the constants a model was trained with
travelling with its weights, and a new method added in one declaration."""

import importlib.util
import math
import os
import re
import sys

import pytest
import torch

from deepnet_fairseq import constants, methods
from deepnet_fairseq.nn.initialization import BETA_GAIN_ROLES, ROLES, deepnorm_init_
from support import (
    NARROW, REPO, USER_DIR, WIDE, assert_decodes_incrementally_as_in_one_pass, build,
    fairseq_train, sample_batch,
)


# method -> the sum of sub-layer i: f(layer, i, skip x, branch G), written from each paper's rule
RESIDUAL_FORMS = {
    "deepnet": lambda layer, i, x, g: layer.alpha * x + g,
    "deepnet_adam": lambda layer, i, x, g: layer.alpha * x + g,
    "deepnet_pre_ln_adam": lambda layer, i, x, g: x + g,
    "post_ln": lambda layer, i, x, g: x + g,
    "pre_ln": lambda layer, i, x, g: x + g,
    "ds_init": lambda layer, i, x, g: x + g,
    "lipschitz": lambda layer, i, x, g: x + g,
    "admin": lambda layer, i, x, g: layer.omega[i] * x + g,
    "rezero": lambda layer, i, x, g: x + layer.resweight * g,
    "r_fixup": lambda layer, i, x, g: x + layer.multiplier[i] * g,
    "t_fixup": lambda layer, i, x, g: x + g,
    "normformer": lambda layer, i, x, g: x + g,
    # the methods after DeepNet (2022 on): their LayerNorms are in the norms and branches below
    "subln": lambda layer, i, x, g: x + g,
    "peri_ln": lambda layer, i, x, g: x + _layer_norm(layer.out_ln[i], g),
    "ln_scaling": lambda layer, i, x, g: x + g,
    "dyt": lambda layer, i, x, g: x + g,
    "mix_ln": lambda layer, i, x, g: x + g,
    "b2t": lambda layer, i, x, g: x + g,  # + the layer's input at the last sub-layer, below
}
# The rules whose layer is written by hand in a test of its own: DLCL's layers are Pre-LN layers
# fed by the stack's aggregation, ResiDual's dual stream spans the stack (its whole stack by hand
# is below), DeepScaleLM's skip path is scaled too.
BY_HAND_ELSEWHERE = {
    "dlcl": "tests/unit/test_methods.py::"
            "test_dlcl_layer_input_is_the_learned_combination_of_all_earlier_outputs",
    "resi_dual": "tests/unit/test_core_reference.py::"
                 "test_resi_dual_stack_equals_its_two_streams_written_by_hand",
    "deepscalelm": "tests/unit/test_methods.py::"
                   "test_deepscalelm_layer_is_lambda_x_plus_beta_branch_by_hand",
}


def test_every_layer_rule_is_checked_against_a_hand_written_layer():
    """A method with a layer rule of its own needs its layer written by hand: a row in
    RESIDUAL_FORMS, or a test of its own named in BY_HAND_ELSEWHERE."""
    missing = [name for name, m in methods.METHODS.items()
               if m.layers and name not in RESIDUAL_FORMS and name not in BY_HAND_ELSEWHERE]
    assert missing == [], f"write these methods' layers by hand: {missing}"
    for test in BY_HAND_ELSEWHERE.values():
        path, name = test.split("::")
        assert f"def {name}(" in open(os.path.join(REPO, path), encoding="utf-8").read(), test


def _layer_norm(module, h):
    """A LayerNorm from its parameters (DyT's tanh in its place), without the rule's hooks."""
    if hasattr(module, "alpha"):  # DyT: weight * tanh(alpha h) + bias
        return module.weight * torch.tanh(module.alpha * h) + module.bias
    if isinstance(module, torch.nn.Identity):
        return h
    mean, var = h.mean(-1, keepdim=True), h.var(-1, unbiased=False, keepdim=True)
    return (h - mean) / torch.sqrt(var + module.eps) * module.weight + module.bias


def _input_norm(layer, name, module, h):
    """A Pre-LN sub-layer's input norm; LayerNorm Scaling divides it by sqrt(l)."""
    scale = layer.index ** -0.5 if name == "ln_scaling" else 1.0
    return _layer_norm(module, h) * scale


def _attention_by_hand(attn, query, kv, mask, inner_ln):
    """fairseq's multi-head attention from its projections (Sub-LN: a LayerNorm on the heads
    before out_proj)."""
    t, b, d = query.shape
    heads = attn.num_heads
    head_dim = d // heads

    def split(y):
        return y.reshape(y.size(0), b * heads, head_dim).transpose(0, 1)

    q = split(attn.q_proj.forward(query) * head_dim ** -0.5)
    k, v = split(attn.k_proj.forward(kv)), split(attn.v_proj.forward(kv))
    scores = torch.bmm(q, k.transpose(1, 2))
    if mask is not None:
        scores = scores + mask
    heads_out = torch.bmm(scores.softmax(-1), v).transpose(0, 1).reshape(t, b, d)
    return attn.out_proj.forward(_layer_norm(inner_ln, heads_out))


def _attention_branch(layer, g):
    """NormFormer scales the heads of the self-attention output and normalises it."""
    if getattr(layer, "c_attn", None) is None:  # fairseq's decoder layers hold None
        return g
    t, b, d = g.shape
    heads = layer.c_attn.numel()
    return layer.attn_ln((g.view(t, b, heads, d // heads) * layer.c_attn[:, None]).view(t, b, d))


def _ffn_branch(layer, h):
    inner = layer.activation_fn(layer.fc1(h))
    if getattr(layer, "ffn_layernorm", None) is not None:  # NormFormer: LN inside the FFN
        inner = layer.ffn_layernorm(inner)
    return layer.fc2.forward(inner)  # .forward: the sub-module alone, without the rule's hooks


def hand_written(layer, method, x, encoder_out=None):
    """One layer's output from its sub-modules, in the order self-attention, cross-attention,
    FFN, with the method's sum and its LayerNorm placement (eval mode: no dropout). Sub-modules
    are called through ``.forward``, so that the hooks a rule adds (NormFormer's encoder) are
    not counted twice: the reference applies what they do itself."""
    form = RESIDUAL_FORMS[method.name]
    pre = layer.normalize_before
    last = 2 if encoder_out is not None else 1

    def sublayer(i, h, norm, branch):
        g = branch(_input_norm(layer, method.name, norm, h) if pre else h)
        out = form(layer, i, h, g)
        if method.name == "b2t" and i == last:  # B2T: the layer's input skips to its last LN
            out = out + x
        return out if pre else _layer_norm(norm, out)

    def self_attention(q):
        inner_ln = getattr(layer.self_attn, "inner_attn_ln", None)
        if inner_ln is not None:  # Sub-LN: the attention itself by hand
            return _attention_by_hand(layer.self_attn, q, q, causal, inner_ln)
        return _attention_branch(layer, layer.self_attn.forward(
            query=q, key=q, value=q, attn_mask=causal, need_weights=False)[0])

    t = x.size(0)
    causal = torch.triu(torch.full((t, t), float("-inf")), 1) if encoder_out is not None else None
    h = sublayer(0, x, layer.self_attn_layer_norm, self_attention)
    if encoder_out is not None:
        h = sublayer(1, h, layer.encoder_attn_layer_norm, lambda q: layer.encoder_attn.forward(
            query=q, key=encoder_out, value=encoder_out, static_kv=True, need_weights=False)[0])
    return sublayer(last, h, layer.final_layer_norm, lambda q: _ffn_branch(layer, q))


@pytest.mark.parametrize("side", ["encoder", "decoder"])
@pytest.mark.parametrize("name", sorted(RESIDUAL_FORMS))
def test_layer_equals_its_rule_written_by_hand(toy_data, name, side):
    """Alpha on the skip path (not the branch), Admin's omega, ReZero's and Fixup's scalars, each
    LayerNorm where the method puts it: a layer differing in any of them fails here."""
    method = methods.get(name)
    model, _, _ = build(toy_data, *method.train_args(3, 2)[1:], *NARROW)
    layer = getattr(model, side).layers[1].eval()
    with torch.no_grad():
        for n, p in layer.named_parameters():  # learnable scalars away from their start values
            if n in ("resweight", "multiplier", "omega_delta", "c_attn") or n.endswith(".alpha"):
                p.add_(torch.rand_like(p) + 0.5)
            if n.endswith(("fc2.weight", "out_proj.weight")) and not p.any():
                p.normal_(0, 0.1)  # R-Fixup's zero branch ends would hide the branch
        x = torch.randn(5, 3, layer.embed_dim)
        if side == "encoder":
            actual, expected = layer(x, None), hand_written(layer, method, x)
        else:
            enc = torch.randn(7, 3, layer.embed_dim)
            mask = torch.triu(torch.full((5, 5), float("-inf")), 1)
            actual = layer(x, enc, None, self_attn_mask=mask)[0]
            expected = hand_written(layer, method, x, encoder_out=enc)
    if name.startswith("deepnet") and name != "deepnet_pre_ln_adam":
        assert layer.alpha > 1.05  # the placement of alpha is visible
    assert torch.allclose(actual, expected, atol=1e-5), (actual - expected).abs().max()


# --- the methods after DeepNet: their placements and inits -----------------------------------


def test_subln_init_is_fairseqs_times_magneto_gamma(toy_data):
    """Sub-LN (Magneto): the self-attention's v/out and the FFN's fc1/fc2 (weights and biases)
    are Pre-LN's draws times gamma_e = sqrt(ln(3M) ln(2N) / 3) in the encoder and
    gamma_d = sqrt(ln 3M) in the decoder; q/k and the cross-attention keep fairseq's init
    (the formulas and the exclusion as in microsoft/torchscale's architecture/encoder.py and
    decoder.py, read 2026-11-24)."""
    n, m = 4, 3
    subln, _, _ = build(toy_data, "subln_transformer_tiny", "--encoder-layers", n,
                        "--decoder-layers", m, seed=5)
    pre, _, _ = build(toy_data, "pre_ln_transformer_tiny", "--encoder-layers", n,
                      "--decoder-layers", m, seed=5)  # the same draws: LayerNorms draw nothing
    gammas = {"encoder": math.sqrt(math.log(3 * m) * math.log(2 * n) / 3),
              "decoder": math.sqrt(math.log(3 * m))}
    scaled = ("self_attn.v_proj", "self_attn.out_proj", "fc1", "fc2")
    for side, gamma in gammas.items():
        for ours, ref in zip(getattr(subln, side).layers, getattr(pre, side).layers):
            assert ours.normalize_before and ours.gain == pytest.approx(gamma, rel=1e-12)
            ref_modules = dict(ref.named_modules())
            for role in ROLES:
                if role not in ref_modules:
                    continue
                mine, theirs = dict(ours.named_modules())[role], ref_modules[role]
                factor = gamma if role in scaled else 1.0
                assert torch.allclose(mine.weight, theirs.weight * factor), (side, role)
                assert torch.allclose(mine.bias, theirs.bias * factor), (side, role)
    assert gammas["encoder"] != pytest.approx(1.0) and gammas["decoder"] > 1


def test_dyt_replaces_every_layer_norm_final_ones_too(toy_data):
    from deepnet_fairseq.nn.method_layers import DynamicTanh

    model, _, _ = build(toy_data, "dyt_transformer_tiny", "--dyt-alpha-init", 0.8)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    norms = [m for m in model.modules() if isinstance(m, DynamicTanh)]
    assert model.encoder.layer_norm in norms and model.decoder.layer_norm in norms
    assert len(norms) == 2 * 2 + 2 * 3 + 2  # 2 per encoder layer, 3 per decoder layer, 2 final
    for norm in norms:
        assert norm.alpha.item() == pytest.approx(0.8) and norm.alpha.numel() == 1
        assert torch.all(norm.weight == 1) and torch.all(norm.bias == 0)
    default, _, _ = build(toy_data, "dyt_transformer_tiny")
    assert default.encoder.layer_norm.alpha.item() == 0.5  # the paper's alpha0


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_mix_ln_is_post_ln_in_the_lowest_quarter_of_each_stack(toy_data, side):
    """8 layers: floor(0.25 * 8) = 2 Post-LN layers, then Pre-LN, and Pre-LN's final LN; each
    kind of layer equals its rule by hand."""
    method = methods.get("mix_ln")
    model, _, _ = build(toy_data, *method.train_args(8, 8)[1:], *NARROW)
    stack = getattr(model, side)
    assert [layer.normalize_before for layer in stack.layers] == [False] * 2 + [True] * 6
    assert stack.layer_norm is not None
    x = torch.randn(5, 3, stack.layers[0].embed_dim)
    enc = torch.randn(7, 3, x.size(-1))
    mask = torch.triu(torch.full((5, 5), float("-inf")), 1)
    for layer in (stack.layers[1].eval(), stack.layers[2].eval()):
        with torch.no_grad():
            if side == "encoder":
                actual, expected = layer(x, None), hand_written(layer, method, x)
            else:
                actual = layer(x, enc, None, self_attn_mask=mask)[0]
                expected = hand_written(layer, method, x, encoder_out=enc)
        assert torch.allclose(actual, expected, atol=1e-5)
    half, _, _ = build(toy_data, *method.train_args(6, 6)[1:], "--mix-ln-ratio", 0.5, *NARROW)
    assert [layer.normalize_before for layer in half.encoder.layers] == [False] * 3 + [True] * 3


def test_b2t_init_is_fairseqs_times_the_inverse_square_root_of_the_stack_depth(toy_data):
    """B2T's rescaled init (takase/b2t_connection, ``rescaling_init``, read 2026-11-24): every
    weight of a layer, attention (cross-attention too) and FFN, is Post-LN's draw times
    L^(-1/2), L = N in the encoder and M in the decoder; biases and LayerNorms untouched."""
    n, m = 4, 9
    b2t, _, _ = build(toy_data, "b2t_transformer_tiny", "--encoder-layers", n,
                      "--decoder-layers", m, seed=5)
    post, _, _ = build(toy_data, "post_ln_transformer_tiny", "--encoder-layers", n,
                       "--decoder-layers", m, seed=5)  # the same draws
    for side, depth in (("encoder", n), ("decoder", m)):
        checked = 0
        for ours, ref in zip(getattr(b2t, side).layers, getattr(post, side).layers):
            theirs = dict(ref.named_parameters())
            for name, p in ours.named_parameters():
                is_matrix = name.endswith("weight") and "layer_norm" not in name
                factor = depth ** -0.5 if is_matrix else 1.0
                assert torch.allclose(p, theirs[name] * factor), (side, name)
                checked += is_matrix
        assert checked == depth * (10 if side == "decoder" else 6)  # q, k, v, out (x2), fc1, fc2


def resi_dual_stack_by_hand(stack, x, encoder_out=None):
    """ResiDual (Xie et al. 2023, Eq. 2-3): per sub-layer g = G(x_a), x_a <- LN(x_a + g),
    x_d <- x_d + g, both streams starting at the stack input; output x_a + LN(x_d). Eval mode:
    no dropout. Written from the paper and the authors' resi_dual_layers.py, from the layers'
    sub-modules, not from the rule."""
    t = x.size(0)
    causal = torch.triu(torch.full((t, t), float("-inf")), 1) if encoder_out is not None else None
    stream, dual = x, x
    for layer in stack.layers:
        branches = [(layer.self_attn_layer_norm, lambda q: layer.self_attn.forward(
            query=q, key=q, value=q, attn_mask=causal, need_weights=False)[0])]
        if encoder_out is not None:
            branches.append((layer.encoder_attn_layer_norm, lambda q: layer.encoder_attn.forward(
                query=q, key=encoder_out, value=encoder_out, static_kv=True,
                need_weights=False)[0]))
        branches.append((layer.final_layer_norm, lambda q: _ffn_branch(layer, q)))
        for norm, branch in branches:
            g = branch(stream)
            dual = dual + g
            stream = _layer_norm(norm, stream + g)
    return stream + _layer_norm(stack.dual_stream.norm, dual)


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_resi_dual_stack_equals_its_two_streams_written_by_hand(toy_data, side):
    """The whole stack (the dual stream spans it) through fairseq's own stack forward: the
    Post-LN stream, the dual sum of raw branch outputs over every sub-layer of every layer,
    and x + LN(d) on top; the dual stream's LayerNorm moved off its start so it is visible."""
    model, task, _ = build(toy_data, *methods.get("resi_dual").train_args(3, 4)[1:], *NARROW)
    model.eval()
    stack = getattr(model, side)
    assert not any(layer.normalize_before for layer in stack.layers)
    assert stack.layer_norm is None  # Post-LN layers: fairseq adds no final LN of its own
    with torch.no_grad():
        stack.dual_stream.norm.weight.add_(torch.rand_like(stack.dual_stream.norm.weight))
        stack.dual_stream.norm.bias.normal_()
    inputs = []  # the stack input, as fairseq hands it to layer 1
    stack.layers[0].register_forward_pre_hook(lambda module, args: inputs.append(args[0]))
    src = torch.tensor([[5, 6, 7, 8, 9, 2]])  # one sentence: no padding in the attention
    prev = torch.tensor([[2, 10, 11, 12, 13]])
    with torch.no_grad():
        encoder_out = model.encoder(src, src_lengths=torch.tensor([6]))
        if side == "encoder":
            actual = encoder_out["encoder_out"][0]
            expected = resi_dual_stack_by_hand(stack, inputs[0])
        else:
            features = model.decoder(prev, encoder_out=encoder_out, features_only=True)[0]
            actual = features.transpose(0, 1)
            expected = resi_dual_stack_by_hand(stack, inputs[-1],
                                               encoder_out=encoder_out["encoder_out"][0])
        # without the dual stream the output differs: the reference can fail
        assert not torch.allclose(expected, _plain_post_ln(stack, inputs[-1], side,
                                                           encoder_out), atol=1e-3)
    assert torch.allclose(actual, expected, atol=1e-5), (actual - expected).abs().max()
    assert stack.dual_stream.value is None  # no activations kept after the forward


def _plain_post_ln(stack, x, side, encoder_out):
    """The same layers as plain Post-LN (the stream alone), to show the reference is sensitive."""
    memory = encoder_out["encoder_out"][0] if side == "decoder" else None
    h = x
    for layer in stack.layers:
        h = hand_written(layer, methods.get("post_ln"), h, encoder_out=memory)
    return h


@pytest.mark.parametrize("name", ["subln", "peri_ln", "ln_scaling", "dyt", "mix_ln", "b2t",
                                  "resi_dual"])
def test_newer_methods_decode_incrementally_as_in_one_pass(toy_data, name):
    """Their hooks (Sub-LN's out_proj, Peri-LN's cross-attention), B2T's saved layer input and
    ResiDual's dual stream give the same step-by-step decoder output as the full forward."""
    model, task, _ = build(toy_data, *methods.get(name).train_args(4, 4)[1:], *NARROW)
    assert_decodes_incrementally_as_in_one_pass(model, task)


# --- DeepNorm's init: the distribution, not only the scale ------------------------------------


def ks_statistic_against_normal(sample: torch.Tensor, std: float) -> float:
    """Kolmogorov-Smirnov distance between the sample's empirical CDF and N(0, std^2)."""
    x, _ = sample.flatten().double().sort()
    n = x.numel()
    cdf = 0.5 * (1 + torch.erf(x / (std * math.sqrt(2))))
    upper = torch.arange(1, n + 1, dtype=torch.float64) / n
    return max((upper - cdf).abs().max().item(), (cdf - (upper - 1 / n)).abs().max().item())


def test_ks_statistic_separates_normal_from_uniform_of_the_same_std():
    """The reference itself: a uniform draw of the right std is 0.058 away from the normal."""
    torch.manual_seed(0)
    normal = torch.randn(256, 512) * 0.1
    uniform = (torch.rand(256, 512) * 2 - 1) * 0.1 * math.sqrt(3)
    assert ks_statistic_against_normal(normal, 0.1) < 0.01
    assert ks_statistic_against_normal(uniform, 0.1) > 0.05


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_deepnorm_weights_are_xavier_normal_with_their_gain(toy_data, side):
    """Each role's weights follow N(0, (gain sqrt(2/(fan_in+fan_out)))^2): Xavier-uniform with
    the same std, or the right shape with the wrong gain, fails (KS 1% critical value for the
    smallest matrix, 256 x 256, is 0.0064; we allow 0.01)."""
    model, _, _ = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 3,
                        "--decoder-layers", 2, *WIDE)
    c = constants.encoder_decoder(3, 2)
    beta = c.encoder_beta if side == "encoder" else c.decoder_beta
    layer = getattr(model, side).layers[0]
    modules = dict(layer.named_modules())
    for role in ROLES:
        if role not in modules:
            continue
        weight = modules[role].weight.detach()
        fan_out, fan_in = weight.shape
        std = (beta if role in BETA_GAIN_ROLES else 1.0) * math.sqrt(2.0 / (fan_in + fan_out))
        assert ks_statistic_against_normal(weight, std) < 0.01, role


def test_deepnorm_init_raises_when_a_role_is_missing():
    """A renamed or wrapped sub-module is an error, never left at fairseq's init."""
    from fairseq.models.transformer import TransformerConfig
    from fairseq.modules.transformer_layer import TransformerEncoderLayerBase

    cfg = TransformerConfig()
    cfg.encoder.embed_dim, cfg.encoder.ffn_embed_dim, cfg.encoder.attention_heads = 16, 32, 2
    layer = TransformerEncoderLayerBase(cfg)
    layer.ffn_in = layer.fc1
    del layer.fc1
    with pytest.raises(ValueError, match="no sub-module fc1"):
        deepnorm_init_(layer, beta=0.5)


# --- the trained constants travel with the model ----------------------------------------------


def _alphas(model):
    return [layer.alpha for stack in (model.encoder, model.decoder) for layer in stack.layers]


def _logits(model, batch):
    model.eval()
    with torch.no_grad():
        return model(**batch["net_input"])[0]


def test_loading_keeps_the_alpha_a_model_was_trained_with(toy_data):
    """Weights of a 3-2 paper-constant model loaded into one whose arguments give other
    constants (the Adam form) compute the trained function."""
    trained, task, _ = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 3)
    other, _, _ = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 3,
                        "--deepnorm-constants", "adam", seed=2)
    assert _alphas(other) != _alphas(trained)
    other.load_state_dict(trained.state_dict())
    assert _alphas(other) == _alphas(trained)
    batch = sample_batch(task)
    assert torch.equal(_logits(other, batch), _logits(trained, batch))


def test_fp16_rounded_record_keeps_the_exact_alpha_and_old_checkpoints_load(toy_data):
    model, _, _ = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 3)
    built = _alphas(model)
    state = model.state_dict()
    half = {k: (v.half() if k.endswith("deepnorm_constants") else v) for k, v in state.items()}
    model.load_state_dict(half)
    assert _alphas(model) == built  # within fp16 rounding: the exact value is kept
    old = {k: v for k, v in state.items() if not k.endswith("deepnorm_constants")}
    model.load_state_dict(old)  # recorded before this change: the built constants
    assert _alphas(model) == built


def test_fewer_encoder_layers_on_load_keep_the_trained_alpha(toy_data, tmp_path):
    """A checkpoint of a 3-2 model loaded with --encoder-layers-to-keep 0,2 (N becomes 2 in
    the arguments): the two kept layers use the alpha they were trained with, not N = 2's."""
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    model, task, cfg = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 3,
                             "--optimizer", "adam", "--lr", 1e-3)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    trainer.consolidate_optimizer()
    trainer.save_checkpoint(str(tmp_path / "c.pt"), {})
    (loaded,), _ = checkpoint_utils.load_model_ensemble(
        [str(tmp_path / "c.pt")], task=task,
        # fairseq's pruning drops the layers of a stack without a list: keep the decoder's
        arg_overrides={"encoder_layers_to_keep": "0,2", "decoder_layers_to_keep": "0,1"})
    assert len(loaded.encoder.layers) == 2
    trained = constants.encoder_decoder(3, 2).encoder_alpha
    assert constants.encoder_decoder(2, 2).encoder_alpha != pytest.approx(trained)
    assert [layer.alpha for layer in loaded.encoder.layers] == [trained, trained]


# --- light imports ----------------------------------------------------------------------------


# --- a new method in one declaration (docs/methods.md) ----------------------------------------

EXAMPLE = os.path.join(REPO, "docs", "examples", "half_branch")


def test_docs_show_the_example_method_as_it_is():
    with open(os.path.join(REPO, "docs", "methods.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    with open(os.path.join(EXAMPLE, "__init__.py"), encoding="utf-8") as f:
        assert f.read() in blocks


def test_a_method_declared_once_trains_with_fairseq_train(toy_data, tmp_path):
    """The example's one declaration gives a fairseq model, its archs and a method name; the
    layer computes LN(x + G(x)/2) and fairseq-train trains it through its own user dir."""
    spec = importlib.util.spec_from_file_location("half_branch", os.path.join(EXAMPLE, "__init__.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["half_branch"] = module  # as fairseq's --user-dir would name it
    spec.loader.exec_module(module)
    try:
        method = methods.get("half_branch")
        model, _, _ = build(toy_data, "half_branch_transformer_tiny", "--encoder-layers", 2)
    finally:  # the registry other tests enumerate stays as declared
        methods.METHODS.pop("half_branch", None)
    RESIDUAL_FORMS["half_branch"] = lambda layer, i, x, g: x + 0.5 * g
    layer = model.decoder.layers[0].eval()
    x, enc = torch.randn(4, 2, 64), torch.randn(6, 2, 64)
    mask = torch.triu(torch.full((4, 4), float("-inf")), 1)
    with torch.no_grad():
        assert torch.allclose(layer(x, enc, None, self_attn_mask=mask)[0],
                              hand_written(layer, method, x, encoder_out=enc), atol=1e-5)
    fairseq_train([toy_data, "--user-dir", EXAMPLE, "--arch", "half_branch_transformer_tiny",
                   "--cpu", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "512",
                   "--max-update", "2", "--save-dir", tmp_path / "ckpt", "--no-epoch-checkpoints",
                   "--disable-validation"])
    assert os.path.exists(tmp_path / "ckpt" / "checkpoint_last.pt")
    assert USER_DIR  # the plugin itself is loaded by the example, not passed separately
