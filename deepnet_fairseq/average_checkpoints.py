"""Average the parameters of several fairseq checkpoints (the paper averages the last ones).

    deepnet-average-checkpoints --inputs CKPT_DIR --num-update-checkpoints 5 --output avg.pt
    deepnet-average-checkpoints --inputs a.pt b.pt c.pt --output avg.pt

Checkpoints are read with torch's weights-only unpickler (``checkpoint_compat`` allowlists what
fairseq checkpoints hold). The output keeps everything of the newest input but ``model``, whose
floating-point tensors are averaged in float64 and cast back; it is written to a temporary file
and renamed, so an interrupted run never leaves a partial checkpoint behind.
"""

import argparse
import os
import re
import sys
import tempfile
from typing import Dict, List

import torch

from . import checkpoint_compat  # noqa: F401  (allowlists argparse.Namespace for torch.load)

_PATTERNS = {
    "epoch": re.compile(r"^checkpoint(\d+)\.pt$"),
    "update": re.compile(r"^checkpoint_\d+_(\d+)\.pt$"),
}


def last_checkpoints(directory: str, count: int, kind: str) -> List[str]:
    """The ``count`` newest epoch (checkpointN.pt) or update (checkpoint_E_U.pt) checkpoints."""
    pattern = _PATTERNS[kind]
    numbered = []
    for name in os.listdir(directory):
        match = pattern.match(name)
        if match:
            numbered.append((int(match.group(1)), os.path.join(directory, name)))
    if len(numbered) < count:
        raise ValueError(
            f"asked to average the last {count} {kind} checkpoints of {directory}, but it holds "
            f"{len(numbered)} ({pattern.pattern}); train longer, save more often "
            f"(--save-interval / --save-interval-updates), or ask for fewer."
        )
    return [path for _, path in sorted(numbered)[-count:]]


def average(paths: List[str]) -> Dict:
    """The newest checkpoint's state with ``model`` replaced by the mean of all models."""
    if not paths:
        raise ValueError("no checkpoints to average")
    sums: Dict[str, torch.Tensor] = {}
    state = None
    for path in paths:
        state = torch.load(path, map_location="cpu", weights_only=True)
        model = state["model"]
        if sums and set(model) != set(sums):
            raise ValueError(f"{path} has different parameters from {paths[0]}: not one model")
        for name, tensor in model.items():
            if tensor.is_floating_point():
                sums[name] = sums.get(name, 0) + tensor.double()
            else:  # integer buffers (e.g. version counters) are copied, not averaged
                sums[name] = tensor
    state["model"] = {
        name: (total / len(paths)).to(state["model"][name].dtype)
        if state["model"][name].is_floating_point()
        else total
        for name, total in sums.items()
    }
    return state


def save_atomically(state: Dict, output: str) -> None:
    directory = os.path.dirname(os.path.abspath(output))
    os.makedirs(directory, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=directory, prefix=".avg-", suffix=".pt")
    os.close(handle)
    try:
        torch.save(state, tmp)
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def cli_main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="deepnet-average-checkpoints",
        description="Average the parameters of fairseq checkpoints into one checkpoint.",
    )
    parser.add_argument("--inputs", nargs="+", required=True,
                        help="checkpoint files, or one directory with --num-*-checkpoints")
    parser.add_argument("--output", required=True, help="path of the averaged checkpoint")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--num-epoch-checkpoints", type=int,
                       help="average the last N checkpointN.pt of the --inputs directory")
    group.add_argument("--num-update-checkpoints", type=int,
                       help="average the last N checkpoint_E_U.pt of the --inputs directory")
    args = parser.parse_args(argv)

    count = args.num_epoch_checkpoints or args.num_update_checkpoints
    try:
        if count is not None:
            if len(args.inputs) != 1 or not os.path.isdir(args.inputs[0]):
                raise ValueError("--num-*-checkpoints needs --inputs to be one directory")
            kind = "epoch" if args.num_epoch_checkpoints else "update"
            paths = last_checkpoints(args.inputs[0], count, kind)
        else:
            paths = args.inputs
            missing = [p for p in paths if not os.path.isfile(p)]
            if missing:
                raise ValueError(f"no such checkpoint file(s): {', '.join(missing)}")
        print(f"averaging {len(paths)} checkpoints: {' '.join(paths)}", file=sys.stderr)
        save_atomically(average(paths), args.output)
    except ValueError as err:
        parser.error(str(err))
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    cli_main()
