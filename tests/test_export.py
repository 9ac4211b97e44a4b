"""deepnet-export: the DeepNorm fold (decoder outputs of the exported model equal the
original's), a checkpoint stock fairseq loads without the plugin, the refusals, the
passthrough, and CTranslate2's translations; the slow tests run the real CLIs on a trained
tiny DeepNet with N != M."""

import argparse
import os
import re
import subprocess

import pytest
import torch

from conftest import PY, USER_DIR, build, run, sample_batch
from deepnet_fairseq import export
from deepnet_fairseq.nn.method_layers import RECORD

# Max |difference| allowed between the fp32 decoder outputs (logits, about +-8 here) of a
# DeepNet and its export. The fold's one approximation is LayerNorm's epsilon, which is
# eps / alpha^2 in the DeepNet (export.py): measured 7e-5 with the paper's alphas and 4e-4 with
# alpha 7 on these random-init models; with the exported LayerNorms given eps / alpha^2, what
# is left is float32 rounding, measured 2e-6 (docs/deploying.md).
TOLERANCE = 1e-3
ROUNDING = 1e-5


def save_checkpoint(model, cfg, path):
    """A checkpoint as fairseq-train writes it (model options as a Namespace, Adam state)."""
    from omegaconf import OmegaConf

    torch.save({
        "args": None, "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        "model": model.state_dict(), "criterion": {},
        "optimizer_history": [{"criterion_name": "CrossEntropyCriterion",
                               "optimizer_name": "FairseqAdam", "lr_scheduler_state": {},
                               "num_updates": 7}],
        "last_optimizer_state": {"state": {0: {"exp_avg": torch.ones(10)}}},
        "task_state": {}, "extra_state": {"train_iterator": {"epoch": 1}},
    }, path)
    return str(path)


def decoder_outputs(model, batch):
    model.eval()
    with torch.no_grad():
        return model(**batch["net_input"])[0]


def load(path):
    from fairseq import checkpoint_utils

    [model], _, _ = checkpoint_utils.load_model_ensemble_and_task([str(path)])
    return model


def deepnet(toy_data, *extra):
    return build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 3,
                 "--decoder-layers", 2, "--share-all-embeddings", *extra)


# ---- the fold, in process -----------------------------------------------------------------

# the overrides make alphas no formula of the depths gives: they must come from the model
@pytest.mark.parametrize("extra", [(), ("--deepnorm-encoder-alpha", 3.5,
                                        "--deepnorm-decoder-alpha", 7.0)],
                         ids=["paper", "overridden-alpha"])
def test_exported_decoder_outputs_equal_the_deepnets(toy_data, tmp_path, extra):
    model, task, cfg = deepnet(toy_data, *extra)
    alphas = {layer.alpha for layer in model.encoder.layers}, \
        {layer.alpha for layer in model.decoder.layers}
    assert len(alphas[0]) == len(alphas[1]) == 1 and alphas[0] != alphas[1]
    original = save_checkpoint(model, cfg, tmp_path / "deepnet.pt")
    out = tmp_path / "exported.pt"
    export.main([original, "--output", str(out)])

    exported = load(out)
    from fairseq.models.transformer import TransformerModel
    assert type(exported) is TransformerModel  # fairseq's own, no DeepNorm layer left
    batch = sample_batch(task, size=8)
    difference = (decoder_outputs(model, batch) - decoder_outputs(exported, batch)).abs().max()
    assert difference < TOLERANCE
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
    unfolded = load(out)
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
    assert state["extra_state"] == {"train_iterator": {"epoch": 1},
                                    "exported_from": "deepnet.pt"}
    options, before = state["cfg"]["model"], vars(torch.load(original)["cfg"]["model"])
    assert options["arch"] == options["_name"] == "transformer"
    assert options["user_dir"] is None and state["cfg"]["common"]["user_dir"] is None
    assert not [key for key in options if key.startswith("deepnorm")]
    changed = {"arch", "_name", "user_dir"}
    assert {k: v for k, v in options.items() if k not in changed} == \
        {k: v for k, v in before.items() if k not in changed and not k.startswith("deepnorm")}
    # tied embeddings stay one tensor
    assert state["model"]["decoder.embed_tokens.weight"].data_ptr() == \
        state["model"]["encoder.embed_tokens.weight"].data_ptr()


# ---- passthrough and refusals -------------------------------------------------------------

@pytest.mark.parametrize("arch,expected", [("transformer", "transformer"),
                                           ("transformer_iwslt_de_en", "transformer_iwslt_de_en"),
                                           ("post_ln_transformer_tiny", "transformer")])
def test_plain_transformers_pass_through_unchanged(toy_data, tmp_path, arch, expected):
    small = ("--encoder-embed-dim", 16, "--encoder-ffn-embed-dim", 32, "--encoder-layers", 1,
             "--decoder-embed-dim", 16, "--decoder-ffn-embed-dim", 32, "--decoder-layers", 2)
    model, _, cfg = build(toy_data, arch, *small)
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
    with pytest.raises(SystemExit) as exit_info:
        export.main([checkpoint, "--output", str(out), "--ctranslate2", str(ct2)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "(nothing written)" in err
    assert sorted(os.listdir(tmp_path)) == ["in.pt"]


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


# ---- end to end: a trained tiny DeepNet through the real CLIs --------------------------------

TRAIN = ["--arch", "deepnet_transformer_tiny", "--encoder-layers", "3", "--decoder-layers", "2",
         "--share-all-embeddings", "--cpu", "--optimizer", "adam", "--lr", "1e-3",
         "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10", "--max-tokens", "2000",
         "--criterion", "label_smoothed_cross_entropy", "--seed", "1", "--max-update", "20",
         "--no-epoch-checkpoints", "--disable-validation"]
# toy targets have at most 9 words; a 20-update model may not stop by itself
MAX_LEN = 12
DECODE = ["--gen-subset", "test", "--batch-size", "40", "--required-batch-size-multiple", "1",
          "--cpu", "--max-len-a", "0", "--max-len-b", str(MAX_LEN)]
# stock fairseq-generate, and proof that it ran without this plugin: nothing imported it
STOCK_GENERATE = ("import sys\nfrom fairseq_cli.generate import cli_main\n"
                  "sys.argv[0] = 'fairseq-generate'\ncli_main()\n"
                  "assert 'deepnet_fairseq' not in sys.modules, 'the plugin was imported'\n")


@pytest.fixture(scope="module")
def trained(toy_data, tmp_path_factory):
    """A tiny DeepNet (3 encoder, 2 decoder layers) trained by fairseq-train, exported by the
    deepnet-export CLI as a checkpoint and as a CTranslate2 model (fp32 and int8)."""
    root = tmp_path_factory.mktemp("export")
    run(["fairseq-train", str(toy_data), "--user-dir", USER_DIR, "--save-dir",
         str(root / "checkpoints"), *TRAIN])
    original = root / "checkpoints" / "checkpoint_last.pt"
    run([PY, "-m", "deepnet_fairseq.export", str(original), "--output", str(root / "exported.pt"),
         "--ctranslate2", str(root / "ct2")])
    run([PY, "-m", "deepnet_fairseq.export", str(original), "--ctranslate2",
         str(root / "ct2-int8"), "--quantization", "int8"])
    return {"original": original, "exported": root / "exported.pt", "data": toy_data,
            "ct2": root / "ct2", "ct2_int8": root / "ct2-int8"}


def nbest(stdout):
    """fairseq-generate's H- lines as (id, tokens), in test-set order; the scores are left out
    (they differ in the last float32 digits)."""
    found = re.findall(r"^H-(\d+)\t\S+\t(.*)$", stdout, flags=re.M)
    return sorted(found, key=lambda line: int(line[0]))  # stable: n-best order kept


def generate(trained, beam, plugin):
    options = ["--path", str(trained["original" if plugin else "exported"]), *DECODE,
               "--beam", str(beam), "--nbest", str(beam)]
    if plugin:
        return nbest(run(["fairseq-generate", str(trained["data"]), "--user-dir", USER_DIR,
                          *options]).stdout)
    return nbest(run([PY, "-c", STOCK_GENERATE, str(trained["data"]), *options]).stdout)


@pytest.mark.slow
@pytest.mark.parametrize("beam", [5, 1])
def test_stock_fairseq_generate_without_plugin_gives_the_same_hypotheses(trained, beam):
    ours = generate(trained, beam, plugin=True)
    assert len(ours) == 40 * beam
    assert generate(trained, beam, plugin=False) == ours  # every n-best list, in order


@pytest.mark.slow
def test_trained_exported_decoder_outputs_equal_the_deepnets(trained):
    from fairseq import checkpoint_utils

    [original], _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(trained["original"])])
    exported = load(trained["exported"])
    batch = sample_batch(task, size=40)
    difference = (decoder_outputs(original, batch) - decoder_outputs(exported, batch)).abs()
    assert difference.max() < TOLERANCE


def translate_ctranslate2(model_dir, data_dir):
    """CTranslate2's greedy translations of the toy test set, as fairseq's H- tokens."""
    import ctranslate2

    sources = (data_dir.parent / "test.src").read_text().splitlines()
    translator = ctranslate2.Translator(str(model_dir), device="cpu", inter_threads=1,
                                        intra_threads=1)
    # fairseq's limits: at least one token (--min-len 1), at most --max-len-b
    results = translator.translate_batch([line.split() for line in sources], beam_size=1,
                                         max_decoding_length=MAX_LEN, min_decoding_length=1)
    return [(str(i), " ".join(result.hypotheses[0])) for i, result in enumerate(results)]


@pytest.mark.slow
def test_ctranslate2_greedy_translations_equal_fairseqs(trained):
    directory = trained["ct2"]
    assert sorted(os.listdir(directory)) == ["config.json", "model.bin", "shared_vocabulary.json"]
    assert not [name for name in os.listdir(directory.parent) if name.startswith(".tmp")]
    expected = generate(trained, 1, plugin=True)
    assert translate_ctranslate2(directory, trained["data"]) == expected
    # int8 converts and translates every sentence (its words may differ: not compared)
    assert len(translate_ctranslate2(trained["ct2_int8"], trained["data"])) == 40


@pytest.mark.slow
def test_a_quickstart_model_exports_decodes_without_the_plugin_and_benchmarks(tmp_path):
    """docs/deploying.md's commands on a quickstart run (SIZE=smoke, the same chain as the
    full size): deepnet-export to a checkpoint and to CTranslate2 int8, stock fairseq-generate
    on the export without --user-dir giving the plugin's translations, and the decode-speed
    benchmark printing its table."""
    repo = os.path.dirname(USER_DIR)
    work = tmp_path / "quickstart"
    env = dict(os.environ, SIZE="smoke", DEEPNET_WORK=str(work))
    quickstart = subprocess.run(["bash", os.path.join(repo, "scripts", "quickstart.sh")],
                                env=env, capture_output=True, text=True)
    assert quickstart.returncode == 0, quickstart.stderr[-2000:]
    run_dir, data = work / "runs" / "deepnet-6L-6L", work / "data"
    checkpoint = str(run_dir / "checkpoints" / "checkpoint_last.pt")
    run(["deepnet-export", checkpoint, "--output", str(tmp_path / "plain.pt")])
    run(["deepnet-export", checkpoint, "--ctranslate2", str(tmp_path / "ct2"),
         "--quantization", "int8", "--sentencepiece-model", str(data / "spm.model")])
    assert (tmp_path / "ct2" / "model.bin").exists()
    # fairseq 0.12 drops a last batch whose size is not a multiple of 8 without the option
    decode = ["--gen-subset", "test", "--beam", "5", "--max-len-b", "20", "--batch-size", "100",
              "--required-batch-size-multiple", "1", "--cpu"]
    ours = nbest(run(["fairseq-generate", str(data / "bin"), "--user-dir", USER_DIR,
                      "--path", checkpoint, *decode]).stdout)
    stock = nbest(run([PY, "-c", STOCK_GENERATE, str(data / "bin"),
                       "--path", str(tmp_path / "plain.pt"), *decode]).stdout)
    assert len(ours) == 60 and stock == ours  # the smoke size's test sentences
    bench = run([PY, os.path.join(repo, "benchmarks", "decode_speed.py"), "--run-dir",
                 str(run_dir), "--threads", "1", "--out", str(tmp_path / "speed")])
    for decoder in ("fairseq", "CTranslate2"):
        assert decoder in bench.stdout
    assert re.search(r"sentences/s", bench.stdout)
