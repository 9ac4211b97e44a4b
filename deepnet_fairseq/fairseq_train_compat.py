"""Run ``fairseq-train`` as one of several CPU processes started by ``torchrun`` (gloo backend).

    torchrun --nproc_per_node 2 -m deepnet_fairseq.cpu_distributed DATA --cpu \\
        --distributed-backend gloo --distributed-world-size 2 --user-dir ... [fairseq-train options]

Why this exists: fairseq 0.12's ``_infer_torch_distributed_launch_init`` (the code that reads
torchrun's RANK / WORLD_SIZE variables) sets ``device_id = rank % torch.cuda.device_count()``,
a division by zero on a machine without GPUs, so ``torchrun fairseq-train --cpu
--distributed-world-size 2`` crashes before training starts (and without
``--distributed-world-size`` each process silently trains alone). This runner replaces that
one function with the same logic minus the CUDA device id, then calls fairseq-train's own
``cli_main``: everything after it (gloo process group, DDP gradient all-reduce, checkpointing
on rank 0) is fairseq's unchanged code.

It changes nothing unless all of these hold: the process was started by torchrun (RANK and
WORLD_SIZE set), ``--cpu`` is among the options and torch sees no CUDA device. On a GPU
machine the recipes launch ``fairseq-train`` itself and this module is not involved.
"""

import os
import sys


def _cpu_launch_init(cfg) -> None:
    """fairseq's torchrun init without the CUDA device id (there is none to pick)."""
    cfg.distributed_init_method = "env://"
    cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
    cfg.distributed_rank = int(os.environ["RANK"])
    cfg.device_id = 0  # unused with --cpu; fairseq only passes it to torch.cuda.set_device
    cfg.distributed_no_spawn = True  # torchrun created the processes


def install(argv=None) -> bool:
    """Patch fairseq when running under torchrun on CPU; return whether it was patched."""
    import torch
    from fairseq.distributed import utils as distributed_utils

    argv = sys.argv[1:] if argv is None else argv
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return False
    if "--cpu" not in argv or torch.cuda.device_count() > 0:
        return False
    distributed_utils._infer_torch_distributed_launch_init = _cpu_launch_init
    return True


def main() -> None:
    from fairseq_cli.train import cli_main

    install()
    sys.argv[0] = "fairseq-train"
    cli_main()


if __name__ == "__main__":
    main()
