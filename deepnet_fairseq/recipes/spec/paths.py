"""Where a run's files live, from its settings alone: ``$WORK/data`` (raw text, sentencepiece,
binaries), ``$WORK/runs/RUN_NAME`` (checkpoints, logs, records, TensorBoard) and
``$WORK/results``. Every stage asks here, so the layout is one fact."""

import os
from dataclasses import dataclass

from .settings import Settings


@dataclass(frozen=True)
class RunPaths:
    work: str          # $WORK
    data_dir: str      # $WORK/data: what prepare writes
    raw: str           # $WORK/data/raw: the text, split, cleaned
    bin: str           # $WORK/data/bin: fairseq-preprocess's binaries and dictionaries
    runs_dir: str      # $WORK/runs: one folder per run
    run_dir: str       # $WORK/runs/RUN_NAME
    checkpoints: str   # $WORK/runs/RUN_NAME/checkpoints
    tensorboard: str   # $WORK/runs/RUN_NAME/tensorboard: fairseq's event files
    results: str       # $WORK/results: the sweep's table and plots


def paths(cfg: Settings) -> RunPaths:
    work = os.path.abspath(cfg.text.where.work)
    data = os.path.join(work, "data")
    run = os.path.join(work, "runs", cfg.text.run.run_name)
    return RunPaths(work=work, data_dir=data, raw=os.path.join(data, "raw"),
                    bin=os.path.join(data, "bin"), runs_dir=os.path.join(work, "runs"),
                    run_dir=run, checkpoints=os.path.join(run, "checkpoints"),
                    tensorboard=os.path.join(run, "tensorboard"),
                    results=os.path.join(work, "results"))
