"""Old checkpoints keep loading: the names a checkpoint stores (its --arch, the registered model
behind it, every state_dict key) are what the plugin registered and built before DeepNet became
one layer rule among the methods. The expected names below were written from that
code (commit 7b65d0f), not computed from today's; tests/data/pre_refactor holds checkpoints it
saved, with the outputs it computed (tests/data/make_pre_refactor_checkpoints.py)."""

import gzip
import os
import re
import shutil

import pytest
import torch

from deepnet_fairseq import constants
from support import REPO, build


# every --arch the plugin registers -> its registered model
_PER_METHOD = ("admin", "b2t", "deepscalelm", "dlcl", "ds_init", "dyt", "lipschitz", "ln_scaling", "mix_ln",
               "normformer", "peri_ln", "r_fixup", "resi_dual", "rezero", "subln", "t_fixup")
ARCHS = {
    **{arch: f"{name}_transformer" for name in _PER_METHOD
       for arch in (f"{name}_transformer", f"{name}_transformer_tiny")},
    # fairseq's own transformer until the baselines took every method's options (--depth-
    # transfer); their checkpoints load into the plugin's model: same layers, same keys
    **{arch: f"{name}_transformer" for name in ("post_ln", "pre_ln")
       for arch in (f"{name}_transformer", f"{name}_transformer_tiny")},
    **{arch: "deepnet_transformer" for arch in (
        "deepnet_transformer", "deepnet_transformer_tiny", "deepnet_transformer_iwslt_de_en",
        "deepnet_transformer_6_6", "deepnet_transformer_12_12", "deepnet_transformer_18_18",
        "deepnet_transformer_50_50", "deepnet_transformer_100_100",
        "deepnet_transformer_200_200", "deepnet_transformer_250_250",
        "deepnet_transformer_500_500")},
    "deepnet_roberta_base": "deepnet_roberta", "deepnet_roberta_large": "deepnet_roberta",
    "deepnet_roberta_tiny": "deepnet_roberta",
    "deepnet_lm_gpt": "deepnet_lm", "deepnet_lm_tiny": "deepnet_lm",
}

# state_dict keys, the layer index written N: fairseq's Transformer layers ...
ATTENTION = [f"{p}_proj.{t}" for p in ("k", "out", "q", "v") for t in ("bias", "weight")]
NORM = ("bias", "weight")
ENCODER_LAYER = ([f"fc{i}.{t}" for i in (1, 2) for t in NORM]
                 + [f"final_layer_norm.{t}" for t in NORM]
                 + [f"self_attn.{a}" for a in ATTENTION]
                 + [f"self_attn_layer_norm.{t}" for t in NORM])
DECODER_LAYER = (ENCODER_LAYER + [f"encoder_attn.{a}" for a in ATTENTION]
                 + [f"encoder_attn_layer_norm.{t}" for t in NORM])
# ... and fairseq's Post-LN encoder-decoder (post_ln_transformer)
TRANSFORMER = (["encoder.embed_tokens.weight", "encoder.version", "decoder.embed_tokens.weight",
                "decoder.output_projection.weight", "decoder.version"]
               + [f"encoder.layers.N.{k}" for k in ENCODER_LAYER]
               + [f"decoder.layers.N.{k}" for k in DECODER_LAYER])
FINAL_NORMS = [f"{side}.layer_norm.{t}" for side in ("encoder", "decoder") for t in NORM]


def _each_layer(*names):
    return [f"{side}.layers.N.{name}" for side in ("encoder", "decoder") for name in names]


# arch (2L-2L tiny), data -> the keys added to TRANSFORMER's (or the model's own, for the
# single-stack models)
KEYS = {
    "post_ln_transformer_tiny": TRANSFORMER,
    "deepnet_transformer_tiny": TRANSFORMER + _each_layer("deepnorm_constants"),
    "ds_init_transformer_tiny": TRANSFORMER,
    "admin_transformer_tiny": TRANSFORMER + ["data_initialised"]
    + _each_layer("omega_delta", "omega_init"),
    "dlcl_transformer_tiny": TRANSFORMER + FINAL_NORMS + [
        f"{side}.layer_aggregation.{name}" for side in ("encoder", "decoder")
        for name in ["weights"] + [f"layer_norms.{k}.{t}" for k in range(3) for t in NORM]],
    "normformer_transformer_tiny": TRANSFORMER + FINAL_NORMS + _each_layer(
        "attn_ln.bias", "attn_ln.weight", "c_attn", "ffn_layernorm.bias",
        "ffn_layernorm.weight"),
    # added after the refactor: its names as first released, kept from then on
    "resi_dual_transformer_tiny": TRANSFORMER + [
        f"{side}.dual_stream.norm.{t}" for side in ("encoder", "decoder") for t in NORM],
    "dyt_transformer_tiny": TRANSFORMER + FINAL_NORMS
    + [f"{side}.layer_norm.alpha" for side in ("encoder", "decoder")]
    + _each_layer("self_attn_layer_norm.alpha", "final_layer_norm.alpha")
    + ["decoder.layers.N.encoder_attn_layer_norm.alpha"],
    "deepnet_roberta_tiny": [
        "encoder.lm_head.bias", "encoder.lm_head.weight", "encoder.lm_head.dense.bias",
        "encoder.lm_head.dense.weight", "encoder.lm_head.layer_norm.bias",
        "encoder.lm_head.layer_norm.weight", "encoder.sentence_encoder.embed_positions.weight",
        "encoder.sentence_encoder.embed_tokens.weight",
        "encoder.sentence_encoder.layernorm_embedding.bias",
        "encoder.sentence_encoder.layernorm_embedding.weight",
        "encoder.sentence_encoder.version"]
    + [f"encoder.sentence_encoder.layers.N.{k}" for k in ENCODER_LAYER + ["deepnorm_constants"]],
    "deepnet_lm_tiny": ["decoder.embed_tokens.weight", "decoder.output_projection.weight",
                        "decoder.version"]
    + [f"decoder.layers.N.{k}" for k in ENCODER_LAYER + ["deepnorm_constants"]],
}
TASK_OPTIONS = {"deepnet_roberta_tiny": ["--task", "masked_lm"],
                "deepnet_lm_tiny": ["--task", "language_modeling", "--tokens-per-sample", 32]}


def test_the_registered_archs_and_models_are_the_old_ones():
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY

    # The docs' example method (test_core_reference) registers its archs through the plugin's
    # helpers in this process and fairseq cannot unregister them: they are the example's, not
    # the plugin's, whichever order the tests run in.
    ours = {arch: ARCH_MODEL_NAME_REGISTRY[arch] for arch, hook in ARCH_CONFIG_REGISTRY.items()
            if hook.__module__.startswith("deepnet_fairseq")
            and ARCH_MODEL_NAME_REGISTRY[arch] != "half_branch_transformer"}
    assert ours == ARCHS


@pytest.mark.parametrize("arch", sorted(KEYS))
def test_state_dict_keys_are_the_old_ones(toy_data, mono_data, arch):
    data = mono_data if arch in TASK_OPTIONS else toy_data
    model, _, _ = build(data, arch, *TASK_OPTIONS.get(arch, []))
    keys = model.state_dict().keys()
    assert sorted({re.sub(r"layers\.\d+\.", "layers.N.", k) for k in keys}) == sorted(KEYS[arch])
    assert len([k for k in keys if k.endswith("layers.1.fc1.weight")]) >= 1  # 2 layers per stack


PRE_REFACTOR = os.path.join(REPO, "tests", "data", "pre_refactor")


def _net_input(kind):  # as make_pre_refactor_checkpoints.net_input
    tokens = torch.tensor([[5, 9, 14, 22, 7, 2], [31, 12, 8, 19, 25, 2]])
    if kind == "toy":
        prev = torch.cat([torch.full((2, 1), 2), tokens[:, :-1]], dim=1)
        return {"src_tokens": tokens, "src_lengths": torch.tensor([6, 6]),
                "prev_output_tokens": prev}
    return {"src_tokens": tokens}


@pytest.mark.parametrize("name,kind", [("deepnet_transformer", "toy"), ("admin", "toy"),
                                       ("deepnet_roberta", "mono"), ("deepnet_lm", "mono")])
def test_a_checkpoint_saved_before_the_refactor_loads_and_computes_the_same(
        toy_data, mono_data, tmp_path, name, kind):
    from fairseq import checkpoint_utils

    path = tmp_path / f"{name}.pt"
    with gzip.open(os.path.join(PRE_REFACTOR, f"{name}.pt.gz"), "rb") as packed, \
            open(path, "wb") as raw:
        shutil.copyfileobj(packed, raw)
    data = toy_data if kind == "toy" else mono_data
    (model,), cfg, _ = checkpoint_utils.load_model_ensemble_and_task(  # strict state_dict load
        [str(path)], arg_overrides={"data": str(data)})
    model.eval()
    with torch.no_grad():
        out = model(**_net_input(kind))[0]
    reference = torch.load(path, weights_only=False)["reference_output"].float()
    assert torch.allclose(out, reference, rtol=1e-2, atol=1e-2)
    if name == "deepnet_transformer":  # 3-2 layers, the paper's constants
        c = constants.encoder_decoder(3, 2)
        assert [layer.alpha for layer in model.encoder.layers] == [c.encoder_alpha] * 3
        assert [layer.alpha for layer in model.decoder.layers] == [c.decoder_alpha] * 2
    if name == "admin":
        assert bool(model.data_initialised)
