"""The recipes' public API, over resolved settings (``spec.settings.resolve``): each step of a
run as train.sh, evaluate.sh and the others run it, for the command line (``__main__``), the
quickstart, the depth study and the GPU check alike::

    cfg = resolve("wmt17", os.environ, repo)
    prepare(cfg); train(cfg); evaluate(cfg)      # or sweep(cfg) for every run of a config

Each returns the step's exit status (0 ok, 1 failed, 3 diverged, 4 source-blind, 128 + signal
interrupted) and raises ``SettingError`` for what it refuses before it starts. ENV is the
environment the step's processes get (the caller's, by default); a dry run prints and runs
nothing."""

import os
from typing import List, Mapping, Optional

from ...processes import signals_interrupt
from ..data.prepare import prepare as _prepare
from ..evaluation.step import evaluate as _evaluate
from ..run.commands import evaluate_command, method_args, task_args, train_command
from ..run.layout import plan_layout
from ..run.runner import train as _train
from ..spec.settings import Settings
from .sweeps import sweep as _sweep


def prepare(cfg: Settings, dry_run: bool = False, env: Optional[Mapping[str, str]] = None) -> int:
    """Raw text, cleaning, sentencepiece, binaries in ``$WORK/data`` (nothing in a dry run).
    ENV is taken for one signature across the steps; prepare's tools run in this process's
    environment, what they read of it being the settings CFG already holds."""
    if dry_run:
        return 0
    with signals_interrupt():  # a killed step removes its temporaries
        return _prepare(cfg)


def train(cfg: Settings, dry_run: bool = False, env: Optional[Mapping[str, str]] = None) -> int:
    """Train (or resume) the run ``$WORK/runs/RUN_NAME``."""
    return _train(cfg, os.environ if env is None else env, dry_run)


def evaluate(cfg: Settings, dry_run: bool = False, env: Optional[Mapping[str, str]] = None) -> int:
    """Average, decode and score the trained run."""
    return _evaluate(cfg, os.environ if env is None else env, dry_run)


def sweep(cfg: Settings, dry_run: bool = False, env: Optional[Mapping[str, str]] = None) -> int:
    """Train and evaluate every run of the config, then its results table."""
    return _sweep(cfg, os.environ if env is None else env, dry_run)


def planned_train_command(cfg: Settings, env: Optional[Mapping[str, str]] = None) -> List[str]:
    """The fairseq-train command the train step would run for CFG (its layout planned for ENV),
    as its dry run prints it; nothing runs."""
    env = os.environ if env is None else env
    return train_command(cfg, plan_layout(cfg, env), method_args(cfg), task_args(cfg, True))


def planned_evaluate_command(cfg: Settings) -> List[str]:
    """The evaluation command the evaluate step would run for CFG, as its dry run prints it."""
    return evaluate_command(cfg, dry_run=True)


STEPS = {"prepare": prepare, "train": train, "evaluate": evaluate, "sweep": sweep}
