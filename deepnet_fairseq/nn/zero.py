"""ZeRO-1 (``--zero-sharding os``) on torch's own ``ZeroRedundancyOptimizer`` instead of
fairscale's OSS (unmaintained, tested up to torch 1.11).

fairseq 0.12's trainer shards the optimizer state in one call, ``fairseq.optim.shard_(optimizer,
group)`` (fairseq/optim/shard.py, from ``Trainer._build_optimizer``), which wraps the torch
optimizer inside fairseq's (``optimizer.optimizer``: FairseqAdam's Adam, or the fp32 one of
FP16Optimizer) in OSS, built from that optimizer's parameter groups, class and settings.
``install()``, run when the plugin is registered, replaces that one function; everything around
it stays fairseq's own: the trainer, its checkpoint code, the fp16 wrappers. What they expect from
the wrapper, and how torch's optimizer provides it:

* saving: every rank calls ``consolidate_state_dict()`` (checkpoint_utils.save_checkpoint), then
  rank 0's ``state_dict()`` is the whole optimizer state in torch's layout, keyed by the
  parameter's index over all groups -- exactly what the unsharded optimizer saves, so a
  checkpoint on disk is the same with and without ZeRO, and loads on any number of processes;
* loading: rank 0 reads the checkpoint and sends its optimizer state to the others
  (``broadcast_global_state_dict``, as fairseq's OSS subclass does); ``load_state_dict`` of
  that whole state keeps this rank's share (torch's ZeRO does);
* fairseq's wrappers ask the torch optimizer what it supports (``supports_memory_efficient_fp16``
  and the other ``supports_*``): the shard's optimizer answers;
* ``disable_mem_eff_fp16_loading_hack``: MemoryEfficientFP16Optimizer, after loading, copies the
  whole saved fp32 state onto ``optimizer.state`` to undo torch's cast to the fp16 parameters'
  dtype. Here that would give the wrapper a second, whole copy on every rank; torch's ZeRO loads
  the shard's state without casting (``_recursive_copy_to_device`` moves, keeps the dtype).

The step is the same computation as OSS's: each rank steps its share of the parameters with the
same optimizer class, then every share is broadcast from its owner. Both split the parameters
tensor by tensor (greedily; torch largest first, so the shares differ), and every optimizer
fairseq allows with ZeRO steps each tensor from its own gradient and state (fairseq refuses flat
fp16 parameters with ZeRO), so the updates are the same (tests/slow/test_zero.py compares them
with fairscale's, update by update). The LayerNorm lr multiplier's step hook works through it as
through OSS (layernorm_lr.py: the outer optimizer's step claims the tagged parameters).

Two differences from torch's defaults, for memory: the parameters are broadcast as one bucket
per rank (``parameters_as_bucket_view``, as OSS does: one collective per rank per update rather
than one per tensor, thousands on a deep model), and the wrapper keeps neither the consolidated
state after rank 0 has saved it nor, after loading, a copy of this rank's share in its own
``state`` (torch's base ``load_state_dict`` would cast one there; only the shard's optimizer
steps).

One process (no process group: a resume on one GPU with the same flags) has nothing to shard:
the optimizer is left as it is, and saves and loads as without ZeRO.
"""

import functools
import logging

import torch.distributed as dist

logger = logging.getLogger(__name__)


@functools.cache
def zero_optimizer_class():
    """``FairseqZeRO``, defined on first use: importing ``torch.distributed.optim`` takes about a
    second (it imports FSDP, DTensor and sympy), which every process that registers the plugin
    would otherwise pay, the many that never shard included."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    class FairseqZeRO(ZeroRedundancyOptimizer):
        """torch's ZeRO with what fairseq's trainer and fp16 wrappers use (module docstring)."""

        disable_mem_eff_fp16_loading_hack = True

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.register_load_state_dict_pre_hook(_only_the_groups)

        def __getattr__(self, name):
            optim = self.__dict__.get("optim")
            if name.startswith("supports") and optim is not None and hasattr(optim, name):
                return getattr(optim, name)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

        def broadcast_global_state_dict(self, state_dict):
            """Rank 0's ``state_dict`` (the checkpoint's optimizer state) on every rank."""
            from fairseq.distributed import utils as distributed_utils

            return distributed_utils.broadcast_object(state_dict, src_rank=0,
                                                      group=self.process_group)

        def state_dict(self):
            try:
                return super().state_dict()
            finally:  # the whole state, gathered for this save: not kept until the next one
                self._all_state_dicts = []

    return FairseqZeRO


def _only_the_groups(optimizer, state_dict):
    """Before torch's base ``Optimizer.load_state_dict`` (which ZeRO's calls after loading the
    shard's optimizer): its groups, not the per-parameter state, which only the shard's
    optimizer holds (module docstring)."""
    return {**state_dict, "state": {}}


def shard_(optimizer, group) -> None:
    """``fairseq.optim.shard_`` on torch's ZeRO: wrap, in place, the torch optimizer of fairseq's
    ``optimizer`` so that it keeps and steps only this rank's share of ``group``."""
    if group is None and not (dist.is_available() and dist.is_initialized()):
        logger.info("--zero-sharding os with one process: nothing to shard")
        return
    torch_optimizer = optimizer.optimizer
    optimizer.optimizer = zero_optimizer_class()(
        torch_optimizer.param_groups, type(torch_optimizer), process_group=group,
        parameters_as_bucket_view=True, **optimizer.optimizer_config)
    logger.info(f"ZeRO-1: torch's ZeroRedundancyOptimizer shards "
                f"{type(torch_optimizer).__name__}'s state over "
                f"{optimizer.optimizer.world_size} processes")


def install() -> None:
    """Make fairseq's trainer shard with torch's ZeRO (it calls ``fairseq.optim.shard_``;
    fairseq's own, fairscale's, stays at ``fairseq.optim.shard.shard_``)."""
    from fairseq import optim

    optim.shard_ = shard_
