"""The compared methods and the optimizer-aware DeepNorm constants: each method's defining rule
on a tiny model built through fairseq, and every registered method finite at 50L-50L."""

import math

import pytest
import torch
import torch.nn as nn

from deepnet_fairseq import constants, methods
from deepnet_fairseq.nn.method_layers import linears
from support import (
    NARROW, WIDE, assert_decodes_incrementally_as_in_one_pass, build, sample_batch, width_args,
)


def xavier_std(weight, gain=1.0):
    fan_out, fan_in = weight.shape
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


def logits(model, batch):
    model.eval()
    with torch.no_grad():
        return model(**batch["net_input"])[0]


def layers(model):
    return list(model.encoder.layers) + list(model.decoder.layers)


def encoder_hiddens(model, batch):
    """The encoder's input to its first layer and its output (eval mode)."""
    model.eval()
    net = batch["net_input"]
    with torch.no_grad():
        out = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"],
                            return_all_hiddens=True)
    return out["encoder_states"][0], out["encoder_out"][0]


def has_layer_norm(layer):
    return any(isinstance(m, nn.LayerNorm) for m in layer.modules())  # fairseq's LayerNorm on CPU


# --- the registry --------------------------------------------------------------------------


def test_every_declaration_is_complete_and_the_optimizer_aware_forms_are_declared():
    """Each method has its summary, source and results-page name; one with a layer rule of its
    own names an existing rule and has a display name of its own ("Post-LN", not post_ln)."""
    from deepnet_fairseq.nn.method_layers import RULES

    forms = {f"deepnet_{form}" for form in constants.CONSTANT_FORMS if form != "paper"}
    assert forms <= set(methods.METHODS)
    for m in methods.METHODS.values():
        assert m.summary and m.paper and m.display, m.name
        if m.layers is not None:
            assert m.layers in RULES, m.name
            assert m.display != m.name, f"{m.name}: give its Method a display name"
    assert methods.get("rezero").train_args(4, 3) == [
        "--arch", "rezero_transformer", "--encoder-layers", "4", "--decoder-layers", "3"]


@pytest.mark.parametrize("name", sorted(methods.METHODS))
def test_the_declaration_says_whether_fairseq_may_checkpoint_the_method(toy_data, name):
    """The recipes plan activation checkpointing from the declaration alone (no torch): it must
    say what the layer rule does, which refuses --checkpoint-activations at parsing when its
    layers pass state between them."""
    from fairseq import options

    method = methods.get(name)
    parser = options.get_training_parser()
    argv = [str(toy_data), "--user-dir", methods.__file__.rsplit("/", 1)[0], "--cpu",
            *method.train_args(2, 2), "--checkpoint-activations"]
    if method.stack_state is None:
        options.parse_args_and_arch(parser, argv)
    else:
        with pytest.raises(ValueError, match=f"{method.stack_state} passes every layer"):
            options.parse_args_and_arch(parser, argv)


# Every compared method, and the two optimizer-aware forms with the most extreme constants (the
# others differ from them only in the numbers; DeepNorm itself: tests/test_model.py at 100L).
DEEP = sorted(set(methods.METHODS) - {"deepnet", "deepnet_sgd", "deepnet_lamb", "deepnet_ln",
                                      "deepnet_pre_ln_sgd", "deepnet_pre_ln_lamb"})


@pytest.mark.parametrize("name", DEEP)
def test_every_method_50l_50l_tiny_width_forward_backward_is_finite(toy_data, name):
    model, task, _ = build(toy_data, *methods.get(name).train_args(50, 50)[1:], *NARROW)
    assert len(model.encoder.layers) == 50 and len(model.decoder.layers) == 50
    model.train()
    batch = sample_batch(task)
    out = model(**batch["net_input"])[0]
    loss = torch.nn.functional.cross_entropy(out.flatten(0, 1), batch["target"].flatten())
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("name", ["admin", "dlcl", "normformer", "r_fixup", "rezero"])
def test_incremental_decoding_equals_full_decoding(toy_data, name):
    model, task, _ = build(toy_data, *methods.get(name).train_args(3, 3)[1:])
    with torch.no_grad():  # move the learnable scalars off their start values
        for n, p in model.named_parameters():
            if n.endswith(("resweight", "multiplier", "omega_delta", "c_attn", "weights")):
                p.add_(0.1 * torch.rand_like(p))
    assert_decodes_incrementally_as_in_one_pass(model, task)


# --- Post-LN and Pre-LN under the plugin's naming ------------------------------------------


def test_post_ln_and_pre_ln_archs_are_fairseqs_transformer(toy_data):
    post, task, _ = build(toy_data, "post_ln_transformer_tiny", "--encoder-layers", 3)
    pre, _, _ = build(toy_data, "pre_ln_transformer_tiny", "--encoder-layers", 3)
    ref_post, _, _ = build(toy_data, "transformer_tiny", "--encoder-layers", 3,
                           "--encoder-ffn-embed-dim", 128, seed=2)
    ref_pre, _, _ = build(toy_data, "transformer_tiny", "--encoder-layers", 3,
                          "--encoder-ffn-embed-dim", 128, "--encoder-normalize-before",
                          "--decoder-normalize-before", seed=2)
    assert not any(layer.normalize_before for layer in layers(post))
    assert all(layer.normalize_before for layer in layers(pre))
    assert pre.encoder.layer_norm is not None and post.encoder.layer_norm is None  # final LN
    batch = sample_batch(task)
    for ours, ref in ((post, ref_post), (pre, ref_pre)):
        ref.load_state_dict(ours.state_dict(), strict=True)
        assert torch.equal(logits(ours, batch), logits(ref, batch))
    assert not torch.allclose(logits(post, batch), logits(ref_pre, batch), atol=1e-3)


# --- DS-Init and Lipschitz-constrained init --------------------------------------------------


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_ds_init_layer_l_is_xavier_uniform_with_gain_alpha_over_sqrt_l(toy_data, alpha):
    model, _, _ = build(toy_data, "ds_init_transformer_tiny", "--encoder-layers", 4,
                        "--decoder-layers", 4, "--ds-init-alpha", alpha, *WIDE)
    for stack in (model.encoder, model.decoder):
        assert not stack.layers[0].normalize_before
        for index, layer in enumerate(stack.layers, start=1):
            gain = alpha / math.sqrt(index)
            for role, linear in linears(layer).items():
                w = linear.weight
                bound = gain * math.sqrt(6.0 / sum(w.shape))
                assert w.abs().max().item() <= bound + 1e-7, role
                assert w.std().item() == pytest.approx(xavier_std(w, gain), rel=0.03), role
                assert torch.count_nonzero(linear.bias) == 0, role


def test_lipschitz_init_draws_weights_within_one_over_sqrt_fan_in(toy_data):
    model, _, _ = build(toy_data, "lipschitz_transformer_tiny", *WIDE)
    for layer in layers(model):
        assert not layer.normalize_before and has_layer_norm(layer)
        for role, linear in linears(layer).items():
            w, fan_in = linear.weight, linear.weight.size(1)
            assert w.abs().max().item() <= fan_in ** -0.5, role
            assert w.std().item() == pytest.approx((3 * fan_in) ** -0.5, rel=0.03), role
            assert torch.count_nonzero(linear.bias) == 0, role


# --- Admin -----------------------------------------------------------------------------------


def _branch_variances(model, batch):
    """Var of the stack input and of each sub-layer's branch output, per stack, measured with
    forward hooks on a plain fairseq Post-LN model in eval mode (no dropout)."""
    found = {"encoder": [], "decoder": []}
    hooks = []
    for side in found:
        for layer in getattr(model, side).layers:
            names = ["self_attn", "encoder_attn", "fc2"] if side == "decoder" else [
                "self_attn", "fc2"]
            for name in names:
                def hook(module, inputs, output, side=side):
                    y = output[0] if isinstance(output, tuple) else output
                    found[side].append(y.float().var().item())
                hooks.append(getattr(layer, name).register_forward_hook(hook))
    model.eval()
    net = batch["net_input"]
    with torch.no_grad():
        enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"],
                            return_all_hiddens=True)
        _, extra = model.decoder(net["prev_output_tokens"], encoder_out=enc)
    for h in hooks:
        h.remove()
    # the decoder ran after the encoder; the stack inputs are the first hidden states
    found["encoder"].insert(0, enc["encoder_states"][0].var().item())
    found["decoder"].insert(0, extra["inner_states"][0].var().item())
    return found


def test_admin_omega_starts_at_one_then_is_profiled_from_the_first_training_batch(toy_data):
    admin, task, _ = build(toy_data, "admin_transformer_tiny", "--encoder-layers", 3,
                           "--decoder-layers", 2)
    plain, _, _ = build(toy_data, "post_ln_transformer_tiny", "--encoder-layers", 3,
                        "--decoder-layers", 2)
    batch = sample_batch(task)
    assert all(torch.all(layer.omega == 1) for layer in layers(admin))
    assert not admin.data_initialised
    # with omega = 1, Admin is Post-LN: same function as fairseq's with the same weights
    plain.load_state_dict({k: v for k, v in admin.state_dict().items()
                           if "omega_" not in k and "data_initialised" not in k}, strict=True)
    assert torch.equal(logits(admin, batch), logits(plain, batch))
    variances = _branch_variances(plain, batch)

    admin.train()
    admin(**batch["net_input"])  # the first training forward profiles
    assert admin.data_initialised
    for side in ("encoder", "decoder"):
        expected = torch.tensor(variances[side]).cumsum(0).sqrt()[:-1]  # before each sub-layer
        got = torch.stack([row for layer in getattr(admin, side).layers for row in layer.omega])
        assert got.shape[0] == len(expected) == 6
        assert torch.allclose(got, expected[:, None].expand_as(got), rtol=1e-4), side
        assert torch.all(got[1:, 0] > got[:-1, 0])  # grows with depth
    # profiling writes buffers only: optimizers that keep master copies of the parameters
    # made before the first batch (fairseq's --fp16) cannot undo it
    assert all(torch.count_nonzero(layer.omega_delta) == 0 for layer in layers(admin))
    before = [layer.omega.detach().clone() for layer in layers(admin)]
    admin(**batch["net_input"])  # profiles only once
    assert all(torch.equal(b, layer.omega) for b, layer in zip(before, layers(admin)))
    assert all(layer.omega_delta.requires_grad for layer in layers(admin))
    assert all(not layer.omega_init.requires_grad for layer in layers(admin))


def test_admin_profiling_can_be_run_before_training(toy_data):
    from deepnet_fairseq.models.method_transformers import initialise_from_batch

    admin, task, _ = build(toy_data, "admin_transformer_tiny")
    rezero, _, _ = build(toy_data, "rezero_transformer_tiny")
    batch = sample_batch(task)
    initialise_from_batch(rezero, batch["net_input"])  # no-op
    initialise_from_batch(admin, batch["net_input"])
    assert admin.data_initialised and admin.training  # its train mode is restored
    assert admin.encoder.layers[1].omega[0, 0] > 1


def test_admin_profile_is_saved_in_checkpoints(toy_data, tmp_path):
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    model, task, cfg = build(toy_data, "admin_transformer_tiny", "--optimizer", "adam",
                             "--lr", 1e-3)
    batch = sample_batch(task)
    model.train()
    model(**batch["net_input"])
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    trainer.consolidate_optimizer()
    trainer.save_checkpoint(str(tmp_path / "c.pt"), {})
    (loaded,), _ = checkpoint_utils.load_model_ensemble([str(tmp_path / "c.pt")], task=task)
    assert loaded.data_initialised
    assert torch.equal(loaded.encoder.layers[1].omega, model.encoder.layers[1].omega)
    assert torch.equal(logits(loaded, batch), logits(model, batch))


# --- the residual forms, against a hand-written sub-layer -------------------------------------

RESIDUAL_FORMS = {  # method -> sum of sub-layer i of a layer: f(layer, i, skip x, branch G(x))
    "rezero": lambda layer, i, x, g: x + layer.resweight * g,
    "r_fixup": lambda layer, i, x, g: x + layer.multiplier[i] * g,
    "t_fixup": lambda layer, i, x, g: x + g,
    "admin": lambda layer, i, x, g: layer.omega[i] * x + g,
    "ds_init": lambda layer, i, x, g: x + g,
    "lipschitz": lambda layer, i, x, g: x + g,
}


@pytest.mark.parametrize("name", sorted(RESIDUAL_FORMS))
def test_encoder_layer_computes_the_methods_residual_form(toy_data, name):
    """Each encoder layer equals, by hand, norm_i(sum_i(x, G_i(x))) per sub-layer, with the
    method's sum and its norms (LayerNorm, or none for the LayerNorm-free methods)."""
    model, _, _ = build(toy_data, *methods.get(name).train_args(3, 2)[1:], *NARROW)
    layer = model.encoder.layers[1].eval()
    with torch.no_grad():  # learnable scalars away from their start values
        for n, p in layer.named_parameters():
            if n in ("resweight", "multiplier", "omega_delta"):
                p.add_(torch.rand_like(p) + 0.5)
            if n in ("fc2.weight", "self_attn.out_proj.weight") and not p.any():
                p.normal_(0, 0.1)  # R-Fixup's zero branch ends would hide the branch
        x = torch.randn(7, 3, layer.embed_dim)
        form = RESIDUAL_FORMS[name]
        g = layer.self_attn(query=x, key=x, value=x, key_padding_mask=None, need_weights=False)[0]
        h = layer.self_attn_layer_norm(form(layer, 0, x, g))
        g = layer.fc2(layer.activation_fn(layer.fc1(h)))
        expected = layer.final_layer_norm(form(layer, 1, h, g))
        assert torch.allclose(layer(x, None), expected, atol=1e-5)
    assert has_layer_norm(layer) == (name in ("admin", "ds_init", "lipschitz"))


# --- ReZero, R-Fixup, T-Fixup (no LayerNorm) --------------------------------------------------


def test_rezero_has_no_layer_norm_and_starts_as_the_identity(toy_data):
    model, task, _ = build(toy_data, "rezero_transformer_tiny", "--encoder-layers", 4)
    for layer in layers(model):
        assert not has_layer_norm(layer)
        assert layer.resweight.item() == 0 and layer.resweight.requires_grad
    batch = sample_batch(task)
    first, last = encoder_hiddens(model, batch)
    assert torch.equal(first, last)  # x + 0 * G(x) through every layer
    with torch.no_grad():
        model.encoder.layers[0].resweight.fill_(0.5)
    first, last = encoder_hiddens(model, batch)
    assert not torch.allclose(first, last)
    model.train()
    model.zero_grad()
    model(**batch["net_input"])[0].sum().backward()
    assert model.decoder.layers[-1].resweight.grad.abs().item() > 0


def test_r_fixup_zeroes_branch_ends_and_scales_the_rest_by_l_to_minus_half(toy_data):
    n, m = 4, 3
    model, task, _ = build(toy_data, "r_fixup_transformer_tiny", "--encoder-layers", n,
                           "--decoder-layers", m, seed=3)
    plain, _, _ = build(toy_data, "post_ln_transformer_tiny", "--encoder-layers", n,
                        "--decoder-layers", m, seed=3)  # same draws before Fixup rescales
    for side, branches in (("encoder", 2 * n), ("decoder", 3 * m)):
        for ours, ref in zip(getattr(model, side).layers, getattr(plain, side).layers):
            assert not has_layer_norm(ours)
            assert torch.equal(ours.multiplier, torch.ones(ours.num_sublayers))
            ref_linears = linears(ref)
            for role, linear in linears(ours).items():
                if role.endswith(("out_proj", "fc2")):
                    assert torch.count_nonzero(linear.weight) == 0, role
                elif role.endswith(("v_proj", "fc1")):
                    assert torch.allclose(linear.weight,
                                          ref_linears[role].weight * branches ** -0.5), role
                else:
                    assert torch.equal(linear.weight, ref_linears[role].weight), role
    first, last = encoder_hiddens(model, sample_batch(task))
    assert torch.equal(first, last)  # every branch ends in a zero layer


def test_t_fixup_scales_value_path_and_embeddings(toy_data):
    n, m = 4, 3
    model, _, _ = build(toy_data, "t_fixup_transformer_tiny", "--encoder-layers", n,
                        "--decoder-layers", m, *WIDE)
    enc_scale, dec_scale = 0.67 * n ** -0.25, (9 * m) ** -0.25
    assert (enc_scale, dec_scale) == constants.t_fixup_scales(n, m)
    for side, scale in (("encoder", enc_scale), ("decoder", dec_scale)):
        for layer in getattr(model, side).layers:
            assert not has_layer_norm(layer)
            for role, linear in linears(layer).items():
                gain = 1.0 if role.endswith(("q_proj", "k_proj")) else scale
                assert linear.weight.std().item() == pytest.approx(
                    xavier_std(linear.weight, gain), rel=0.03), role
    for emb in (model.encoder.embed_tokens, model.decoder.embed_tokens):
        assert emb.weight[2:].std().item() == pytest.approx(256 ** -0.5 * dec_scale, rel=0.05)


# --- DLCL --------------------------------------------------------------------------------------


def test_dlcl_layer_input_is_the_learned_combination_of_all_earlier_outputs(toy_data):
    model, task, _ = build(toy_data, "dlcl_transformer_tiny", "--encoder-layers", 4)
    agg = model.encoder.layer_aggregation
    expected_start = torch.tril(torch.ones(5, 5)) / torch.arange(1, 6)[:, None]
    assert torch.equal(agg.weights.detach(), expected_start)  # the mean of what exists
    assert all(layer.normalize_before for layer in layers(model))
    with torch.no_grad():
        agg.weights.add_(torch.rand_like(agg.weights))
    inputs = []
    for layer in model.encoder.layers:  # Pre-LN: the layer's first op normalises its input
        layer.self_attn_layer_norm.register_forward_pre_hook(
            lambda module, args: inputs.append(args[0]))
    model.eval()
    net = sample_batch(task)["net_input"]
    with torch.no_grad():
        out = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"],
                            return_all_hiddens=True)
        ys = out["encoder_states"][:4]  # y_0 (embeddings), y_1 .. y_3
        normed = [agg.layer_norms[k](y) for k, y in enumerate(ys)]
        for l in range(1, 4):  # layer l+1's input
            combined = sum(agg.weights[l, k] * normed[k] for k in range(l + 1))
            assert torch.allclose(inputs[l], combined, atol=1e-5)
    assert agg.outputs == []  # no activations kept after the forward


# --- NormFormer ----------------------------------------------------------------------------


def test_normformer_adds_head_scales_and_two_norms_to_pre_ln_in_both_stacks(toy_data):
    model, task, _ = build(toy_data, "normformer_transformer_tiny", "--encoder-layers", 3)
    pre, _, _ = build(toy_data, "pre_ln_transformer_tiny", "--encoder-layers", 3)
    for layer in layers(model):
        assert layer.normalize_before
        assert torch.equal(layer.c_attn, torch.ones(2)) and layer.c_attn.requires_grad
        assert isinstance(layer.attn_ln, nn.LayerNorm) and isinstance(layer.ffn_layernorm, nn.LayerNorm)
    batch = sample_batch(task)
    normformer = logits(model, batch)
    # without the three additions NormFormer is Pre-LN: same function with the same weights
    for layer in layers(model):
        layer.attn_ln, layer.ffn_layernorm = nn.Identity(), nn.Identity()
    pre.load_state_dict(model.state_dict(), strict=False)
    assert torch.allclose(logits(model, batch), logits(pre, batch), atol=1e-6)
    assert not torch.allclose(normformer, logits(pre, batch), atol=1e-3)
    with torch.no_grad():  # the encoder's head scales are applied (through the hook)
        model.encoder.layers[0].c_attn[0] = 2.0
    assert not torch.allclose(logits(model, batch), logits(pre, batch), atol=1e-4)


def test_one_constants_function_for_the_three_model_kinds():
    assert constants.deepnorm(18, 6) == constants.encoder_decoder(18, 6)
    assert constants.deepnorm(18, 6, "adam") == constants.encoder_decoder_for(18, 6, "adam")
    assert constants.deepnorm(12, None) == constants.encoder_only(12)
    assert constants.deepnorm(None, 24) == constants.decoder_only(24)
    with pytest.raises(ValueError, match="encoder-decoder models only"):
        constants.deepnorm(None, 24, "sgd")


def test_the_value_path_roles_are_the_beta_gain_roles():
    from deepnet_fairseq.nn.initialization import BETA_GAIN_ROLES, ROLES, value_path

    assert BETA_GAIN_ROLES == tuple(r for r in ROLES if value_path(r))
    assert not any(value_path(r) for r in ROLES if r.endswith(("q_proj", "k_proj")))


def test_folded_models_for_export_come_from_the_declarations():
    from deepnet_fairseq.export import FOLDED_MODELS

    assert FOLDED_MODELS == ("deepnet_transformer", "post_ln_transformer")


# --- invalid combinations fail while fairseq parses the arguments ----------------------------


@pytest.mark.parametrize("arch,extra,message", [
    ("post_ln_transformer_tiny", ["--encoder-normalize-before"], "Post-LN method"),
    ("admin_transformer_tiny", ["--decoder-normalize-before"], "Post-LN method"),
    ("rezero_transformer_tiny", ["--encoder-normalize-before"], "without LayerNorm"),
    ("dlcl_transformer_tiny", ["--checkpoint-activations"], "DLCL's layer aggregation"),
    ("resi_dual_transformer_tiny", ["--checkpoint-activations"], "ResiDual's dual stream"),
    ("resi_dual_transformer_tiny", ["--decoder-layerdrop", "0.1"], "ResiDual's dual stream"),
    ("resi_dual_transformer_tiny", ["--encoder-normalize-before"], "Post-LN method"),
    ("ds_init_transformer_tiny", ["--ds-init-alpha", "1.5"], "ds-init-alpha"),
    ("deepnet_transformer_tiny", ["--deepnorm-constants", "pre_ln_adam",
                                  "--deepnorm-encoder-alpha", "2"], "no skip-path scale"),
    ("deepnet_roberta_tiny", ["--task", "masked_lm", "--encoder-normalize-before"],
     "Post-LN method"),
    # one DeepNorm option set for the three model kinds: what a model kind lacks is refused
    ("deepnet_roberta_tiny", ["--task", "masked_lm", "--deepnorm-decoder-alpha", "2"],
     "has no decoder"),
    ("deepnet_lm_tiny", ["--task", "language_modeling", "--deepnorm-encoder-beta", "0.5"],
     "has no encoder"),
    ("deepnet_lm_tiny", ["--task", "language_modeling", "--deepnorm-constants", "adam"],
     "encoder-decoder models only"),
    ("deepnet_lm_tiny", ["--task", "language_modeling", "--decoder-normalize-before"],
     "Post-LN method"),
])
def test_invalid_combinations_are_rejected_at_parsing(toy_data, arch, extra, message):
    from fairseq import options

    parser = options.get_training_parser()
    with pytest.raises(ValueError, match=message):
        options.parse_args_and_arch(parser, [str(toy_data), "--user-dir",
                                             methods.__file__.rsplit("/", 1)[0],
                                             "--arch", arch, "--cpu", *extra])


# --- optimizer-aware DeepNorm constants -------------------------------------------------------

# form, N, M -> (alpha_e, beta_e, alpha_d, beta_d); L = 2N (encoder), 3M (decoder)
OPTIMIZER_AWARE = [
    ("sgd", 6, 6, 12 ** 0.25, 12 ** -0.25, 18 ** 0.25, 18 ** -0.25),
    ("adam", 6, 6, 12 ** 0.5, 12 ** -0.5, 18 ** 0.5, 18 ** -0.5),
    ("lamb", 6, 6, 1.0, 12 ** -0.5, 1.0, 18 ** -0.5),
    ("pre_ln_sgd", 6, 6, 1.0, 12 ** -0.5, 1.0, 18 ** -0.5),
    ("pre_ln_adam", 6, 6, 1.0, 1 / 12, 1.0, 1 / 18),
    ("pre_ln_lamb", 6, 6, 1.0, 12 ** -0.5, 1.0, 18 ** -0.5),
    ("adam", 100, 100, 200 ** 0.5, 200 ** -0.5, 300 ** 0.5, 300 ** -0.5),
    ("sgd", 18, 6, 36 ** 0.25, 36 ** -0.25, 18 ** 0.25, 18 ** -0.25),
]


@pytest.mark.parametrize("form,n,m,alpha_e,beta_e,alpha_d,beta_d", OPTIMIZER_AWARE)
def test_optimizer_aware_constants(form, n, m, alpha_e, beta_e, alpha_d, beta_d):
    c = constants.encoder_decoder_for(n, m, form)
    got = (c.encoder_alpha, c.encoder_beta, c.decoder_alpha, c.decoder_beta)
    assert got == pytest.approx((alpha_e, beta_e, alpha_d, beta_d), rel=1e-12)


@pytest.mark.parametrize("form", ["sgd", "adam", "lamb"])
def test_optimizer_aware_update_condition_is_depth_independent(form):
    """The derivation's condition (constants.py, A1-A4): L * dF / alpha is the same at every
    depth, with dF = lambda^2 (SGD: eta lambda / alpha step, divided once more by alpha),
    lambda (Adam) or lambda^2 (LAMB)."""
    def update(sublayers):
        alpha, lam = constants.optimizer_aware_stack(sublayers, form)
        per_sublayer = {"sgd": lam ** 2 / alpha, "adam": lam, "lamb": lam ** 2}[form]
        return sublayers * per_sublayer / alpha
    assert [update(L) for L in (12, 36, 300, 3000)] == pytest.approx([1.0] * 4)


def test_paper_form_is_the_default_and_unchanged():
    assert constants.encoder_decoder_for(18, 6) == constants.encoder_decoder(18, 6)
    with pytest.raises(ValueError, match="unknown --deepnorm-constants"):
        constants.encoder_decoder_for(6, 6, "adamw")


def test_optimizer_aware_forms_reach_the_layers(toy_data):
    model, _, _ = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 4,
                        "--decoder-layers", 3, "--deepnorm-constants", "adam")
    c = constants.encoder_decoder_for(4, 3, "adam")
    assert (model.encoder.layers[0].alpha, model.encoder.layers[0].beta) == (
        c.encoder_alpha, c.encoder_beta)
    assert not model.decoder.layers[0].normalize_before
    pre, _, _ = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 4,
                      "--decoder-layers", 3, "--deepnorm-constants", "pre_ln_adam", *WIDE)
    c = constants.encoder_decoder_for(4, 3, "pre_ln_adam")
    for layer in layers(pre):
        assert layer.normalize_before and layer.alpha == 1.0
    fc1 = pre.decoder.layers[1].fc1.weight
    assert fc1.std().item() == pytest.approx(xavier_std(fc1, c.decoder_beta), rel=0.03)


# --- encoder-only and decoder-only DeepNorm ----------------------------------------------------


def test_encoder_only_deepnorm_constants_and_init_survive_roberta_init(mono_data):
    from deepnet_fairseq.nn.method_layers import DeepNormEncoderLayer

    model, _, _ = build(mono_data, "deepnet_roberta_tiny", "--task", "masked_lm",
                        "--encoder-layers", 6, *width_args(4, stacks=["encoder"]))
    c = constants.encoder_only(6)
    stack = model.encoder.sentence_encoder.layers
    assert len(stack) == 6
    for layer in stack:
        assert isinstance(layer, DeepNormEncoderLayer) and not layer.normalize_before
        assert (layer.alpha, layer.beta) == (c.encoder_alpha, c.encoder_beta)
        fc2 = layer.fc2.weight  # drawn after RoBERTa's BERT init (std 0.02) ran
        assert fc2.std().item() == pytest.approx(xavier_std(fc2, c.encoder_beta), rel=0.03)
    assert (round(c.encoder_alpha, 4), round(c.encoder_beta, 4)) == (1.8612, 0.3799)


def test_decoder_only_deepnorm_constants(mono_data):
    from deepnet_fairseq.nn.method_layers import DeepNormDecoderLayer

    model, _, _ = build(mono_data, "deepnet_lm_tiny", "--task", "language_modeling",
                        "--decoder-layers", 24, "--tokens-per-sample", 32)
    c = constants.decoder_only(24)
    assert len(model.decoder.layers) == 24
    for layer in model.decoder.layers:
        assert isinstance(layer, DeepNormDecoderLayer) and not layer.normalize_before
        assert layer.encoder_attn is None
        assert (layer.alpha, layer.beta) == (c.decoder_alpha, c.decoder_beta)
    assert model.decoder.layer_norm is None  # Post-LN: no final LayerNorm
    assert (round(c.decoder_alpha, 4), round(c.decoder_beta, 4)) == (2.6321, 0.2686)


# --- DeepScaleLM -------------------------------------------------------------------------------


def test_deepscalelm_layer_is_lambda_x_plus_beta_branch_by_hand(toy_data):
    """4L encoder: 8 sub-layers, beta^2 = 2/8, lambda^2 = 3/4; 3L decoder: 9, beta^2 = 2/9.
    Pre-LN: each sub-layer adds beta G(LN(x)) to lambda x, by hand."""
    model, _, _ = build(toy_data, "deepscalelm_transformer_tiny", "--encoder-layers", 4,
                        "--decoder-layers", 3, "--dropout", 0)
    layer = model.encoder.layers[1].eval()
    assert (layer.lam, layer.beta) == pytest.approx((0.75 ** 0.5, 0.5))
    assert (model.decoder.layers[0].lam, model.decoder.layers[0].beta) == \
        pytest.approx(((7 / 9) ** 0.5, (2 / 9) ** 0.5))
    with torch.no_grad():
        x = torch.randn(7, 3, layer.embed_dim)
        a = layer.self_attn_layer_norm(x)
        h = 0.75 ** 0.5 * x + 0.5 * layer.self_attn(query=a, key=a, value=a,
                                                     key_padding_mask=None,
                                                     need_weights=False)[0]
        f = layer.final_layer_norm(h)
        expected = 0.75 ** 0.5 * h + 0.5 * layer.fc2(torch.relu(layer.fc1(f)))
        torch.testing.assert_close(layer(x, None), expected, rtol=1e-5, atol=1e-5)


def test_deepscalelm_init_is_moment_preserving_by_hand(toy_data):
    """Width 64, FFN 128, dropout 0.1: fc1/fc2 variance sqrt(2 * 0.9 / (64 * 128)); q/k 1/64;
    the first layer's v/out sqrt(0.9 / r0) / 64 with r0 = 0.221 * 0.9 (the input's token
    correlation); biases 0."""
    model, _, _ = build(toy_data, "deepscalelm_transformer_tiny", "--encoder-layers", 4,
                        "--dropout", 0.1)
    first = model.encoder.layers[0]
    expected = {"fc1": (2 * 0.9 / (64 * 128)) ** 0.25, "fc2": (2 * 0.9 / (64 * 128)) ** 0.25,
                "self_attn.q_proj": 1 / 8, "self_attn.k_proj": 1 / 8,
                "self_attn.v_proj": ((0.9 / (0.221 * 0.9)) ** 0.5 / 64) ** 0.5,
                "self_attn.out_proj": ((0.9 / (0.221 * 0.9)) ** 0.5 / 64) ** 0.5}
    modules = dict(first.named_modules())
    for role, std in expected.items():
        weight = modules[role].weight
        assert weight.std().item() == pytest.approx(std, rel=0.05), role
        assert not modules[role].bias.any()
    # the correlation grows with depth, so deeper v/out start smaller
    assert model.encoder.layers[3].self_attn.v_proj.weight.std() < \
        first.self_attn.v_proj.weight.std()


def test_deepscalelm_refuses_a_stack_too_shallow_for_its_beta(toy_data):
    with pytest.raises(ValueError, match="more than 2 residual sub-layers"):
        build(toy_data, "deepscalelm_transformer_tiny", "--encoder-layers", 1)


def test_the_listing_cli_builds_as_many_decoder_layers_as_encoder_layers_by_default(capsys):
    methods.main(["admin", "18"])
    assert capsys.readouterr().out.split() == [
        "--arch", "admin_transformer", "--encoder-layers", "18", "--decoder-layers", "18"]
    methods.main(["admin", "18", "6"])
    assert capsys.readouterr().out.split()[-1] == "6"
