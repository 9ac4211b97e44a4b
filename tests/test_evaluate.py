"""The recipes' evaluation (deepnet_fairseq/recipes/evaluate.py): the model is loaded once for
all directions, the output is stock fairseq-generate's, eval.json has the distinct count."""

import json
import os
import re
import shutil

import pytest

from conftest import USER_DIR, run, write_reverse_corpus
from deepnet_fairseq.average_checkpoints import cli_main
from deepnet_fairseq.recipes import evaluate


class FakeTask:
    def __init__(self, symbols):
        self.source_dictionary = self.target_dictionary = FakeDictionary(symbols)


class FakeDictionary:
    def __init__(self, symbols):
        self.symbols = list(symbols)

    def __len__(self):
        return len(self.symbols)


@pytest.fixture
def counted_loader(monkeypatch):
    """fairseq's load_model_ensemble replaced by a stub that records its calls."""
    from fairseq import checkpoint_utils

    calls = []

    def load_model_ensemble(filenames, arg_overrides=None, task=None, strict=True, suffix="",
                            num_shards=1, state=None):
        calls.append(filenames)
        return [object()], {"loaded": len(calls)}

    monkeypatch.setattr(checkpoint_utils, "load_model_ensemble", load_model_ensemble)
    return calls


def test_same_files_options_and_dictionaries_load_once(counted_loader):
    from fairseq import checkpoint_utils

    task, same_vocabulary = FakeTask("abc"), FakeTask("abc")
    with evaluate.models_loaded_once():
        first = checkpoint_utils.load_model_ensemble(["avg.pt"], arg_overrides={}, task=task)
        again = checkpoint_utils.load_model_ensemble(["avg.pt"], {}, same_vocabulary)
        assert again is first and counted_loader == [["avg.pt"]]
        # another vocabulary, file or option: a model of its own (and the old one dropped)
        checkpoint_utils.load_model_ensemble(["avg.pt"], arg_overrides={}, task=FakeTask("abd"))
        checkpoint_utils.load_model_ensemble(["other.pt"], arg_overrides={}, task=task)
        checkpoint_utils.load_model_ensemble(["other.pt"], arg_overrides={"beam": 2}, task=task)
        assert len(counted_loader) == 4
        back = checkpoint_utils.load_model_ensemble(["avg.pt"], arg_overrides={}, task=task)
        assert back is not first and len(counted_loader) == 5
    # outside the block fairseq's function is itself again: every call loads
    checkpoint_utils.load_model_ensemble(["avg.pt"], arg_overrides={}, task=task)
    assert len(counted_loader) == 6


def test_check_distinct_records_and_warns(tmp_path, capsys):
    gen = tmp_path / "generate-test.txt"
    gen.write_text("".join(f"S-{i}\tx\nH-{i}\t-0.1\tdas gleiche\nD-{i}\t-0.1\tdas gleiche\n"
                           for i in range(4)) + "D-4\t-0.1\tanders\n")
    assert evaluate.check_distinct(str(gen)) == {"distinct": 2, "distinct_share": 0.4,
                                                 "ignores_source": True}
    assert "WARNING: 2 distinct hypotheses for 5 test sentences (40.0 %)" in capsys.readouterr().err


# ---- end to end: a tiny trained model, two directions ----------------------------------------

GENERATE = ["--user-dir", USER_DIR, "--gen-subset", "test", "--beam", "4", "--batch-size", "40",
            "--required-batch-size-multiple", "1", "--max-len-a", "0", "--max-len-b", "12",
            "--cpu"]


@pytest.fixture(scope="module")
def two_way_run(tmp_path_factory):
    """src<->tgt toy data (one joined dictionary, both directions' test sets), a run directory
    with update checkpoints of a tiny model trained src->tgt, and the raw references."""
    root = tmp_path_factory.mktemp("two-way")
    write_reverse_corpus(str(root))
    run(["fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
         "--trainpref", str(root / "train"), "--validpref", str(root / "valid"),
         "--testpref", str(root / "test"), "--destdir", str(root / "bin"),
         "--joined-dictionary", "--workers", "1"])
    run(["fairseq-preprocess", "--source-lang", "tgt", "--target-lang", "src",
         "--testpref", str(root / "test"), "--destdir", str(root / "bin"),
         "--srcdict", str(root / "bin" / "dict.tgt.txt"),
         "--tgtdict", str(root / "bin" / "dict.src.txt"), "--workers", "1"])
    refs = root / "raw"
    refs.mkdir()
    for lang in ("src", "tgt"):
        shutil.copy(root / f"test.{lang}", refs / f"test.src-tgt.{lang}")
    run(["fairseq-train", str(root / "bin"), "--user-dir", USER_DIR,
         "--arch", "deepnet_transformer_tiny", "--save-dir", str(root / "run" / "checkpoints"),
         "--cpu", "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt",
         "--warmup-updates", "10", "--max-tokens", "2000", "--criterion",
         "label_smoothed_cross_entropy", "--seed", "1", "--max-update", "20",
         "--save-interval-updates", "10", "--no-epoch-checkpoints", "--disable-validation"])
    return root


def stock_generate(root, checkpoint, src, tgt):
    proc = run(["fairseq-generate", str(root / "bin"), "--path", str(checkpoint),
                "--source-lang", src, "--target-lang", tgt, *GENERATE])
    return proc.stdout


def translations(text):
    """fairseq-generate's S-, T-, H-, D- and P- lines, in order of sentence and kind."""
    lines = re.findall(r"^[STHDP]-\d+\t.*$", text, flags=re.M)
    return sorted(lines, key=lambda line: (int(line.split("\t")[0][2:]), line[0]))


@pytest.mark.slow
def test_two_directions_load_the_model_once_and_match_fairseq_generate(two_way_run, monkeypatch):
    from fairseq import checkpoint_utils

    root = two_way_run
    reads = []
    real = checkpoint_utils.load_checkpoint_to_cpu

    def load_checkpoint_to_cpu(path, *args, **kwargs):  # the one place fairseq reads the file
        reads.append(os.path.basename(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint_utils, "load_checkpoint_to_cpu", load_checkpoint_to_cpu)
    evaluate.main(["--run-dir", str(root / "run"), "--average-last", "2",
                   "--directions", "src-tgt,tgt-src", "--references", str(root / "raw"),
                   "--", str(root / "bin"), *GENERATE])
    assert reads == ["averaged.pt"], "the model was not loaded exactly once for 2 directions"

    result = json.load(open(root / "run" / "eval" / "eval.json"))
    assert sorted(result["directions"]) == ["src-tgt", "tgt-src"]
    for scores in result["directions"].values():
        assert scores["sentences"] == 40
        assert 1 <= scores["distinct"] <= 40 and isinstance(scores["ignores_source"], bool)
        assert scores["distinct_share"] == round(scores["distinct"] / 40, 4)

    # the same averaged weights through the stock CLIs give the same lines
    averaged = root / "averaged.pt"
    cli_main(["--inputs", str(root / "run" / "checkpoints"), "--num-update-checkpoints", "2",
              "--output", str(averaged)])
    for src, tgt in (("src", "tgt"), ("tgt", "src")):
        ours = (root / "run" / "eval" / f"{src}-{tgt}" / "generate-test.txt").read_text()
        expected = translations(stock_generate(root, averaged, src, tgt))
        assert len([line for line in expected if line[0] == "H"]) == 40
        assert translations(ours) == expected
