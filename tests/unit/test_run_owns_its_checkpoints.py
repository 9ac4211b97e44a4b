"""A run resumes only its own checkpoint (runner.checkpoint_otherwise, issue 60): a
checkpoint_last.pt of another model, seed, learning rate or dictionary found in a run's
checkpoints is refused before fairseq starts, both sides named, and the advice the refusal gives
(move it away) leads to a run that trains.

The checkpoints are built here as fairseq-train builds a model from a recipe's own planned
command (its parser, the arch hook, the task), for the run's settings and for other ones."""

import os
import shutil
from pathlib import Path

import pytest

from deepnet_fairseq.diagnostics.common import build_from_options
from deepnet_fairseq.recipes.run import commands, runner
from deepnet_fairseq.recipes.run.layout import plan_layout
from deepnet_fairseq.recipes.spec import settings
from deepnet_fairseq.recipes.spec.paths import paths
from support import REPO, save_checkpoint


def planned(work, **given):
    """(cfg, the train command) of a smoke-size wmt17 run with GIVEN settings, in WORK."""
    env = {"DEVICE": "cpu", "SIZE": "smoke", "DEEPNET_WORK": str(work), "METHOD": "deepnet",
           "LAYERS": "1", **given}
    cfg = settings.resolve("wmt17", env, REPO)
    command = commands.train_command(cfg, plan_layout(cfg, env), commands.method_args(cfg),
                                     commands.task_args(cfg))
    return cfg, command


def binarised(toy_data, bin_dir, extra_tokens=0):
    """The toy dictionary as the run's en and de dictionaries (EXTRA_TOKENS more in each)."""
    os.makedirs(bin_dir, exist_ok=True)
    text = (toy_data / "dict.src.txt").read_text()
    text += "".join(f"extra{i} 1\n" for i in range(extra_tokens))
    for lang in ("en", "de"):
        (bin_dir / f"dict.{lang}.txt").write_text(text)


def checkpoint_of(cfg, command, path):
    """A checkpoint of the model COMMAND trains, with COMMAND's options."""
    where = paths(cfg)
    options = command[command.index(where.bin):]
    model_cfg, _, model, _ = build_from_options(options)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_checkpoint(model, model_cfg, path)


@pytest.fixture
def run(toy_data, tmp_path):
    cfg, command = planned(tmp_path / "work")
    binarised(toy_data, Path(paths(cfg).bin))
    return cfg, command, Path(paths(cfg).checkpoints) / "checkpoint_last.pt"


def test_the_runs_own_checkpoint_resumes(run):
    cfg, command, last = run
    assert runner.checkpoint_otherwise(cfg, command) is None  # none there yet
    checkpoint_of(cfg, command, last)
    assert runner.checkpoint_otherwise(cfg, command) is None


@pytest.mark.parametrize("other, named", [
    ({"METHOD": "post_ln"}, "arch post_ln_transformer there, deepnet_transformer here"),
    ({"LAYERS": "2"}, "encoder_layers 2 there, 1 here"),
    ({"SEED": "2"}, "seed 2 there, 1 here"),
    ({"LR": "0.01"}, "lr [0.01] there, [0.002] here"),
    ({"METHOD": "admin"}, "arch"),
])
def test_a_checkpoint_of_other_settings_is_refused_naming_both(run, other, named):
    cfg, command, last = run
    other_cfg, other_command = planned(os.path.dirname(os.path.dirname(paths(cfg).bin)),
                                       **other)
    checkpoint_of(other_cfg, other_command, last)
    problem = runner.checkpoint_otherwise(cfg, command)
    assert problem and named in problem and str(last) in problem, problem
    # the advice: moved away, nothing of another run is left to resume
    shutil.move(last, str(last) + ".other")
    assert runner.checkpoint_otherwise(cfg, command) is None


def test_a_checkpoint_of_another_dictionary_is_refused(run, toy_data, tmp_path):
    cfg, command, last = run
    other_work = tmp_path / "other"
    other_cfg, other_command = planned(other_work)
    binarised(toy_data, Path(paths(other_cfg).bin), extra_tokens=8)
    checkpoint_of(other_cfg, other_command, last)
    problem = runner.checkpoint_otherwise(cfg, command)
    assert problem and "embedding" in problem, problem


def test_evaluation_averages_only_the_runs_own_checkpoints(run, capsys):
    """The evaluate step's door: a checkpoint of another model among those it would average is
    refused (exit 1, one line naming it), the run's own are averaged."""
    from deepnet_fairseq.recipes.evaluation import evaluate
    from deepnet_fairseq.storage.records import write_record

    cfg, command, last = run
    run_dir = paths(cfg).run_dir
    write_record(os.path.join(run_dir, "config.json"), "run-config",
                 {"step": "train", "dataset": "wmt17", "settings": {}, "command": command})
    own = last.parent / "checkpoint_1_10.pt"
    checkpoint_of(cfg, command, own)
    generate_args = [paths(cfg).bin, "--beam", "5"]
    evaluate._refuse_other_runs_checkpoints(run_dir, [str(own)], generate_args)  # no exit
    other_cfg, other_command = planned(os.path.dirname(os.path.dirname(paths(cfg).bin)),
                                       METHOD="post_ln")
    foreign = last.parent / "checkpoint_1_20.pt"
    checkpoint_of(other_cfg, other_command, foreign)
    with pytest.raises(SystemExit) as caught:
        evaluate._refuse_other_runs_checkpoints(run_dir, [str(own), str(foreign)], generate_args)
    assert caught.value.code == 1
    err = capsys.readouterr().err
    assert str(foreign) in err and "arch post_ln_transformer there" in err
