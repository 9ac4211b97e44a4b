"""Where a run's files live, from its settings alone: ``$WORK/data`` (raw text, sentencepiece,
binaries), ``$WORK/runs/RUN_NAME`` (checkpoints, logs, records, TensorBoard) and
``$WORK/results``. Every stage asks here, so the layout is one fact."""

import os

from .settings import Settings


def paths(cfg: Settings) -> dict:
    work = os.path.abspath(cfg.text.where.work)
    data = os.path.join(work, "data")
    run = os.path.join(work, "runs", cfg.text.run.run_name)
    return {"WORK": work, "DATA_DIR": data, "BIN": os.path.join(data, "bin"),
            "RAW": os.path.join(data, "raw"), "RUNS_DIR": os.path.join(work, "runs"),
            "RUN_DIR": run, "CHECKPOINTS": os.path.join(run, "checkpoints"),
            "TENSORBOARD": os.path.join(run, "tensorboard"),
            "RESULTS": os.path.join(work, "results")}
