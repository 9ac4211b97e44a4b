"""Several fairseq-train runs in one torchrun launch (tests/slow/test_distributed.py).

    torchrun --nproc_per_node 2 tests/distributed_driver.py RUNS.json   (or 1, or more)

RUNS.json is a list of {"name", "log", "argv"}, and optionally "steps", "restored" and "sharding".
Each run is fairseq-train's own ``cli_main`` (through ``deepnet_fairseq.fairseq_train_compat``,
as the recipes launch CPU processes) with ``sys.argv`` set to ``argv``; the process group
torchrun's environment set up for the first run is reused by the next (fairseq's
``distributed_init`` accepts an initialised one). This spends torch/fairseq's import time (~15 s
a launch on a small CPU) once for all the runs.

Rank 0 copies each run's log (fairseq logs on rank 0 only) to ``log``; every rank writes
``log + ".rank<r>.json"`` with the rank and world size it finished the run in, and whether
fairscale had been imported by then (and from where). An exception ends the launch (torchrun
then stops the other ranks), naming the run that failed.

With "steps", every rank saves to ``steps + ".rank<r>.pt"`` the first update's step of each
model parameter (``{name: after - before}``), of each fp32 master copy when fairseq's
FP16Optimizer keeps one per parameter (--fp16-no-flatten-grads), the classes of the
optimizer's layers, and the names of the tagged LayerNorm parameters (layernorm_lr.py) whose
optimizer state this rank's shard holds (ZeRO-1).

With "restored", every rank saves to ``restored + ".rank<r>.pt"`` the optimizer state it holds
when the run's first update starts (after a resume: what it loaded), this rank's shard under
ZeRO-1: ``{index of the parameter among the trainer's trainable ones, the key of a
checkpoint's optimizer state: {"exp_avg", "exp_avg_sq", "step"}}``.

With "sharding": "fairscale", --zero-sharding os runs on fairseq's own fairscale OSS instead of
the plugin's torch ZeRO (deepnet_fairseq/nn/zero.py), to compare the two. fairscale is not part
of the install: such a launch needs the reference copy on its PYTHONPATH
(tests/reference_fairscale.py).
"""

import itertools
import json
import logging
import os
import sys

import torch
import torch.distributed as dist

from deepnet_fairseq import fairseq_train_compat
from deepnet_fairseq.nn import layernorm_lr


def rank_and_world():
    # one process (--nproc_per_node 1): fairseq trains without a process group
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def record_first_update(path: str):
    """Wrap fairseq's ``Trainer.train_step`` to save the first update's steps (module
    docstring); returns a function that undoes the wrapping."""
    from fairseq.trainer import Trainer

    original = Trainer.train_step
    state = {}

    def train_step(self, samples, *args, **kwargs):
        if self.get_num_updates() == 0:  # again after an overflowed (skipped) fp16 update
            state["before"] = {n: p.detach().clone() for n, p in self.get_model().named_parameters()}
        result = original(self, samples, *args, **kwargs)
        if self.get_num_updates() == 1 and "saved" not in state:
            state["saved"] = True
            save_steps(self, state["before"], f"{path}.rank{dist.get_rank()}.pt")
        return result

    Trainer.train_step = train_step
    return lambda: setattr(Trainer, "train_step", original)


def save_steps(trainer, before, path):
    params = dict(trainer.get_model().named_parameters())
    record = {"steps": {n: p.detach() - before[n] for n, p in params.items()}, "masters": None}
    names = {id(p): n for n, p in params.items()}
    masters = getattr(trainer.optimizer, "fp32_params", None)
    if isinstance(masters, list):  # FP16Optimizer: one fp32 master per trainable parameter,
        trainable = [n for n, p in params.items() if p.requires_grad]  # in the trainer's order
        record["masters"] = {n: m.detach() - before[n].float() for n, m in zip(trainable, masters)}
        names = {id(m): n for n, m in zip(trainable, masters)}
    torch_optimizer = trainer.optimizer.optimizer  # what fairseq's wrapper steps
    record["optimizers"] = [type(trainer.optimizer).__name__, type(torch_optimizer).__name__]
    if hasattr(torch_optimizer, "optim"):  # ZeRO-1 (torch's or fairscale's): this rank's shard
        record["optimizers"].append(type(torch_optimizer.optim).__name__)
        own = torch_optimizer.optim.param_groups
        record["own_tagged"] = sorted(names[id(p)] for group in own for p in group["params"]
                                      if layernorm_lr.multiplier_of(p) is not None)
    torch.save(record, path)


def record_restored_state(path: str):
    """Wrap fairseq's ``Trainer.train_step`` to save, at the run's first update, the optimizer
    state this rank holds (module docstring); returns a function that undoes the wrapping."""
    from fairseq.trainer import Trainer

    original = Trainer.train_step
    state = {}

    def train_step(self, samples, *args, **kwargs):
        if "saved" not in state:
            state["saved"] = True
            save_optimizer_state(self, f"{path}.rank{rank_and_world()[0]}.pt")
        return original(self, samples, *args, **kwargs)

    Trainer.train_step = train_step
    return lambda: setattr(Trainer, "train_step", original)


def save_optimizer_state(trainer, path):
    # the trainable parameters in the order fairseq's trainer gives them to the optimizer
    # (Trainer._build_optimizer), that of the indices of a checkpoint's optimizer state
    params = [p for p in itertools.chain(trainer.get_model().parameters(),
                                         trainer.get_criterion().parameters()) if p.requires_grad]
    index = {id(p): i for i, p in enumerate(params)}
    torch_optimizer = trainer.optimizer.optimizer
    own = getattr(torch_optimizer, "optim", torch_optimizer)  # ZeRO-1: this rank's shard's
    shard = {index[id(p)]: {key: value.clone() if torch.is_tensor(value) else value
                            for key, value in own.state[p].items()}
             for group in own.param_groups for p in group["params"] if p in own.state}
    torch.save({"num_updates": trainer.get_num_updates(), "world_size": rank_and_world()[1],
                "parameters": len(params), "owned": sum(len(g["params"]) for g in own.param_groups),
                "optimizers": [type(trainer.optimizer).__name__, type(torch_optimizer).__name__],
                "state": shard}, path)


def shard_with_fairscale():
    """Make fairseq's trainer shard with fairseq's own ``shard_`` (fairscale's OSS) instead of
    the plugin's (torch's ZeRO, deepnet_fairseq/nn/zero.py); returns a function that undoes it."""
    from fairseq import optim
    from fairseq.trainer import Trainer

    try:
        import fairscale  # noqa: F401
    except ImportError as error:  # fairseq's own message would say to install it
        raise RuntimeError("a run with 'sharding': 'fairscale' needs the reference fairscale on "
                           "PYTHONPATH (tests/reference_fairscale.py); it is not part of the "
                           "install") from error
    original = Trainer._build_optimizer

    def build_optimizer(self):
        ours, optim.shard_ = optim.shard_, optim.shard.shard_
        try:
            original(self)
        finally:
            optim.shard_ = ours

    Trainer._build_optimizer = build_optimizer
    return lambda: setattr(Trainer, "_build_optimizer", original)


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
            # as fairseq's distributed_init sets it on rank 0; one process (no process group) is
            # left at the root's WARNING, fairseq's own basicConfig having found our handler
            root.setLevel(logging.INFO)
        sys.argv = ["fairseq-train", *run["argv"]]
        unwrap = [record_first_update(run["steps"])] if run.get("steps") else []
        if run.get("restored"):
            unwrap.append(record_restored_state(run["restored"]))
        if run.get("sharding") == "fairscale":
            unwrap.append(shard_with_fairscale())
        try:
            fairseq_train_compat.main()
        except BaseException:
            print(f"distributed_driver: run {run['name']!r} failed", file=sys.stderr, flush=True)
            raise
        finally:
            root.removeHandler(handler)
            handler.close()
            for undo in reversed(unwrap):  # the last wrapping first
                undo()
        rank, world = rank_and_world()
        with open(f"{run['log']}.rank{rank}.json", "w") as handle:
            json.dump({"rank": rank, "world_size": world,
                       "fairscale_imported": "fairscale" in sys.modules,
                       "fairscale_file": getattr(sys.modules.get("fairscale"), "__file__", None)},
                      handle)


if __name__ == "__main__":
    main(sys.argv[1])
