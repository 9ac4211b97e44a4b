"""An evaluation's scores in the run's TensorBoard, beside fairseq's ``train`` and ``valid``
curves: sacreBLEU and chrF of each direction, and their averages, as scalars of
``RUN/tensorboard/evaluate`` at the update the newest evaluated checkpoint was saved at
(``tensorboard --logdir $DEEPNET_WORK/runs``). Written through tensorboardX, as fairseq writes
its own; an evaluation done again adds its points at the same update (TensorBoard shows the
newest)."""

import os
from typing import Dict, List

from ...storage.directories import make_dirs

EVENTS = "evaluate"  # the folder under RUN/tensorboard: fairseq names its own by split


def scalars(summary: Dict) -> Dict[str, float]:
    """The evaluation summary (eval.json) as TensorBoard tags and values."""
    found = {}
    for direction, scores in summary["directions"].items():
        for metric in ("sacrebleu", "chrf"):
            if metric in scores:
                found[f"{metric}/{direction}"] = scores[metric]
    for metric in ("sacrebleu", "chrf"):
        if f"{metric}_avg" in summary:
            found[f"{metric}/average"] = summary[f"{metric}_avg"]
    return found


def update_of(checkpoints: List[str]) -> int:
    """The update the newest of CHECKPOINTS (paths) was saved at, as fairseq records it."""
    from ...storage.checkpoint_io import read_checkpoint

    newest = max(checkpoints, key=os.path.getmtime)
    history = read_checkpoint(newest, mmap=True).get("optimizer_history") or [{}]
    return int(history[-1].get("num_updates", 0))


def events_folder(tensorboard_dir: str) -> str:
    """TENSORBOARD_DIR/evaluate, made and marked by the file layer (``make_dirs``): a link
    planted on the way is refused, not followed by the writer."""
    return make_dirs(os.path.join(tensorboard_dir, EVENTS))


def log_scores(tensorboard_dir: str, summary: Dict, update: int) -> str:
    """Write SUMMARY's scalars at UPDATE into TENSORBOARD_DIR/evaluate; the folder written."""
    from tensorboardX import SummaryWriter

    folder = events_folder(tensorboard_dir)
    writer = SummaryWriter(folder)
    try:
        for tag, value in scalars(summary).items():
            writer.add_scalar(tag, value, update)
    finally:
        writer.close()
    return folder
