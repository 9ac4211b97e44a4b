"""What a run's evaluation (``RUN/eval/eval.json``) scored, and whether that is still the run:
the one check every reader of an evaluation makes (the recipes' report, the Hugging Face model
card, ``recipes.reporting.curves --export``, the learning-rate, significance and quickstart
summaries), so that nothing derived from an evaluation presents the scores of checkpoints the
run no longer holds (trained further, or again with ``RETRY=1``, since it was evaluated).

``eval/purpose.json`` (``purpose``) records the checkpoint files the run held when it was
evaluated (name, size, modification time) and the evaluation's arguments; ``eval.json`` names
the checkpoints it averaged (``"checkpoints"``; evaluations before that field do not say)."""

import os
from typing import Optional, Tuple

from .fileio import RecordError
from .records import read_record

PURPOSE = "purpose.json"
"""What an evaluation is of (in ``eval/`` and ``eval.tmp/``): the checkpoints it read (name,
size, modification time) and its exact arguments (decoding settings, directions, references)."""


def purpose(run_dir: str, argv) -> dict:
    """The record of what an evaluation of RUN_DIR with ARGV evaluates: a result or a half-done
    evaluation of another is stale (redone), never reused."""
    checkpoints = os.path.join(run_dir, "checkpoints")
    files = sorted(n for n in os.listdir(checkpoints) if n.endswith(".pt")) \
        if os.path.isdir(checkpoints) else []
    stats = {n: os.stat(os.path.join(checkpoints, n)) for n in files}
    return {"checkpoints": [[n, st.st_size, st.st_mtime_ns] for n, st in stats.items()],
            "arguments": [str(a) for a in argv]}


def recorded_purpose(directory: str):
    """DIRECTORY's purpose record; None where it has none or one that cannot be read (then
    what it holds is stale: redone)."""
    try:
        return read_record(os.path.join(directory, PURPOSE), "purpose")
    except RecordError:
        return None


def stale_because(run_dir: str) -> Optional[str]:
    """Why RUN_DIR/eval is not the evaluation of the checkpoints RUN_DIR/checkpoints holds now,
    or None. A run without checkpoints (exported, or deleted to save space) or an evaluation
    without its purpose record cannot be checked: taken as it is."""
    recorded = recorded_purpose(os.path.join(run_dir, "eval"))
    now = purpose(run_dir, [])["checkpoints"]
    if not (recorded and now) or recorded.get("checkpoints") == now:
        return None
    return (f"{run_dir}/eval holds the evaluation of checkpoints the run no longer holds "
            "(trained since it was evaluated): evaluate the run again (its dataset's "
            "evaluate.sh, or the sweep) for its scores")


def current_evaluation(run_dir: str) -> Tuple[Optional[dict], Optional[str]]:
    """(the run's evaluation record, None), or (None, why it is stale: ``stale_because``), or
    (None, None) where the run has none. Read from ``RUN/eval/eval.json``, or from
    ``RUN/eval.json`` for a run as ``recipes.reporting.curves --export`` keeps it (checked when
    it was exported). A record that cannot be read is a ``RecordError`` naming it."""
    evaluation = read_record(os.path.join(run_dir, "eval", "eval.json"), "eval")
    if evaluation is None:
        return read_record(os.path.join(run_dir, "eval.json"), "eval"), None
    why = stale_because(run_dir)
    return (None, why) if why else (evaluation, None)
