"""``fairseq-train`` with three fairseq 0.12 limitations lifted; the recipes launch it in their
place only when one applies (2+ CPU processes, bf16, or fp16 on CPU):

    python -m deepnet_fairseq.fairseq_train_compat DATA [fairseq-train options]
    torchrun --nproc_per_node 2 -m deepnet_fairseq.fairseq_train_compat DATA --cpu \\
        --distributed-backend gloo --ddp-backend legacy_ddp --distributed-world-size 2 ...

1. **Several CPU processes under torchrun.** fairseq's ``_infer_torch_distributed_launch_init``
   (which reads torchrun's RANK / WORLD_SIZE) sets ``device_id = rank %
   torch.cuda.device_count()``, a division by zero without GPUs, so ``torchrun fairseq-train
   --cpu --distributed-world-size 2`` crashes before training (and without
   ``--distributed-world-size`` each process silently trains alone). Replaced by the same
   code minus the CUDA device id, only when started by torchrun with ``--cpu`` and no GPU
   visible. (torch's DDP also refuses fairseq's ``device_ids=[0]`` for a CPU model: use
   ``--ddp-backend legacy_ddp``, fairseq's own all-reduce, as the recipes do.)
2. **bf16 off TPUs.** fairseq's argparse front end turns ``--bf16`` into ``--tpu`` (options.py:
   ``if args.bf16: args.tpu = True``), so ``fairseq-train --bf16`` on a GPU or CPU tries to
   run on an XLA device. When ``--bf16`` is given without ``--tpu``, the flag is reset after
   parsing; fairseq's bf16 training path (bf16 model, fp32 master weights, no loss scaling)
   is otherwise unchanged.
3. **fp16 on CPU** (``--cpu`` with ``--fp16`` or ``--memory-efficient-fp16``, no GPU), so that
   fairseq's fp16 path -- ``FP16Optimizer`` flattened or not, ``MemoryEfficientFP16Optimizer``,
   the dynamic loss scaler and its overflow handling -- runs, and is tested, without a GPU.
   fairseq makes three CUDA-only calls on that path; exactly two things change, and only in a
   process where torch has no CUDA:

   * ``torch.cuda.current_device()`` returns ``None``: ``FP16Optimizer.build_fp32_params``
     keys its flat fp32 master copy by it, and later finds each parameter's slice under
     ``p.device.index``, which is ``None`` for a CPU tensor;
   * ``Tensor.cuda()`` returns the tensor itself: the trainer builds the grad norm of an
     overflowed (skipped) update as ``torch.tensor(0.0).cuda()`` and aggregates the grad
     norms of several processes through ``.cuda()``.

   The arithmetic is fairseq's own fp16 arithmetic, run by torch's CPU half-precision kernels.

And under torchrun (the recipes launch every torchrun run through this module), each worker
dies with torchrun: before it imports anything else (fairseq and torch take seconds, during
which torchrun may be killed) it asks Linux for SIGTERM when its parent, torchrun's agent, dies,
and ends at once if that parent has died already (``processes.die_with_launcher``: the recipes'
launcher is then no longer among its ancestors). So a SIGKILL of torchrun alone (which cannot
pass anything on) leaves no worker training or waiting in the rendezvous. Everything else is
fairseq-train's own ``cli_main``.
"""

import os
import sys

# a worker torchrun started (on its node, a child of torchrun, which is the launcher's child;
# srun's tasks are not: slurmstepd starts them, on every node)
if __name__ == "__main__" and "TORCHELASTIC_RUN_ID" in os.environ:
    from .processes import die_with_launcher

    die_with_launcher()  # first: see the docstring's last paragraph

from .storage.fileio import one_line_os_errors  # noqa: E402  (after the parent's identity)


def _cpu_launch_init(cfg) -> None:
    """fairseq's torchrun init without the CUDA device id (there is none to pick)."""
    cfg.distributed_init_method = "env://"
    cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
    cfg.distributed_rank = int(os.environ["RANK"])
    cfg.device_id = 0  # unused with --cpu; fairseq only passes it to torch.cuda.set_device
    cfg.distributed_no_spawn = True  # torchrun created the processes


def install(argv=None) -> list:
    """Apply the fixes that concern ``argv``; return the names of those applied."""
    import torch
    from fairseq import options
    from fairseq.distributed import utils as distributed_utils

    argv = sys.argv[1:] if argv is None else argv
    applied = []
    if ("RANK" in os.environ and "WORLD_SIZE" in os.environ and "--cpu" in argv
            and torch.cuda.device_count() == 0):
        distributed_utils._infer_torch_distributed_launch_init = _cpu_launch_init
        applied.append("cpu-torchrun")
    if "--bf16" in argv and "--tpu" not in argv:
        parse = options.parse_args_and_arch

        def parse_without_tpu(*args, **kwargs):
            parsed = parse(*args, **kwargs)
            parsed.tpu = False
            return parsed

        options.parse_args_and_arch = parse_without_tpu
        applied.append("bf16-not-tpu")
    if ("--cpu" in argv and ("--fp16" in argv or "--memory-efficient-fp16" in argv)
            and not torch.cuda.is_available()):
        lift_cuda_calls_of_fp16()
        applied.append("fp16-on-cpu")
    return applied


def lift_cuda_calls_of_fp16() -> None:
    """Item 3 of the module docstring, in a process without CUDA (refused otherwise)."""
    import torch

    if torch.cuda.is_available():
        raise RuntimeError("fp16 on CPU is for machines without CUDA; on a GPU use fairseq's "
                           "own fp16 path")
    torch.cuda.current_device = lambda: None
    torch.Tensor.cuda = lambda self, *args, **kwargs: self


@one_line_os_errors
def main() -> None:
    from fairseq_cli.train import cli_main

    from . import register

    register()  # fairseq skips a --user-dir whose package is already imported
    install()
    sys.argv[0] = "fairseq-train"
    cli_main()


if __name__ == "__main__":
    main()
