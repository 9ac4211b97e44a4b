"""deepnet-export: the DeepNorm fold (decoder outputs of the exported model equal the
original's), a checkpoint stock fairseq loads without the plugin, the refusals, the
passthrough. On a trained tiny DeepNet with N != M, through the real CLIs and CTranslate2:
slow/test_export_end_to_end.py."""

import argparse
import os

import pytest
import torch

from deepnet_fairseq import export
from deepnet_fairseq.nn.method_layers import RECORD
from support import (
    EXPORT_TOLERANCE, NARROW, build, decoder_outputs, load_model, sample_batch, save_checkpoint,
)


ROUNDING = 1e-5


def deepnet(toy_data, *extra):
    return build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 3,
                 "--decoder-layers", 2, "--share-all-embeddings", *extra)


# ---- the fold, in process -----------------------------------------------------------------

# the overrides make alphas no formula of the depths gives: they must come from the model;
# --depth-transfer multiplies each branch by (L / L_base)^-a, folded with alpha
@pytest.mark.parametrize("extra", [(), ("--deepnorm-encoder-alpha", 3.5,
                                        "--deepnorm-decoder-alpha", 7.0),
                                   ("--depth-transfer", "depth_mup", "--depth-base", 1)],
                         ids=["paper", "overridden-alpha", "depth-transfer"])
def test_exported_decoder_outputs_equal_the_deepnets(toy_data, tmp_path, extra):
    model, task, cfg = deepnet(toy_data, *extra)
    alphas = {layer.alpha for layer in model.encoder.layers}, \
        {layer.alpha for layer in model.decoder.layers}
    assert len(alphas[0]) == len(alphas[1]) == 1 and alphas[0] != alphas[1]
    if "--depth-transfer" in extra:  # 3L and 2L grown from 1L: branch x 3^-1/2 and 2^-1/2
        assert [layer.branch_multiplier for layer in model.encoder.layers] == [3 ** -0.5] * 3
        assert [layer.branch_multiplier for layer in model.decoder.layers] == [2 ** -0.5] * 2
    original = save_checkpoint(model, cfg, tmp_path / "deepnet.pt")
    out = tmp_path / "exported.pt"
    export.main([original, "--output", str(out)])

    exported = load_model(out)
    from fairseq.models.transformer import TransformerModel
    assert type(exported) is TransformerModel  # fairseq's own, no DeepNorm layer left
    batch = sample_batch(task, size=8)
    difference = (decoder_outputs(model, batch) - decoder_outputs(exported, batch)).abs().max()
    assert difference < EXPORT_TOLERANCE
    # the difference is the epsilon's: with eps / alpha^2, only float32 rounding is left
    for folded, layer in zip([*exported.encoder.layers, *exported.decoder.layers],
                             [*model.encoder.layers, *model.decoder.layers]):
        for norm in (folded.self_attn_layer_norm, folded.final_layer_norm,
                     getattr(folded, "encoder_attn_layer_norm", None)):
            if norm is not None:
                norm.eps /= layer.alpha ** 2
    assert (decoder_outputs(model, batch) - decoder_outputs(exported, batch)).abs().max() \
        < ROUNDING
    # and the fold did something: the unfolded weights in a plain transformer differ
    unfolded = load_model(out)
    unfolded.load_state_dict({k: v for k, v in model.state_dict().items()
                              if not k.endswith("." + RECORD)})  # fairseq's has no record
    assert (decoder_outputs(model, batch) - decoder_outputs(unfolded, batch)).abs().max() > 0.1


def test_branch_outputs_are_each_sides_alpha(toy_data):
    model, _, _ = deepnet(toy_data)
    outputs = export.branch_outputs(model)
    encoder_alpha, decoder_alpha = model.encoder.layers[0].alpha, model.decoder.layers[0].alpha
    expected = {f"encoder.layers.{i}.{name}": encoder_alpha for i in range(3)
                for name in ("self_attn.out_proj", "fc2")}
    expected.update({f"decoder.layers.{i}.{name}": decoder_alpha for i in range(2)
                     for name in ("self_attn.out_proj", "encoder_attn.out_proj", "fc2")})
    assert outputs == expected


def test_fold_divides_only_the_branch_outputs_in_float64():
    weights = {"a.fc2.weight": torch.tensor([3.0, 1.0], dtype=torch.float16),
               "a.fc2.bias": torch.tensor([6.0]), "a.fc1.weight": torch.tensor([5.0])}
    folded = export.fold(weights, {"a.fc2": 3.0})
    assert folded["a.fc2.weight"].dtype == torch.float16
    assert folded["a.fc2.weight"].tolist() == [1.0, torch.tensor(1 / 3).half().item()]
    assert folded["a.fc2.bias"].tolist() == [2.0]
    assert folded["a.fc1.weight"] is weights["a.fc1.weight"]
    with pytest.raises(export.ExportError, match="a.fc3.weight is not in the checkpoint"):
        export.fold(weights, {"a.fc3": 2.0})


def test_output_is_model_only_plain_and_plugin_free(toy_data, tmp_path):
    model, _, cfg = deepnet(toy_data, "--deepnorm-constants", "adam")
    original = save_checkpoint(model, cfg, tmp_path / "deepnet.pt")
    out = tmp_path / "exported.pt"
    export.main([original, "--output", str(out)])
    # what torch's default (weights-only) unpickler refuses without this plugin's allowlist
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(out)) == []
    state = torch.load(out, weights_only=True)
    assert sorted(state) == ["args", "cfg", "extra_state", "model", "optimizer_history",
                             "task_state"]
    options, before = state["cfg"]["model"], vars(torch.load(original)["cfg"]["model"])
    assert state["extra_state"] == {"train_iterator": {"epoch": 1},
                                    "exported_from": "deepnet.pt", "trained_arch": before["arch"]}
    assert options["arch"] == options["_name"] == "transformer"
    assert options["user_dir"] is None and state["cfg"]["common"]["user_dir"] is None
    # DeepNet's options, and those every method has (methods.DEPTH_TRANSFER_OPTIONS)
    plugin = ("deepnorm", "depth_", "layers_lr_multiplier")
    assert not [key for key in options if key.startswith(plugin)]
    changed = {"arch", "_name", "user_dir"}
    assert {k: v for k, v in options.items() if k not in changed} == \
        {k: v for k, v in before.items() if k not in changed and not k.startswith(plugin)}
    # tied embeddings stay one tensor
    assert state["model"]["decoder.embed_tokens.weight"].data_ptr() == \
        state["model"]["encoder.embed_tokens.weight"].data_ptr()


# ---- passthrough and refusals -------------------------------------------------------------

@pytest.mark.parametrize("arch,expected", [("transformer", "transformer"),
                                           ("transformer_iwslt_de_en", "transformer_iwslt_de_en"),
                                           ("post_ln_transformer_tiny", "transformer")])
def test_plain_transformers_pass_through_unchanged(toy_data, tmp_path, arch, expected):
    model, _, cfg = build(toy_data, arch, *NARROW, "--encoder-layers", 1, "--decoder-layers", 2)
    original = save_checkpoint(model, cfg, tmp_path / "plain.pt")
    out = tmp_path / "exported.pt"
    export.main([original, "--output", str(out)])
    state = torch.load(out, weights_only=True)
    assert state["cfg"]["model"]["arch"] == expected
    before = torch.load(original)["model"]
    assert list(state["model"]) == list(before)
    assert all(torch.equal(state["model"][name], before[name]) for name in before)


def options(**values):
    return argparse.Namespace(**{"encoder_layers": 2, "decoder_layers": 2, **values})


def hand_made(path, model_options):
    torch.save({"args": None, "cfg": {"model": model_options, "task": {"_name": "translation"}},
                "model": {}, "optimizer_history": [{"optimizer_name": "FairseqAdam",
                                                     "lr_scheduler_state": {}, "num_updates": 1}],
                "extra_state": {"train_iterator": {"epoch": 1}}}, path)
    return str(path)


@pytest.mark.parametrize("model_options,message", [
    (options(arch="admin_transformer_tiny"),
     "--arch admin_transformer_tiny (model admin_transformer) is not a DeepNet"),
    (options(arch="rezero_transformer"), "(model rezero_transformer) is not a DeepNet"),
    (options(arch="deepnet_transformer", deepnorm_constants="pre_ln_adam"),
     "--deepnorm-constants pre_ln_adam, DeepNorm's Pre-LN form"),
    (options(arch="pre_ln_transformer_tiny"), "--arch pre_ln_transformer_tiny is Pre-LN"),
    (options(arch="my_transformer_xl"), "unknown architecture --arch 'my_transformer_xl'"),
], ids=["admin", "rezero", "pre-ln-form", "pre-ln", "unknown"])
def test_refusals_say_why_and_write_nothing(tmp_path, capsys, model_options, message):
    checkpoint = hand_made(tmp_path / "in.pt", model_options)
    out, ct2 = tmp_path / "out" / "exported.pt", tmp_path / "ct2"
    out.parent.mkdir()
    with pytest.raises(SystemExit) as exit_info:
        export.main([checkpoint, "--output", str(out), "--ctranslate2", str(ct2)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "(nothing written)" in err
    assert sorted(os.listdir(tmp_path)) == ["in.pt", "out"] and not os.listdir(out.parent)


def test_usage_errors(tmp_path, capsys):
    checkpoint = hand_made(tmp_path / "in.pt", options(arch="transformer"))
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "model.bin").write_bytes(b"x")  # an empty directory may be used
    for argv, message in (
            ([checkpoint], "nothing to write: give --output OUT.pt, --ctranslate2 DIR, or both"),
            ([checkpoint, "--output", "x.pt", "--quantization", "int8"],
             "--quantization applies to --ctranslate2 only"),
            ([str(tmp_path / "missing.pt"), "--output", "x.pt"], "no such checkpoint file"),
            ([checkpoint, "--ctranslate2", str(tmp_path / "taken")],
             "taken is a non-empty directory; pass --force to replace it, or choose another "
             "--ctranslate2"),
    ):
        with pytest.raises(SystemExit):
            export.main(argv)
        assert message in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["in.pt", "taken"]


def test_missing_data_directory_is_named(toy_data, tmp_path, capsys):
    model, _, cfg = deepnet(toy_data)
    original = save_checkpoint(model, cfg, tmp_path / "deepnet.pt")
    with pytest.raises(SystemExit):
        export.main([original, "--output", str(tmp_path / "x.pt"),
                     "--data", str(tmp_path / "nowhere")])
    assert "nowhere' with the model's dict.*.txt does not exist; pass --data DIR" in \
        capsys.readouterr().err


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("flag,target", [
    ("--output", "dictionary"), *((flag, target) for flag in ("--ctranslate2", "--transformers")
                                  for target in ("data", "parent"))])
def test_no_output_replaces_what_the_checkpoint_reads(toy_data, tmp_path, capsys, flag, target):
    """The data directory stored in the checkpoint (no --data given) and its dictionaries are
    inputs too: an output that is one, or a directory holding one, is refused even with
    --force, and nothing there changes."""
    import shutil

    data = tmp_path / "work" / "data"
    shutil.copytree(toy_data, data)
    model, _, cfg = deepnet(data)
    checkpoint = save_checkpoint(model, cfg, tmp_path / "deepnet.pt")
    output = {"data": data, "parent": data.parent, "dictionary": data / "dict.src.txt"}[target]
    before = _tree(tmp_path / "work")
    with pytest.raises(SystemExit) as stopped:
        export.main([checkpoint, flag, str(output), "--force"])
    assert stopped.value.code == 2
    assert f"{flag} {output} " in capsys.readouterr().err
    assert _tree(tmp_path / "work") == before


# ---- end to end: a trained tiny DeepNet through the real CLIs --------------------------------


def test_the_data_a_checkpoint_was_trained_on_is_read_from_any_form_of_its_config():
    """fairseq keeps a task's cfg as a dict, a DictConfig, or (the multilingual task's legacy
    arguments) an argparse.Namespace: the dictionary check read .get of a Namespace and the
    OPUS-100 evaluation failed (the slow chain test caught it)."""
    import argparse

    from omegaconf import OmegaConf

    from deepnet_fairseq.storage.checkpoint_io import trained_on

    for task in ({"data": "/d"}, OmegaConf.create({"data": "/d"}), argparse.Namespace(data="/d")):
        assert trained_on({"cfg": {"task": task}}) == "/d"
    assert trained_on({"args": argparse.Namespace(data="/d")}) == "/d"
    assert trained_on({"cfg": {"task": argparse.Namespace()}}) is None
