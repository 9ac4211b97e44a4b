"""Every reader of checkpoints takes the OPUS-100 recipe's multilingual checkpoints, or refuses
them by name: fairseq keeps that task's cfg as the ``argparse.Namespace`` of its legacy
options, not as a dict, and every door that read a checkpoint's task as a dict failed there
with a traceback (``deepnet-export``, ``deepnet-source-use``). A real multilingual model,
trained by fairseq-train's own main with ``translation_multi_simple_epoch`` on the toy data,
goes through each of them; the plain export translates as the model it came from (fairseq's
generator through ``deepnet_fairseq.load``, on the original and on the export), and so does
its average with itself."""

import argparse
import os
import shutil

import pytest

import deepnet_fairseq
from deepnet_fairseq import average_checkpoints, export
from deepnet_fairseq.diagnostics import source_use
from deepnet_fairseq.storage.checkpoint_io import task_field, trained_on
from support import train

LANGS = dict(source_lang="src", target_lang="tgt")


@pytest.fixture(scope="module")
def multilingual(toy_data, tmp_path_factory):
    save = tmp_path_factory.mktemp("multilingual") / "checkpoints"
    train(toy_data, save, "--task", "translation_multi_simple_epoch", "--lang-pairs", "src-tgt",
          "--langs", "src,tgt", "--encoder-langtok", "src", "--decoder-langtok",
          "--share-all-embeddings", "--max-update", "30", "--dropout", "0",
          "--encoder-layers", "2", "--decoder-layers", "2")
    return str(save / "checkpoint_last.pt")


def _sentences(toy_data, count=5):
    with open(os.path.join(os.path.dirname(toy_data), "test.src")) as f:
        return [f.readline().strip() for _ in range(count)]


def test_the_task_cfg_is_read_as_a_namespace_or_a_dict():
    for holder in ({"data": "d"}, argparse.Namespace(data="d")):
        assert task_field(holder, "data") == "d" and task_field(holder, "langs") is None
        assert trained_on({"cfg": {"task": holder}}) == "d"
    assert task_field(None, "data") is None


def test_the_plain_export_translates_as_the_multilingual_model(toy_data, multilingual, tmp_path):
    out = tmp_path / "exported.pt"
    assert export.main([multilingual, "--output", str(out)]) in (0, None)
    sentences = _sentences(toy_data)
    original = deepnet_fairseq.load(multilingual, pieces=True, beam=5, **LANGS)
    exported = deepnet_fairseq.load(str(out), data=str(toy_data), pieces=True, beam=5, **LANGS)
    assert exported.translate(sentences) == original.translate(sentences)


def test_averaging_a_multilingual_checkpoint_with_itself_gives_the_model_back(toy_data,
                                                                             multilingual,
                                                                             tmp_path):
    for name in ("checkpoint_1_1.pt", "checkpoint_1_2.pt"):
        shutil.copy(multilingual, tmp_path / name)
    out = tmp_path / "averaged.pt"
    average_checkpoints.cli_main(["--inputs", str(tmp_path / "checkpoint_1_1.pt"),
                                  str(tmp_path / "checkpoint_1_2.pt"), "--output", str(out)])
    sentences = _sentences(toy_data)
    averaged = deepnet_fairseq.load(str(out), data=str(toy_data), pieces=True, **LANGS)
    original = deepnet_fairseq.load(multilingual, pieces=True, **LANGS)
    assert averaged.translate(sentences) == original.translate(sentences)


def test_a_dictionary_larger_than_the_embeddings_is_refused(toy_data, multilingual, tmp_path,
                                                            capsys):
    other = tmp_path / "otherdata"
    shutil.copytree(toy_data, other)
    rows = len(open(toy_data / "dict.src.txt").readlines()) + 4 + 2  # specials, two langtoks
    for lang in ("src", "tgt"):
        with open(other / f"dict.{lang}.txt", "a") as f:
            f.writelines(f"unseen{i} 1\n" for i in range(5))
    with pytest.raises(SystemExit) as stop:
        export.main([multilingual, "--output", str(tmp_path / "out.pt"), "--data", str(other)])
    assert stop.value.code == 2
    assert (f"dict.src.txt has {rows + 3} entries but the checkpoint's embedding has at most "
            f"{rows} rows") in capsys.readouterr().err
    assert not (tmp_path / "out.pt").exists()


@pytest.mark.parametrize("flag", ["--ctranslate2", "--transformers"])
def test_the_exports_without_language_tokens_refuse_it_by_name(multilingual, tmp_path, capsys,
                                                               flag):
    with pytest.raises(SystemExit) as stop:
        export.main([multilingual, "--output", str(tmp_path / "out.pt"), flag,
                     str(tmp_path / "converted")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "is a multilingual model (translation_multi_simple_epoch" in err
    assert "export it with --output alone" in err and "(nothing written)" in err
    assert sorted(os.listdir(tmp_path)) == []


def test_source_use_refuses_it_naming_the_task_and_what_to_do(toy_data, multilingual, capsys):
    with pytest.raises(SystemExit) as stop:
        source_use.main([str(toy_data), "--checkpoints", multilingual])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "its task is 'translation_multi_simple_epoch'" in err
    assert "deepnet_fairseq.load(CHECKPOINT, source_lang=..., target_lang=...)" in err


# fairseq's tasks by hand: those whose batches are one direction of a LanguagePairDataset
# (TranslationTask and the tasks built on it, the plugin's included) and those that are not
@pytest.mark.parametrize("name,measured", [
    ("translation", True), ("translation_lev", True), ("translation_from_pretrained_bart", True),
    ("translation_multi_simple_epoch", False), ("multilingual_translation", False),
    ("language_modeling", False), ("masked_lm", False), ("no_such_task", False)])
@pytest.mark.parametrize("as_namespace", [False, True])
def test_source_use_measures_the_translation_tasks_alone(name, measured, as_namespace):
    task = argparse.Namespace(_name=name, task=name) if as_namespace else {"_name": name}
    problem = source_use.unmeasured_task({"cfg": {"task": task}})
    assert (problem == "") == measured
    assert measured or f"its task is {name!r}" in problem
