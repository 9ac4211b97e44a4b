"""Several fairseq-train runs in one torchrun launch (tests/test_distributed.py).

    torchrun --nproc_per_node 2 tests/distributed_driver.py RUNS.json

RUNS.json is a list of {"name", "log", "argv"}. Each run is fairseq-train's own ``cli_main``
(through ``deepnet_fairseq.fairseq_train_compat``, as the recipes launch CPU processes) with
``sys.argv`` set to ``argv``; the process group torchrun's environment set up for the first
run is reused by the next (fairseq's ``distributed_init`` accepts an initialised one). This
spends torch/fairseq's import time (~15 s a launch on a small CPU) once for all the runs.

Rank 0 copies each run's log (fairseq logs on rank 0 only) to ``log``; every rank writes
``log + ".rank<r>.json"`` with the rank and world size it finished the run in. An exception
ends the launch (torchrun then stops the other rank), naming the run that failed.
"""

import json
import logging
import os
import sys

import torch.distributed as dist

from deepnet_fairseq import fairseq_train_compat


def main(spec: str) -> None:
    with open(spec) as handle:
        runs = json.load(handle)
    rank = int(os.environ["RANK"])  # torchrun's; the process group starts in the first run
    root = logging.getLogger()
    for run in runs:
        handler = logging.FileHandler(run["log"], delay=True)  # opened at its first record
        handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
        if rank == 0:
            root.addHandler(handler)
        sys.argv = ["fairseq-train", *run["argv"]]
        try:
            fairseq_train_compat.main()
        except BaseException:
            print(f"distributed_driver: run {run['name']!r} failed", file=sys.stderr, flush=True)
            raise
        finally:
            root.removeHandler(handler)
            handler.close()
        with open(f"{run['log']}.rank{dist.get_rank()}.json", "w") as handle:
            json.dump({"rank": dist.get_rank(), "world_size": dist.get_world_size()}, handle)


if __name__ == "__main__":
    main(sys.argv[1])
