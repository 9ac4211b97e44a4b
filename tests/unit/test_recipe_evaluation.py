"""The recipes' evaluation (deepnet_fairseq/recipes/evaluation/evaluate.py): the model is loaded
once for all directions, eval.json has the distinct count. That the output is stock
fairseq-generate's: slow/test_train_generate.py."""

import pytest

from deepnet_fairseq.recipes.evaluation import evaluate


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


def test_a_checkpoint_of_another_vocabulary_is_one_line_not_a_traceback(toy_data, tmp_path):
    """Evaluation checks the model's embeddings against the data's dictionaries first."""
    from deepnet_fairseq.recipes.evaluation.evaluate import dictionary_problem
    from support import build, save_checkpoint

    model, _, cfg = build(toy_data, "deepnet_transformer_tiny")
    path = save_checkpoint(model, cfg, tmp_path / "model.pt")
    assert dictionary_problem(path, str(toy_data), ["src-tgt"]) is None
    other = tmp_path / "other"
    other.mkdir()
    for lang in ("src", "tgt"):
        (other / f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(7)))
    problem = dictionary_problem(path, str(other), ["src-tgt"])
    assert "has 11 entries but the checkpoint's encoder embedding has" in problem
    # as many entries, two exchanged: compared with the dictionary the model was trained on
    # (the data directory its cfg records), both named with the first difference
    swapped = tmp_path / "swapped"
    for lang in ("src", "tgt"):
        lines = (toy_data / f"dict.{lang}.txt").read_text().splitlines(keepends=True)
        lines[0], lines[1] = lines[1], lines[0]
        swapped.mkdir(exist_ok=True)
        (swapped / f"dict.{lang}.txt").write_text("".join(lines))
    problem = dictionary_problem(path, str(swapped), ["src-tgt"])
    assert f"{swapped}/dict.src.txt and {toy_data}/dict.src.txt differ at entry 4" in problem


@pytest.mark.parametrize("given, expected", [([], 0), (["--num-workers", "2"], 2)])
def test_decoding_forks_no_loader_worker_unless_asked(monkeypatch, tmp_path, toy_data, given,
                                                      expected):
    """fairseq's generate defaults to one DataLoader worker, forked while the progress thread
    runs; the evaluation loads in-process (0) unless the user's options give a number."""
    import fairseq_cli.generate

    from fairseq import options

    assert options.parse_args_and_arch(options.get_generation_parser(), [
        str(toy_data)]).num_workers == 1  # fairseq's own default, which the evaluation overrides
    seen = []
    monkeypatch.setattr(fairseq_cli.generate, "main", lambda args: seen.append(args.num_workers))
    evaluate.generate("src-tgt", "averaged.pt", str(tmp_path), [str(toy_data), *given])
    assert seen == [expected]


def test_the_scores_go_to_tensorboard_at_the_update_of_the_newest_checkpoint(tmp_path):
    """The evaluation's sacreBLEU and chrF per direction and their averages, read back from the
    event files' own record format (support.tensorboard_scalars), at the update the newest
    averaged checkpoint (by time, not by name) records."""
    import os

    import torch

    from deepnet_fairseq.recipes.evaluation import tensorboard
    from support import tensorboard_scalars

    checkpoints = []
    for name, updates, mtime in (("checkpoint_1_30.pt", 30, 2_000), ("checkpoint_2_20.pt", 20, 1_000)):
        path = str(tmp_path / name)
        torch.save({"optimizer_history": [{"num_updates": 1}, {"num_updates": updates}]}, path)
        os.utime(path, (mtime, mtime))
        checkpoints.append(path)
    update = tensorboard.update_of(checkpoints)
    assert update == 30
    summary = {"directions": {"en-de": {"sacrebleu": 31.5, "chrf": 58.25, "sentences": 60},
                              "de-en": {"sacrebleu": 33.0}},
               "sacrebleu_avg": 32.25}
    folder = tensorboard.log_scores(str(tmp_path / "tb"), summary, update)
    assert folder == str(tmp_path / "tb" / "evaluate")
    assert tensorboard_scalars(tmp_path / "tb") == {
        ("evaluate", "sacrebleu/en-de"): [(30, 31.5)], ("evaluate", "chrf/en-de"): [(30, 58.25)],
        ("evaluate", "sacrebleu/de-en"): [(30, 33.0)],
        ("evaluate", "sacrebleu/average"): [(30, 32.25)]}


def test_the_scores_follow_no_link_planted_in_the_runs_tensorboard(tmp_path):
    """RUN/tensorboard/evaluate made a link to elsewhere inside the recipes' marked folder: the
    writer refuses it (the file layer's make_dirs) and writes nothing where it points."""
    import os

    import pytest

    from deepnet_fairseq.recipes.evaluation import tensorboard
    from deepnet_fairseq.storage.directories import make_dirs

    events = make_dirs(str(tmp_path / "run" / "tensorboard"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, os.path.join(events, tensorboard.EVENTS))
    with pytest.raises(OSError, match="symbolic link"):
        tensorboard.log_scores(events, {"directions": {"en-de": {"sacrebleu": 1.0}}}, 5)
    assert os.listdir(elsewhere) == []
