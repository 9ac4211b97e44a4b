"""Every reader of checkpoints takes the OPUS-100 recipe's multilingual checkpoints, or refuses
them by name: fairseq keeps that task's cfg as the ``argparse.Namespace`` of its legacy
options, not as a dict, and every door that read a checkpoint's task as a dict failed there
with a traceback (``deepnet-export``, ``deepnet-source-use``). A real multilingual model,
trained by fairseq-train's own main with ``translation_multi_simple_epoch`` on the toy data,
goes through each of them; the plain export translates as the model it came from (fairseq's
generator through ``deepnet_fairseq.load``, on the original and on the export), and so does
its average with itself."""

import argparse
import csv
import math
import os
import shutil

import pytest
import torch

import deepnet_fairseq
from deepnet_fairseq import average_checkpoints, export
from deepnet_fairseq.diagnostics import source_use
from deepnet_fairseq.storage.checkpoint_io import task_field, trained_on
from support import train

LANGS = dict(source_lang="src", target_lang="tgt")


@pytest.fixture(scope="module")
def multilingual(toy_data, tmp_path_factory):
    save = tmp_path_factory.mktemp("multilingual") / "checkpoints"
    # both directions of the toy pair, from the one set of files (the data manager reads a
    # direction from the files of its reverse)
    train(toy_data, save, "--task", "translation_multi_simple_epoch",
          "--lang-pairs", "src-tgt,tgt-src", "--langs", "src,tgt", "--encoder-langtok", "src",
          "--decoder-langtok",
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


def test_source_use_measures_each_direction_as_fairseq_batches_and_scores_it(toy_data,
                                                                            multilingual):
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    model, task, _update = source_use.load(multilingual, str(toy_data))
    batches = source_use.direction_batches(task, "valid", sentences=6)
    assert list(batches) == ["src-tgt", "tgt-src"]
    # the reference: fairseq's own validation set, the directions concatenated in that order
    task.load_dataset("valid")
    whole = task.dataset("valid")
    starts = dict(zip(batches, [0, whole.cumulative_sizes[0]]))
    model.eval()
    for direction, batch in batches.items():
        source, target = direction.split("-")
        langtok = task.source_dictionary.index
        # the language tokens as in training: the source's in each source (left-padded), the
        # target's first in each target (the decoder's input is it after end-of-sentence)
        assert ((batch["net_input"]["src_tokens"] == langtok(f"__{source}__")).sum(1) == 1).all()
        assert (batch["target"][:, 0] == langtok(f"__{target}__")).all()
        assert (batch["net_input"]["prev_output_tokens"][:, 1] == langtok(f"__{target}__")).all()
        reference = whole.collater([whole[starts[direction] + i] for i in range(6)])
        with torch.no_grad():
            loss, size, _ = CrossEntropyCriterion(task, sentence_avg=False)(model, reference)
        result = source_use.measure(model, batch, task.target_dictionary.pad())
        assert result["nll_true"] == pytest.approx(loss.item() / size / math.log(2), rel=1e-5)
        assert 1 <= source_use.distinct_greedy(model, task, batch, target) <= 6


def test_source_use_writes_a_row_per_direction_and_refuses_an_unknown_one(toy_data,
                                                                         multilingual,
                                                                         tmp_path, capsys):
    out = tmp_path / "use.csv"
    assert source_use.main([str(toy_data), "--checkpoints", multilingual, "--sentences", "4",
                            "--out", str(out)]) == 0
    with open(out) as handle:
        rows = list(csv.DictReader(handle))
    assert [row["direction"] for row in rows] == ["src-tgt", "tgt-src"]
    assert all(float(row["nll_shuffled"]) - float(row["nll_true"])
               == pytest.approx(float(row["source_gain"]), abs=1e-4) for row in rows)
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        source_use.main([str(toy_data), "--checkpoints", multilingual,
                         "--directions", "src-tgt", "tgt-xx"])
    assert stop.value.code == 2
    assert "--directions tgt-xx:" in capsys.readouterr().err


# fairseq's tasks by hand: those whose batches are one direction of a LanguagePairDataset
# (TranslationTask and the tasks built on it, the plugin's included) and those that are not
@pytest.mark.parametrize("name,measured", [
    ("translation", True), ("translation_lev", True), ("translation_from_pretrained_bart", True),
    ("translation_multi_simple_epoch", True), ("multilingual_translation", False),
    ("language_modeling", False), ("masked_lm", False), ("no_such_task", False)])
@pytest.mark.parametrize("as_namespace", [False, True])
def test_source_use_measures_the_translation_tasks_alone(name, measured, as_namespace):
    task = argparse.Namespace(_name=name, task=name) if as_namespace else {"_name": name}
    problem = source_use.unmeasured_task({"cfg": {"task": task}})
    assert (problem == "") == measured
    assert measured or f"its task is {name!r}" in problem
