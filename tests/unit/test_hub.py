"""deepnet_fairseq.load: a checkpoint of the plugin behind fairseq's hub interface, loaded by the
plugin's own reader and checks, not by fairseq's hub name conventions. Its translation of a
test sentence is fairseq-generate's (the CLI, another path through fairseq); each door of the
API refuses what it cannot use, by class: the checkpoint path (any name, any file type), the
data's dictionaries, the sentencepiece model, and the text (generated with hypothesis)."""

import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import deepnet_fairseq
from deepnet_fairseq.hub import InputError, LoadError, check_pieces
from support import USER_DIR


@pytest.fixture(scope="module")
def trained(trained_tiny):
    """The session's trained tiny DeepNet (conftest), read and copied here, never changed."""
    return str(trained_tiny)


@pytest.fixture(scope="module")
def model(trained):
    return deepnet_fairseq.load(trained, pieces=True)


def _first_test_sentence(toy_data):
    return open(os.path.join(os.path.dirname(toy_data), "test.src")).readline().strip()


def test_load_translates_as_fairseq_generate_does(toy_data, trained, model):
    ours = model.translate(_first_test_sentence(toy_data), beam=5)
    generated = subprocess.run(
        ["fairseq-generate", str(toy_data), "--user-dir", USER_DIR, "--path", trained,
         "--gen-subset", "test", "--beam", "5", "--cpu", "--batch-size", "64"],
        capture_output=True, text=True, check=True).stdout
    hypotheses = {int(line.split("\t")[0][2:]): line.split("\t")[2]
                  for line in generated.splitlines() if line.startswith("H-")}
    assert ours == hypotheses[0]


def test_text_without_a_sentencepiece_model_is_refused_unless_said_to_be_pieces(trained,
                                                                              tmp_path):
    with pytest.raises(LoadError, match="no sentencepiece model found .* pieces=True"):
        deepnet_fairseq.load(trained)
    with pytest.raises(FileNotFoundError, match="pass data=DIR"):
        deepnet_fairseq.load(trained, data=str(tmp_path / "nowhere"), pieces=True)


@pytest.mark.parametrize("name", ["model:v2.pt", "a:b:c", "model.pt:", ":x", "m o:d e l.pt",
                                  "checkpoint_last.pt"])
def test_the_file_named_is_the_model_loaded_whatever_its_name(toy_data, trained, model,
                                                              tmp_path, name):
    """fairseq's hub splits a name on ':' into an ensemble and picks up its own file names
    beside the checkpoint; here the file named is the one model, and nothing beside it is
    read (each part of the name planted as a file that is not a checkpoint)."""
    directory = tmp_path / "d"
    directory.mkdir()
    for part in name.split(":") + ["sentencepiece.bpe.model", "code", "bpecodes"]:
        if part:
            (directory / part).write_text("not a checkpoint\n")
    shutil.copyfile(trained, directory / name)
    source = _first_test_sentence(toy_data)
    loaded = deepnet_fairseq.load(str(directory / name), pieces=True)
    assert len(loaded.models) == 1 and loaded.bpe is None
    assert loaded.translate(source, beam=2) == model.translate(source, beam=2)


def test_every_kind_of_file_that_is_not_a_checkpoint_is_refused(trained, tmp_path):
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    text = tmp_path / "text.pt"
    text.write_text("hello\n")
    cases = {str(tmp_path): "is a directory", str(fifo): "is not a regular file",
             "/dev/null": "is not a regular file", str(text): "cannot read"}
    for path, message in cases.items():
        with pytest.raises(ValueError, match=message):
            deepnet_fairseq.load(path, pieces=True)
    with pytest.raises(FileNotFoundError, match="no checkpoint file"):
        deepnet_fairseq.load(str(tmp_path / "missing.pt"), pieces=True)
    with pytest.raises(LoadError, match="sentencepiece model file itself"):
        deepnet_fairseq.load(trained, sentencepiece_model=str(fifo))


def _dictionary_copy(toy_data, tmp_path, edit):
    data = tmp_path / "bin"
    shutil.copytree(toy_data, data)
    for name in os.listdir(data):
        if name.startswith("dict."):
            lines = (data / name).read_text().splitlines(keepends=True)
            (data / name).write_text("".join(edit(lines)))
    return str(data)


def test_dictionaries_that_are_not_the_models_are_refused(toy_data, trained, tmp_path):
    swapped = _dictionary_copy(toy_data, tmp_path / "a", lambda l: [l[1], l[0], *l[2:]])
    with pytest.raises(LoadError, match="differ at entry 4.*pass data=DIR"):
        deepnet_fairseq.load(trained, data=swapped, pieces=True)
    longer = _dictionary_copy(toy_data, tmp_path / "b", lambda l: [*l, "extra 1\n"])
    with pytest.raises(LoadError, match="entries but the checkpoint's encoder embedding"):
        deepnet_fairseq.load(trained, data=longer, pieces=True)


def _sentencepiece(tmp_path, name, symbols=()):
    import sentencepiece

    text = tmp_path / f"{name}.txt"
    text.write_text("".join(f"w{i} w{(i * 7) % 30} w{(i * 3) % 30}\n" for i in range(300)))
    sentencepiece.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(tmp_path / name), vocab_size=50, hard_vocab_limit=False,
        user_defined_symbols=list(symbols), minloglevel=2)
    return str(tmp_path / f"{name}.model")


def test_a_sentencepiece_model_whose_pieces_are_not_the_dictionarys_is_refused(
        toy_data, trained, tmp_path):
    dictionary = str(toy_data / "dict.src.txt")
    matching = _sentencepiece(tmp_path, "matching", [f"w{i}" for i in range(30)])
    check_pieces(matching, dictionary)  # every token a piece: taken
    other = _sentencepiece(tmp_path, "other")
    with pytest.raises(LoadError, match="holds 'w.*', which is not a piece of"):
        check_pieces(other, dictionary)
    with pytest.raises(LoadError, match="not a piece of"):  # given: the one used, and checked
        deepnet_fairseq.load(trained, sentencepiece_model=other)
    assert deepnet_fairseq.load(trained, sentencepiece_model=matching).bpe is not None
    (tmp_path / "junk.model").write_text("junk")
    with pytest.raises(LoadError, match="is not a sentencepiece model"):
        check_pieces(str(tmp_path / "junk.model"), dictionary)
    # the other doors that pair a sentencepiece model with the model's dictionary ask the same
    # (spm.mismatch): the transformers export (which took any model sharing one piece) and the
    # CTranslate2 export, which copies it beside the converted model
    from deepnet_fairseq import export, hf_export

    hf_export.check_sentencepiece(matching, dictionary)
    with pytest.raises(export.ExportError, match="which is not a piece of"):
        hf_export.check_sentencepiece(other, dictionary)
    with pytest.raises(export.ExportError, match="which is not a piece of"):
        export.to_ctranslate2(export.export(trained), str(toy_data), str(tmp_path / "ct2"),
                              None, other)
    assert not (tmp_path / "ct2").exists()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.text(max_size=40))
def test_any_text_translates_or_is_refused_by_name(model, text):
    try:
        out = model.translate(text, beam=1)
    except InputError as err:
        assert "sentence 0:" in str(err) and ("surrogate" in str(err) or "at most" in str(err))
    else:
        assert isinstance(out, str)


def test_text_the_model_cannot_read_is_refused_naming_the_sentence(model):
    ok = "w1 w2 w3"
    for batch, message in [
            ([ok, b"w1 w2"], "sentence 1: the text is bytes: decode it first"),
            ([ok, ok, "w1 \udc80 w2"], "sentence 2: character 3 is '\\\\udc80', a lone surrogate"),
            ([" ".join(["w1"] * 2000)], "sentence 0: it is 2001 tokens long, .* at most 1024"),
            ([ok, 7], "sentence 1: the text is a int, not a str"),
            (b"w1 w2", "translate takes a str or a list of str, not bytes"),
            (None, "not NoneType")]:
        with pytest.raises(InputError, match=message):
            model.translate(batch, beam=1)
    assert model.translate([ok, ok], beam=1)[0] == model.translate(ok, beam=1)


@pytest.mark.parametrize("blank", ["", " ", "\t \n"])
def test_a_blank_sentence_translates_to_nothing_in_place(model, blank):
    """Nothing to translate gives "" (the model, given only </s>, would write its likeliest
    sentence), alone and in a batch, the others translated as alone."""
    ok = "w1 w2 w3"
    assert model.translate(blank, beam=1) == ""
    assert model.translate([blank, ok, blank], beam=1) == ["", model.translate(ok, beam=1), ""]
    assert model.translate([blank, blank], beam=1) == ["", ""]
