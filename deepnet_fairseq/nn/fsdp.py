"""Full sharding (``--ddp-backend fully_sharded``) on torch's FSDP2 (``fully_shard``) instead of
fairscale's FullyShardedDataParallel: parameters, gradients and optimizer state divided over the
processes, one layer's parameters gathered whole at a time, in fp32, fp16 and bf16.

fairseq 0.12's ``fully_sharded`` backend is fairscale's FSDP (unmaintained; its trainer refuses
``--bf16`` with it, imports fairscale, and flattens parameters). ``install()``, run when the plugin
is registered, makes that backend name mean torch's FSDP2, as ``nn/zero.py`` makes
``--zero-sharding os`` mean torch's ZeRO. fairseq's trainer then runs its ordinary data-parallel
path (the one it takes for ``legacy_ddp``): it casts the model to fp16/bf16, builds its own
optimizer wrappers (FairseqAdam, FP16Optimizer, MemoryEfficientFP16Optimizer), clips, steps, and
saves and loads checkpoints on rank 0. What changes, each through one fairseq hook:

* ``Trainer.is_fsdp`` is False: fairseq's fairscale branches (its import, the bf16 refusal, the
  sharded-state checkpoints) never run; ``fairseq_cli.train.fsdp_enable_wrap`` builds the model
  without fairscale's wrapping context.
* ``fairseq.models.DistributedFairseqModel`` (the trainer's model wrapper): for
  ``fully_sharded`` the model gets ``fully_shard`` on each layer (every module of its outermost
  ``nn.ModuleList``s: the encoder's and decoder's layers) and then on the whole model (the
  embeddings, the output projection, the final LayerNorms: one more group), on a 1-D device mesh
  of fairseq's data-parallel group, and is wrapped in ``FullyShardedModel``. FSDP2 all-gathers a
  layer's parameters before its forward and again before its backward, frees them after each
  (``--no-reshard-after-forward`` keeps them from forward to backward), and reduce-scatters (a
  mean over the processes, as fairseq's all-reduce) each layer's gradients in backward.
* fairseq's optimizer sees plain tensors, not DTensors: ``FullyShardedModel.parameters()`` are
  this process's shards (``nn.Parameter`` aliases of FSDP2's local shard storage, tagged as the
  whole parameters were: ``optim_overrides``, ``expert``), and ``all_reduce_grads()``, which the
  trainer calls once per update after the backward passes, points their ``.grad`` at FSDP2's
  reduce-scattered gradient shards (the gradients of several ``--update-freq`` batches are
  summed there first). So every fairseq optimizer wrapper, fused Adam kernels and the
  LayerNorm lr hook (``layernorm_lr.py``) run unchanged, on 1/N of every tensor: fp32 masters
  (``--fp16-no-flatten-grads``) and Adam moments exist for the shard only. Only pointwise
  optimizers give the unsharded run's steps (Adam, SGD, ...: fairseq's ``supports_flat_params``,
  the condition it sets for fairscale's FSDP too); fp16's flat master copy is refused (as with
  ZeRO): each parameter needs its own master.
* in eval mode (validation) the whole model is gathered on every process and stays so until
  training resumes: fairseq's generation (``--eval-bleu``) calls the encoder, the decoder and
  their layers directly, a different number of times on each process, where per-layer
  all-gathers would wait for each other forever; it costs the whole weights (2 bytes a parameter
  in fp16/bf16) on each device during validation.
* ``Trainer.clip_grad_norm`` aggregates the norm over the processes (the sum of the shards'
  squared norms), as fairseq does for its own FSDP; every process gets the same norm.
* ``Trainer._build_optimizer``: the torch optimizer inside fairseq's wrapper becomes a
  ``FullStateOptimizer`` (its class is extended in place, the object and its state stay), whose
  ``state_dict()`` is the whole optimizer state in the unsharded layout and whose
  ``load_state_dict`` takes that whole state and keeps this process's share.
* ``Trainer.consolidate_optimizer`` (called on every process before a save) also gathers the
  model's weights whole, to CPU, one tensor at a time, on rank 0, the only process that saves.

So a checkpoint on disk is the unsharded one (the same keys, shapes, dtypes and optimizer
layout, ``last_optimizer_state`` keyed by parameter index), and loads on any number of processes
with or without sharding: fairseq's rank 0 reads it and broadcasts it, and each process keeps its
share of the weights and of the optimizer state.

One process (no process group) has nothing to shard: fairseq does not wrap the model, and it
trains and saves as without sharding.

Not supported (an error says so): ``--cpu-offload``, ``--use-sharded-state``,
``--zero-sharding os`` (the optimizer state is sharded already), fp16/bf16 with flattened
master weights (add ``--fp16-no-flatten-grads`` or use ``--memory-efficient-fp16``), non-pointwise
optimizers, ``--store-ema``.
"""

import contextlib
import functools
import logging
from typing import Dict, List, Optional

import torch
import torch.distributed as dist
import torch.nn as nn

logger = logging.getLogger(__name__)

BACKEND = "fully_sharded"
COPIED_ATTRIBUTES = ("optim_overrides", "expert", "base_expert", "param_group")
"""Attributes fairseq and the plugin tag parameters with, copied to the shards' parameters."""


# --- the model -------------------------------------------------------------------------------


def layers_of(model: nn.Module) -> List[nn.Module]:
    """The modules that get their own FSDP2 group: the members of every outermost
    ``nn.ModuleList`` (the stacks' layers) that have parameters."""
    found, inside = [], set()
    for name, module in model.named_modules():
        if any(name.startswith(prefix) for prefix in inside):
            continue
        if isinstance(module, nn.ModuleList):
            inside.add(name + ".")
            found.extend(m for m in module if any(True for _ in m.parameters()))
    return found


def _local(tensor):
    """This process's shard of a DTensor (the tensor itself otherwise)."""
    return tensor._local_tensor if hasattr(tensor, "_local_tensor") else tensor


def _gather(dtensor, local: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The whole tensor of ``dtensor`` (or of ``local``, a tensor sharded as ``dtensor`` is),
    gathered on every process; a collective."""
    from torch.distributed.tensor import DTensor

    if local is not None:
        dtensor = DTensor.from_local(local, dtensor.device_mesh, dtensor.placements,
                                     shape=dtensor.shape, stride=dtensor.stride(),
                                     run_check=False)
    return dtensor.full_tensor()


def _shard_of(whole: torch.Tensor, dtensor) -> torch.Tensor:
    """This process's part of ``whole`` (a tensor of ``dtensor``'s shape), as FSDP2 divides it
    (dimension 0 in ``torch.chunk``'s parts, empty past the last), on ``dtensor``'s device."""
    mesh = dtensor.device_mesh
    rank, size = mesh.get_local_rank(), mesh.size()
    parts = torch.chunk(whole, size, dim=0)
    local = _local(dtensor)
    part = parts[rank] if rank < len(parts) else whole.new_empty(local.shape)
    if part.shape != local.shape:
        raise ValueError(f"a tensor of shape {tuple(whole.shape)} divides into a part of "
                         f"{tuple(part.shape)} here, FSDP2's shard is {tuple(local.shape)}")
    return part.to(local.device)


class FullyShardedModel(nn.Module):
    """The trainer's model under FSDP2: forwards to the sharded model; its ``parameters()`` are
    this process's shards, its state dict the whole model's (module docstring). In eval mode
    (validation) every group stays gathered (``_to_whole``)."""

    def __init__(self, module: nn.Module, groups: List[nn.Module], reshard_layers: bool,
                 shards: Dict[str, nn.Parameter]):
        super().__init__()
        self.module = module
        # kept outside nn.Module's registries (no parameters or submodules of the wrapper):
        # the FSDP2 modules (the layers, then the root), name -> FSDP2's DTensor parameter
        # (every name of a shared one) and name -> this process's shard as a parameter
        self.__dict__["_groups"] = groups
        self.__dict__["_reshard_layers"] = reshard_layers
        self.__dict__["_sharded"] = dict(module.named_parameters(remove_duplicate=False))
        self.__dict__["_shards"] = shards
        self.__dict__["_consolidated"] = None
        self.__dict__["_whole"] = False

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def train(self, mode: bool = True):
        """Training: one layer gathered at a time. Evaluation: the whole model gathered (the
        validation's generation calls the encoder, the decoder and their layers directly, a
        different number of times on each process, which per-layer all-gathers would hang on);
        on every process alike, as fairseq switches modes."""
        super().train(mode)
        if mode and self._whole:
            for group in self._groups:
                group.set_reshard_after_forward(
                    self._reshard_layers if group is not self.module else False, recurse=False)
                group.reshard()
            self.__dict__["_whole"] = False
        elif not mode and not self._whole:
            self._to_whole()
        return self

    def _to_whole(self):
        for group in self._groups:
            group.set_reshard_after_forward(False, recurse=False)
            group.unshard()
        self.__dict__["_whole"] = True

    def _dtensors(self):
        """name -> the FSDP2 parameter (a DTensor), shared ones once (the first name)."""
        return {name: self._sharded[name] for name in self._shards}

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        for name, shard in self._shards.items():
            if _local(self._sharded[name]).data_ptr() != shard.data_ptr() and shard.numel():
                raise RuntimeError(f"FSDP2 moved the shard of {name}")
            yield prefix + name, shard

    def parameters(self, recurse=True):
        for _, p in self.named_parameters():
            yield p

    def all_reduce_grads(self):
        """The trainer's all-reduce, after the update's backward passes: FSDP2 reduce-scattered
        each gradient already; the shards' parameters take their gradient shards."""
        for name, shard in self._shards.items():
            p = self._sharded[name]
            if p.grad is None:
                shard.grad = None
                continue
            grad = _local(p.grad)
            if shard.grad is None:
                shard.grad = grad
            else:  # a gradient left by fairseq (it zeroes with set_to_none): add
                shard.grad.add_(grad)
            p.grad = None  # the next update's backward starts a new shard

    # -- checkpoints: the whole model's state dict (module docstring) --

    def consolidate_state_dict(self):
        """Gather the whole state dict (on every process; kept on rank 0, on CPU, one tensor
        on the device at a time), for the ``state_dict()`` of the save that follows."""
        self.__dict__["_consolidated"] = None
        keep = dist.get_rank() == 0
        gathered, whole = {}, {}
        # (FSDP2 reshards the model for its state_dict: its keys, and the buffers)
        for name, value in self.module.state_dict(keep_vars=True).items():
            value = self._sharded.get(name, value)
            key = id(value)
            if key not in gathered:
                tensor = _gather(value.detach()) if hasattr(value, "_local_tensor") \
                    else value.detach()
                gathered[key] = tensor.cpu() if keep else None
            whole[name] = gathered[key]
        if self._whole:
            self._to_whole()
        if keep:
            self.__dict__["_consolidated"] = whole

    def state_dict(self, *args, **kwargs):
        whole = self._consolidated
        if whole is None:  # every process must call it, as consolidate_state_dict
            self.consolidate_state_dict()
            whole = self._consolidated
        self.__dict__["_consolidated"] = None
        return whole if whole is not None else {}

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, **kwargs):
        """The whole (unsharded) state dict, on every process (fairseq broadcasts it): each
        keeps its shard of each parameter, through the model's own ``load_state_dict`` (fairseq's
        upgrades, the plugin's load hooks)."""
        from torch.distributed.tensor import DTensor

        state_dict = dict(state_dict)
        if hasattr(self.module, "upgrade_state_dict"):
            self.module.upgrade_state_dict(state_dict)
        for name, value in list(state_dict.items()):
            p = self._sharded.get(name)
            if p is not None and not isinstance(value, DTensor):
                if tuple(value.shape) != tuple(p.shape):
                    continue  # left to load_state_dict's own size-mismatch error
                local = _shard_of(value.to(p.dtype), p)
                state_dict[name] = DTensor.from_local(local, p.device_mesh, p.placements,
                                                      shape=p.shape, stride=p.stride(),
                                                      run_check=False)
        if model_cfg is not None:
            kwargs["model_cfg"] = model_cfg
        result = self.module.load_state_dict(state_dict, strict=strict, **kwargs)
        if self._whole:  # FSDP2 resharded the model to load it
            self._to_whole()
        return result


def fully_shard_model(model: nn.Module, group, device, reshard_after_forward=True):
    """``fully_shard`` each layer and then ``model``; the wrapper the trainer uses."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    model = model.to(device)
    tags = {name: {a: getattr(p, a) for a in COPIED_ATTRIBUTES if hasattr(p, a)}
            for name, p in model.named_parameters()}
    requires_grad = {name: p.requires_grad for name, p in model.named_parameters()}
    group = group if group is not None else dist.group.WORLD
    mesh = DeviceMesh.from_group(group, device_type=torch.device(device).type)
    layers = layers_of(model)
    for layer in layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    # the root (embeddings, output projection, final LayerNorms): gathered from its forward to
    # the end of the backward, which needs it at once (FSDP2's default for the root)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    shards = {}
    for name, p in model.named_parameters():  # shared ones once
        shard = nn.Parameter(_local(p.data), requires_grad=requires_grad[name])
        for attribute, value in tags[name].items():
            setattr(shard, attribute, value)
        shards[name] = shard
    logger.info(f"FSDP2: {len(layers)} layers and the rest of the model fully sharded over "
                f"{mesh.size()} processes")
    return FullyShardedModel(model, [*layers, model], reshard_after_forward, shards)


# --- the optimizer ---------------------------------------------------------------------------


class FullStateOptimizer:
    """Mixed into the torch optimizer that fairseq's wrapper steps (its class is extended in
    place): the optimizer state of the shards, saved and loaded whole (module docstring).
    ``_dtensor_of``: the FSDP2 parameter (a DTensor) each of its parameters is a shard of."""

    disable_mem_eff_fp16_loading_hack = True  # load_state_dict keeps the saved dtypes

    def _params_in_order(self):
        return [p for group in self.param_groups for p in group["params"]]

    def consolidate_state_dict(self):
        """Gather the whole state (every process, in parameter order; kept on rank 0, on CPU)
        for the ``state_dict()`` of the save that follows."""
        keep = dist.get_rank() == 0
        whole = {}
        for index, p in enumerate(self._params_in_order()):
            state = self.state.get(p)
            if not state:
                continue
            dtensor = self._dtensor_of[p]
            entry = {}
            for key, value in state.items():
                if torch.is_tensor(value) and value.shape == p.shape and value.dim() > 0:
                    value = _gather(dtensor, value)
                entry[key] = value.cpu() if torch.is_tensor(value) else value
            whole[index] = entry
        self._consolidated = whole if keep else None

    def state_dict(self):
        if getattr(self, "_consolidated", None) is None:  # every process must call it
            self.consolidate_state_dict()
        sharded = super().state_dict()
        whole, self._consolidated = self._consolidated, None
        if whole is None:
            return sharded
        return {**sharded, "state": whole}

    def load_state_dict(self, state_dict):
        """The whole state (every process has it): this process's part of each tensor, in its
        saved dtype (fp32 moments beside fp16 parameters stay fp32)."""
        params = self._params_in_order()
        mine = {}
        for index, entry in state_dict["state"].items():
            p = params[int(index)]
            dtensor = self._dtensor_of[p]
            converted = {}
            for key, value in entry.items():
                if torch.is_tensor(value) and value.dim() > 0 and tuple(value.shape) == tuple(
                        dtensor.shape):
                    value = _shard_of(value, dtensor)
                elif torch.is_tensor(value) and key != "step":
                    value = value.to(p.device)
                converted[key] = value
            mine[p] = converted
        super().load_state_dict({**state_dict, "state": {}})  # the groups, as torch loads them
        for p, converted in mine.items():
            self.state[p] = converted


def _make_full_state(torch_optimizer, dtensor_of):
    cls = type(torch_optimizer)
    if not isinstance(torch_optimizer, FullStateOptimizer):
        torch_optimizer.__class__ = type(cls.__name__, (FullStateOptimizer, cls),
                                         {"__module__": cls.__module__})
    torch_optimizer._dtensor_of = dtensor_of
    torch_optimizer._consolidated = None


def shard_optimizer_state(trainer) -> None:
    """After ``Trainer._build_optimizer`` with an FSDP2 model: check the optimizer and make its
    torch optimizer save and load whole states."""
    model, optimizer, cfg = trainer.model, trainer._optimizer, trainer.cfg
    if not isinstance(model, FullyShardedModel):
        return
    fp32_params = getattr(optimizer, "fp32_params", None)
    if fp32_params is not None and not isinstance(fp32_params, list):
        raise ValueError("--ddp-backend fully_sharded (FSDP2) needs one fp32 master per "
                         "parameter: add --fp16-no-flatten-grads (or use "
                         "--memory-efficient-fp16 / --memory-efficient-bf16)")
    if not optimizer.supports_flat_params:
        raise ValueError(f"--ddp-backend fully_sharded (FSDP2) steps each process's shard of "
                         f"every tensor: only pointwise optimizers, not {cfg.optimizer._name}")
    if cfg.ema.store_ema:
        raise ValueError("--ddp-backend fully_sharded (FSDP2) does not support --store-ema")
    dtensors = model._dtensors()
    by_shard = {id(shard): dtensors[name] for name, shard in model._shards.items()}
    dtensor_of = {}
    if isinstance(fp32_params, list):  # FP16Optimizer: masters in the order of its fp16 params
        for shard, master in zip(optimizer.fp16_params, fp32_params):
            dtensor_of[master] = by_shard[id(shard)]
    torch_optimizer = optimizer.optimizer
    for group in torch_optimizer.param_groups:
        for p in group["params"]:
            if p not in dtensor_of:
                dtensor_of[p] = by_shard[id(p)]
    _make_full_state(torch_optimizer, dtensor_of)


# --- fairseq's hooks -------------------------------------------------------------------------


def _check(args) -> None:
    if getattr(args, "cpu_offload", False):
        raise ValueError("--ddp-backend fully_sharded (FSDP2): --cpu-offload is not supported")
    if getattr(args, "use_sharded_state", False):
        raise ValueError("--ddp-backend fully_sharded (FSDP2) saves whole checkpoints: "
                         "--use-sharded-state is not supported")
    if getattr(args, "zero_sharding", "none") != "none":
        raise ValueError("--ddp-backend fully_sharded (FSDP2) shards the optimizer state "
                         "already: drop --zero-sharding")


def install() -> None:
    """Make fairseq's ``--ddp-backend fully_sharded`` torch's FSDP2 (module docstring), each
    hook wrapping fairseq's own function."""
    from fairseq import models
    from fairseq.trainer import Trainer

    if getattr(Trainer, "_deepnet_fsdp2", False):
        return
    Trainer._deepnet_fsdp2 = True
    Trainer.is_fsdp = property(lambda self: False)  # fairscale's FSDP: never
    models.DistributedFairseqModel = _distributed_model(models.DistributedFairseqModel)
    Trainer._build_optimizer = _build_optimizer(Trainer._build_optimizer)
    Trainer.consolidate_optimizer = _consolidate_optimizer(Trainer.consolidate_optimizer)
    Trainer.clip_grad_norm = _clip_grad_norm(Trainer.clip_grad_norm)
    _without_fairscales_wrapping()


def _distributed_model(wrap):
    @functools.wraps(wrap)
    def distributed_model(args, model, process_group, device):
        if args.ddp_backend != BACKEND:
            return wrap(args, model, process_group, device)
        _check(args)
        return fully_shard_model(model, process_group, device,
                                 reshard_after_forward=not args.no_reshard_after_forward)
    return distributed_model


def _build_optimizer(build_optimizer):
    @functools.wraps(build_optimizer)
    def hooked(self):
        build_optimizer(self)
        if self.cfg.distributed_training.ddp_backend == BACKEND:
            if isinstance(self.model, FullyShardedModel):
                shard_optimizer_state(self)
            else:
                logger.info("--ddp-backend fully_sharded with one process: nothing to shard")
    return hooked


def _consolidate_optimizer(consolidate):
    @functools.wraps(consolidate)
    def hooked(self):
        if isinstance(self._wrapped_model, FullyShardedModel):
            self._wrapped_model.consolidate_state_dict()
        consolidate(self)
    return hooked


def _clip_grad_norm(clip):
    @functools.wraps(clip)
    def hooked(self, clip_norm):
        if not isinstance(self._wrapped_model, FullyShardedModel):
            return clip(self, clip_norm)
        group = self.data_parallel_process_group

        def total_over_processes(local_norm):  # each process holds a part of every gradient
            squared = local_norm.float() ** 2
            dist.all_reduce(squared, group=group)
            return squared ** 0.5

        return self.optimizer.clip_grad_norm(clip_norm, aggregate_norm_fn=total_over_processes)
    return hooked


def _without_fairscales_wrapping() -> None:
    """fairseq-train builds the model under fairscale's wrapping context for fully_sharded
    (fairseq_cli/train.py, which imported the name from fairseq.distributed): none here."""
    import sys

    for name in ("fairseq.distributed", "fairseq_cli.train", "__main__"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "fsdp_enable_wrap"):
            module.fsdp_enable_wrap = _no_wrapping_context


@contextlib.contextmanager
def _no_wrapping_context(cfg):
    yield
