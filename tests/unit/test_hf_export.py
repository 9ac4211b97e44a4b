"""deepnet-export --transformers: a trained DeepNet (3 encoder, 2 decoder layers) loaded by
transformers' own classes gives the fairseq model's logits and fairseq-generate's beam-5
translations; the tied and untied embeddings; the tokenizer (sentencepiece, then fairseq's
dictionary) gives fairseq's ids; what FSMT does not compute is refused, nothing written."""

import json
import os
import random

import pytest
import torch
from hypothesis import given, settings, strategies as st

from deepnet_fairseq import export, spm
from deepnet_fairseq.recipes.spec.settings import LANG_CODE
from support import NARROW, build, fairseq_preprocess, sample_batch, save_checkpoint

transformers = pytest.importorskip("transformers", reason="the deploy extra (transformers) is "
                                                          "not installed")

# the DeepNet's outputs (logits about +-10) differ from their export by LayerNorm's epsilon
# (test_export.py; 3.5e-5 measured here); FSMT computes the exported fairseq transformer's up to
# float32 rounding (8e-6 measured: its attention is not fairseq's fused one)
LOGITS_TOLERANCE = 1e-4
ROUNDING = 2e-5


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: the models are tiny, and a second thread waiting for a busy core
    (the suite shares 2 cores) makes each step many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def hf_logits(model, batch):
    """FSMT's teacher-forced logits of a fairseq batch (left-padded source)."""
    net = batch["net_input"]
    with torch.no_grad():
        return model(input_ids=net["src_tokens"], attention_mask=net["src_tokens"].ne(1),
                     decoder_input_ids=net["prev_output_tokens"]).logits


def fairseq_logits(model, batch):
    model.eval()
    with torch.no_grad():
        return model(**batch["net_input"])[0]


def load_transformers(directory):
    """The model through transformers' Auto class, as a user loads it (no remote code)."""
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    assert config["model_type"] == "fsmt" and "auto_map" not in config
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(directory)).eval()
    assert type(model) is transformers.FSMTForConditionalGeneration
    return model


@pytest.fixture(scope="module")
def trained(trained_tiny, tmp_path_factory):
    """The session's trained tiny DeepNet (conftest: 200 updates of fairseq-train on the toy
    reversal, beta 1, alpha the paper's 1.11 and 1.57, what the export folds), exported with
    --transformers and --output by the CLI."""
    root = tmp_path_factory.mktemp("hf")
    checkpoint = trained_tiny
    export.main([str(checkpoint), "--transformers", str(root / "hf"),
                 "--output", str(root / "plain.pt")])
    from fairseq import checkpoint_utils

    [model], _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    [plain], _, _ = checkpoint_utils.load_model_ensemble_and_task([str(root / "plain.pt")])
    return {"model": model.eval(), "plain": plain.eval(), "task": task,
            "hf": load_transformers(root / "hf"), "dir": root / "hf"}


def test_logits_equal_the_deepnets(trained):
    batch = sample_batch(trained["task"], size=16)
    real = batch["net_input"]["prev_output_tokens"].ne(1)  # fairseq does not mask target pads
    ours = hf_logits(trained["hf"], batch)[real]
    assert (ours - fairseq_logits(trained["model"], batch)[real]).abs().max() < LOGITS_TOLERANCE
    assert (ours - fairseq_logits(trained["plain"], batch)[real]).abs().max() < ROUNDING
    with open(os.path.join(trained["dir"], "config.json")) as f:
        config = json.load(f)
    assert (config["encoder_layers"], config["decoder_layers"]) == (3, 2)
    assert config["tie_word_embeddings"] and config["decoder_start_token_id"] == 2


def test_beam_search_gives_fairseq_generates_translations(trained):
    """generate() with the exported generation_config.json (beam 5, lenpen 1, up to 200
    tokens) and fairseq-generate's SequenceGenerator with its defaults, on the toy test set:
    the same best hypothesis for every sentence, with the same score."""
    from fairseq.dataclass.configs import GenerationConfig

    task = trained["task"]
    task.load_dataset("test")
    dataset = task.dataset("test")
    batch = dataset.collater([dataset[i] for i in range(len(dataset))])
    generator = task.build_generator(
        [trained["model"]], GenerationConfig(beam=5, lenpen=1, max_len_a=0, max_len_b=200))
    with torch.no_grad():
        hypotheses = generator.generate([trained["model"]], batch)
    expected = {i: (h[0]["tokens"].tolist(), h[0]["score"].item())
                for i, h in zip(batch["id"].tolist(), hypotheses)}

    sources = [dataset[i]["source"].tolist() for i in range(len(dataset))]
    width = max(map(len, sources))
    ids = torch.tensor([s + [1] * (width - len(s)) for s in sources])  # right-padded
    with torch.no_grad():
        out = trained["hf"].generate(input_ids=ids, attention_mask=ids.ne(1),
                                     output_scores=True, return_dict_in_generate=True)
    for i, (sequence, score) in enumerate(zip(out.sequences.tolist(),
                                              out.sequences_scores.tolist())):
        tokens = sequence[1:]  # after the decoder start </s>
        tokens = tokens[:tokens.index(2) + 1]
        assert tokens == expected[i][0], f"sentence {i}"
        assert score == pytest.approx(expected[i][1], abs=LOGITS_TOLERANCE)
    # the model translates: its hypotheses differ by sentence, and most begin with the last
    # source word, as the reversal does (36 of 40 when measured; chance: 1 in 30)
    assert len({tuple(t) for t, _ in expected.values()}) >= 30
    assert sum(tokens[0] == dataset[i]["target"][0].item()
               for i, (tokens, _) in expected.items()) >= 20


# ---- embeddings: tied, partly tied, separate (random weights) --------------------------------

@pytest.mark.parametrize("sharing,stored", [(["--share-all-embeddings"], 1),
                                            (["--share-decoder-input-output-embed"], 3), ([], 3)],
                         ids=["all", "decoder-input-output", "none"])
def test_embeddings_tied_as_in_fairseq(toy_data, tmp_path, sharing, stored):
    from safetensors import safe_open

    model, task, cfg = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 2,
                             "--decoder-layers", 1, *sharing)
    checkpoint = save_checkpoint(model, cfg, tmp_path / "deepnet.pt")
    export.main([checkpoint, "--transformers", str(tmp_path / "hf")])
    with safe_open(str(tmp_path / "hf" / "model.safetensors"), "pt") as f:
        assert sum("embed_tokens" in k or "output_projection" in k for k in f.keys()) == stored
    hf = load_transformers(tmp_path / "hf")
    batch = sample_batch(task, size=8)
    real = batch["net_input"]["prev_output_tokens"].ne(1)
    difference = (hf_logits(hf, batch) - fairseq_logits(model, batch))[real].abs().max()
    assert difference < LOGITS_TOLERANCE
    pointers = {m.weight.data_ptr() for m in (hf.model.encoder.embed_tokens,
                                              hf.model.decoder.embed_tokens,
                                              hf.model.decoder.output_projection)}
    assert len(pointers) == stored


@pytest.mark.parametrize("options", [["--activation-fn", "gelu"], ["--no-scale-embedding"],
                                     ["--decoder-attention-heads", 4,
                                      "--decoder-ffn-embed-dim", 96]],
                         ids=["gelu", "no-scale-embedding", "decoder-heads-and-ffn"])
def test_other_options_fsmt_computes(toy_data, tmp_path, options):
    model, task, cfg = build(toy_data, "deepnet_transformer_tiny", "--encoder-layers", 2,
                             "--decoder-layers", 3, *options)
    checkpoint = save_checkpoint(model, cfg, tmp_path / "deepnet.pt")
    export.main([checkpoint, "--transformers", str(tmp_path / "hf")])
    batch = sample_batch(task, size=8)
    real = batch["net_input"]["prev_output_tokens"].ne(1)
    difference = (hf_logits(load_transformers(tmp_path / "hf"), batch)
                  - fairseq_logits(model, batch))[real].abs().max()
    assert difference < LOGITS_TOLERANCE


# ---- the tokenizer --------------------------------------------------------------------------

SYLLABLES = ["ka", "ro", "mi", "te", "sun", "bel", "da", "xo", "ri", "lu", "ä", "é"]


def sentences(rng, count):
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(150)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(2, 8))) + rng.choice(".?!")
            for _ in range(count)]


@pytest.mark.parametrize("joined", [True, False], ids=["joined", "separate"])
def test_tokenizer_gives_fairseqs_ids_and_decodes(tmp_path, joined):
    """A sentencepiece model (deepnet_fairseq.spm, as the recipes train it) and fairseq's
    dictionaries of text it split, built from part of the text only: pieces the dictionary lacks
    are <unk> in fairseq, and must be for the exported tokenizer too."""
    from fairseq.data import Dictionary
    from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE, SentencepieceConfig

    rng = random.Random(0)
    text = {"src": sentences(rng, 400), "tgt": sentences(rng, 400)}
    with open(tmp_path / "all.txt", "w", encoding="utf-8") as f:
        f.write("\n".join(text["src"] + text["tgt"]) + "\n")
    spm.train([str(tmp_path / "all.txt")], str(tmp_path / "spm"), vocab_size=120)
    model_file = str(tmp_path / "spm.model")
    bpe = SentencepieceBPE(SentencepieceConfig(sentencepiece_model=model_file))
    for split in ("train", "valid"):
        for lang in ("src", "tgt"):
            lines = text[lang][:15] if split == "train" else text[lang][15:20]
            with open(tmp_path / f"{split}.{lang}", "w", encoding="utf-8") as f:
                f.write("".join(bpe.encode(line) + "\n" for line in lines))
    fairseq_preprocess("--source-lang", "src", "--target-lang", "tgt",
                       "--trainpref", tmp_path / "train", "--validpref", tmp_path / "valid",
                       "--destdir", tmp_path / "bin", "--workers", 1,
                       *(["--joined-dictionary"] if joined else []))
    model, _, cfg = build(tmp_path / "bin", "deepnet_transformer_tiny", *NARROW,
                          "--encoder-layers", 1, "--decoder-layers", 1,
                          *(["--share-all-embeddings", "--bpe", "sentencepiece",
                             "--sentencepiece-model", model_file] if joined else []))
    checkpoint = save_checkpoint(model, cfg, tmp_path / "deepnet.pt")
    # joined: the sentencepiece model the checkpoint names; separate: given
    export.main([checkpoint, "--transformers", str(tmp_path / "hf"),
                 *([] if joined else ["--sentencepiece-model", model_file])])

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert type(tokenizer) is transformers.MarianTokenizer
    dictionaries = {lang: Dictionary.load(str(tmp_path / "bin" / f"dict.{lang}.txt"))
                    for lang in ("src", "tgt")}
    assert (dictionaries["src"].symbols == dictionaries["tgt"].symbols) == joined
    unknown = 0
    for lang, line in [(lang, line) for lang in ("src", "tgt") for line in text[lang][:60]] + [
            ("src", "ka ☃ ro"), ("tgt", "  luxo   ka ")]:
        expected = dictionaries[lang].encode_line(bpe.encode(line), add_if_not_exist=False,
                                                  append_eos=True).tolist()
        encoded = tokenizer(line) if lang == "src" else tokenizer(text_target=line)
        assert encoded["input_ids"] == expected, line
        unknown += expected.count(3)
        if lang == "tgt" and 3 not in expected:  # fairseq prints <unk> where this skips it
            assert tokenizer.decode(expected, skip_special_tokens=True) == \
                bpe.decode(dictionaries["tgt"].string(expected)) == " ".join(line.split())
    assert unknown > 10  # pieces outside the dictionaries were tested

    # docs/deploying.md's lines
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "hf"))
    batch = tokenizer(text["src"][:2], return_tensors="pt", padding=True)
    outputs = hf.generate(**batch, max_new_tokens=5)
    assert len(tokenizer.batch_decode(outputs, skip_special_tokens=True)) == 2


# ---- refusals -------------------------------------------------------------------------------

@pytest.mark.parametrize("arch,options,message", [
    ("transformer", ["--encoder-normalize-before", "--decoder-normalize-before"],
     "does not compute --encoder-normalize-before (Pre-LN); --decoder-normalize-before (Pre-LN)"),
    ("transformer", ["--encoder-learned-pos", "--layernorm-embedding"],
     "--layernorm-embedding; --encoder-learned-pos"),
    ("transformer", ["--activation-fn", "tanh"], "--activation-fn tanh (FSMT: relu, gelu)"),
    ("admin_transformer_tiny", [], "(model admin_transformer) is not a DeepNet"),
], ids=["pre-ln", "learned-positions", "activation", "admin"])
def test_refusals_say_why_and_write_nothing(toy_data, tmp_path, capsys, arch, options, message):
    model, _, cfg = build(toy_data, arch, *NARROW, "--encoder-layers", 1, "--decoder-layers", 1,
                          *options)
    checkpoint = save_checkpoint(model, cfg, tmp_path / "in.pt")
    with pytest.raises(SystemExit) as exit_info:
        export.main([checkpoint, "--output", str(tmp_path / "out.pt"),
                     "--transformers", str(tmp_path / "hf")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "(nothing written)" in err
    assert sorted(os.listdir(tmp_path)) == ["in.pt"]


def test_an_existing_directory_is_replaced_only_with_force(toy_data, tmp_path, capsys):
    model, _, cfg = build(toy_data, "deepnet_transformer_tiny", *NARROW)
    checkpoint = save_checkpoint(model, cfg, tmp_path / "in.pt")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "old.txt").write_text("x")
    with pytest.raises(SystemExit):
        export.main([checkpoint, "--transformers", str(tmp_path / "hf")])
    assert "--transformers " + str(tmp_path / "hf") + " is a non-empty directory; pass --force" \
        in capsys.readouterr().err
    export.main([checkpoint, "--transformers", str(tmp_path / "hf"), "--force"])
    assert sorted(os.listdir(tmp_path / "hf")) == ["README.md", "config.json",
                                                   "generation_config.json", "model.safetensors"]
    assert sorted(os.listdir(tmp_path)) == ["hf", "in.pt"]  # no temporary left


# ---- the model card ------------------------------------------------------------------------

def _card(directory):
    from huggingface_hub import ModelCard  # the Hub's own reader of the card

    return ModelCard.load(str(directory / "README.md"))


def test_the_card_says_what_the_hub_reads_and_what_the_model_is(trained):
    """Read by huggingface_hub's own parser: the languages, library and pipeline the Hub
    shows; the depth and size as transformers counts them; no training data claimed for a
    checkpoint trained outside the recipes."""
    card = _card(trained["dir"])
    task = trained["task"]
    assert card.data.language == [task.cfg.source_lang, task.cfg.target_lang]
    assert (card.data.library_name, card.data.pipeline_tag) == ("transformers", "translation")
    assert "deepnet" in card.data.tags
    assert "3-layer encoder, 2-layer decoder" in card.text
    assert f"| parameters | {trained['hf'].num_parameters():,} |" in card.text
    assert "Not recorded: the checkpoint is not in a run directory" in card.text
    assert "No evaluation recorded" in card.text
    assert card.data.license == "other" and "State them here before sharing" in card.text


def test_every_exported_file_is_readable_as_the_umask_says(trained):
    """safetensors' writer made model.safetensors 0600 (its own temporary file), every other
    file 0644: on a shared machine no one else could load the model. The published directory
    takes the user's umask for everything in it, whoever wrote it."""
    umask = os.umask(0)
    os.umask(umask)
    found = {}
    for directory, _, files in os.walk(trained["dir"]):
        assert os.stat(directory).st_mode & 0o777 == 0o777 & ~umask, directory
        for name in files:
            found[name] = os.stat(os.path.join(directory, name)).st_mode & 0o777
    assert "model.safetensors" in found and "README.md" in found
    assert found == {name: 0o666 & ~umask for name in found}


# YAML 1.1's words for booleans and null, which a bare language code would turn into
YAML_WORDS = ["no", "No", "NO", "yes", "on", "off", "y", "n", "true", "false", "null", "Null",
              "nan", "inf", "e1", "x_1"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(YAML_WORDS) | st.from_regex(LANG_CODE[0], fullmatch=True),
                min_size=1, max_size=3))
def test_every_language_code_the_settings_accept_reads_back_from_the_card(langs):
    """The card's metadata through huggingface_hub's own reader (ModelCardData from the
    YAML): each language code the recipes accept (settings.LANG_CODE) is the same string,
    Norwegian's ``no`` included, never a boolean or null."""
    from huggingface_hub import ModelCard

    from deepnet_fairseq.hf_card import _front_matter

    card = ModelCard("\n".join(_front_matter(langs)) + "\n# a card\n")
    assert card.data.language == list(dict.fromkeys(langs))
    assert card.data.pipeline_tag == "translation"


def test_the_card_of_a_recipe_run_gives_its_data_and_its_measured_scores(toy_data, tmp_path):
    """A checkpoint in a run of the recipes: the card names the run's dataset and data
    settings, and tables the scores of its eval.json, direction by direction."""
    from deepnet_fairseq.recipes.evaluation import score
    from deepnet_fairseq.storage import directories
    from deepnet_fairseq.storage.records import write_record

    run = tmp_path / "work" / "runs" / "deepnet-3L-2L"
    directories.make_dirs(str(run / "checkpoints"))
    directories.make_dirs(str(run / "eval"))
    model, _, cfg = build(toy_data, "deepnet_transformer_tiny", *NARROW)
    checkpoint = save_checkpoint(model, cfg, run / "checkpoints" / "checkpoint_last.pt")
    write_record(str(run / "config.json"), "run-config", {
        "dataset": "wmt17", "command": ["fairseq-train"],
        "settings": {"SOURCE": {"value": "multi30k", "from": "test"},
                     "SIZE": {"value": "mini", "from": "test"},
                     "LR": {"value": "0.002", "from": "test"}}})
    scores = score.summarise({"en-de": {"sacrebleu": 26.85, "tok_bleu": 27.5, "chrf": 55.1,
                                        "signature": "nrefs:1|tok:13a",
                                        "chrf_signature": "nrefs:1|nc:6", "distinct_share": 1.0}})
    write_record(str(run / "eval" / "eval.json"), "eval", scores)
    export.main([checkpoint, "--transformers", str(tmp_path / "hf")])
    card = _card(tmp_path / "hf")
    assert "Run `deepnet-3L-2L` of the deepnet_fairseq recipes, dataset `wmt17`" in card.text
    assert "- `SOURCE`: multi30k" in card.text and "- `SIZE`: mini" in card.text
    assert "`LR`" not in card.text  # how it trained is in config.json, not the data section
    assert "| en-de | 26.85 | 55.1 | 27.5 | `nrefs:1|tok:13a` | `nrefs:1|nc:6` |" in card.text
    # what the Hub shows beside it, read by huggingface_hub: the corpus, the licence field
    assert card.data.datasets == ["bentrevett/multi30k"]
    assert (card.data.license, card.data.license_name) == ("other", "terms-of-the-training-data")
    assert "for research use" in card.text
    assert card.data.eval_results is None  # the eval records no checkpoint: not this one's
    assert str(tmp_path) not in str(card)  # no path of this machine


def test_the_hub_shows_the_scores_of_the_exported_checkpoint_itself(toy_data, tmp_path):
    """model-index, as huggingface_hub reads it (EvalResult): the sacreBLEU and chrF of the
    evaluation that scored exactly the exported checkpoint, per direction, on the test split."""
    from deepnet_fairseq.recipes.evaluation import score
    from deepnet_fairseq.storage import directories
    from deepnet_fairseq.storage.records import write_record

    run = tmp_path / "work" / "runs" / "deepnet-3L-2L"
    directories.make_dirs(str(run / "checkpoints"))
    directories.make_dirs(str(run / "eval"))
    model, _, cfg = build(toy_data, "deepnet_transformer_tiny", *NARROW)
    checkpoint = save_checkpoint(model, cfg, run / "checkpoints" / "checkpoint_1_7.pt",
                                 num_updates=7)
    write_record(str(run / "config.json"), "run-config", {
        "dataset": "wmt17", "command": ["fairseq-train"],
        "settings": {"SOURCE": {"value": "multi30k", "from": "test"}}})
    scores = score.summarise({"en-de": {"sacrebleu": 21.5, "tok_bleu": 22.0, "chrf": 50.25,
                                        "signature": "nrefs:1|tok:13a",
                                        "chrf_signature": "nrefs:1|nc:6", "distinct_share": 1.0}})
    write_record(str(run / "eval" / "eval.json"), "eval",
                 {**scores, "checkpoints": ["checkpoint_1_7.pt"]})
    export.main([checkpoint, "--transformers", str(tmp_path / "hf")])
    card = _card(tmp_path / "hf")
    assert card.data.datasets == ["bentrevett/multi30k"]
    found = {(r.task_type, r.dataset_type, r.dataset_split, r.metric_type, r.metric_value)
             for r in card.data.eval_results}
    assert found == {("translation", "bentrevett/multi30k", "test", "sacrebleu", 21.5),
                     ("translation", "bentrevett/multi30k", "test", "chrf", 50.25)}
    assert card.data.model_name == "deepnet-3L-2L"


@pytest.mark.parametrize("scored, stale, says", [
    (["checkpoint_1_7.pt"], False, "detokenised sacreBLEU) of this checkpoint:"),
    (["checkpoint_1_5.pt", "checkpoint_1_7.pt"], False,
     "of the average of checkpoint_1_5.pt, checkpoint_1_7.pt, not this checkpoint"),
    (None, False, "which ones the evaluation does not record"),
    (["checkpoint_1_7.pt"], True, "Not shown: the run's evaluation is of checkpoints the run "
                                  "no longer holds"),
])
def test_the_card_says_what_the_scores_it_shows_are_of(toy_data, tmp_path, scored, stale, says):
    """Issue 60: the scores of the exported checkpoint itself, or said to be another's (the
    averaged last checkpoints), or, where the run was trained since it was evaluated, none."""
    from deepnet_fairseq.recipes.evaluation import score
    from deepnet_fairseq.storage import directories
    from deepnet_fairseq.storage.evaluations import PURPOSE, purpose
    from deepnet_fairseq.storage.records import write_record

    run = tmp_path / "work" / "runs" / "deepnet-3L-2L"
    directories.make_dirs(str(run / "checkpoints"))
    directories.make_dirs(str(run / "eval"))
    model, _, cfg = build(toy_data, "deepnet_transformer_tiny", *NARROW)
    checkpoint = save_checkpoint(model, cfg, run / "checkpoints" / "checkpoint_last.pt")
    scores = score.summarise({"en-de": {"sacrebleu": 26.85, "tok_bleu": 27.5, "chrf": 55.1,
                                        "signature": "nrefs:1|tok:13a",
                                        "chrf_signature": "nrefs:1|nc:6", "distinct_share": 1.0}})
    write_record(str(run / "eval" / "eval.json"), "eval",
                 {**scores, **({"checkpoints": scored} if scored else {})})
    recorded = purpose(str(run), ["--beam", "5"])
    if stale:  # evaluated, then trained on: other files now
        recorded["checkpoints"] = [["checkpoint_last.pt", 1, 1]]
    write_record(str(run / "eval" / PURPOSE), "purpose", recorded)
    export.main([checkpoint, "--transformers", str(tmp_path / "hf")])
    card = _card(tmp_path / "hf")
    assert says in card.text, card.text
    assert ("| en-de | 26.85 |" in card.text) is not stale
