"""A run's layout: settings and environment -> processes, nodes, launcher, batch, precision,
memory plan. Planning only: nothing here runs a process or writes a file. The commands built
from a layout: ``commands.py``; the TRAIN_ARGS policy: ``train_args.py``; running them:
``runner.py``. GPUs and cores: ``base/machine.py``; memory: ``memory.py``.

The layout, decided by ``plan_layout`` from the settings and the environment alone:

* processes per node: ``NPROC``, else one per visible GPU (``machine.count_gpus``), 1 on CPU;
* nodes: ``NNODES`` (inside a SLURM job, ``SLURM_NNODES``);
* launcher (``LAUNCHER=auto``): ``srun`` inside a SLURM job with several nodes, else
  ``torchrun`` for several processes (``--standalone`` on one node; ``--nnodes/--node_rank/
  --master_addr/--master_port`` on several, where ``NODE_RANK`` and ``MASTER_ADDR`` are
  required), else fairseq-train itself;
* ``--update-freq``: the least that makes ``MAX_TOKENS x processes x update-freq`` reach
  ``TOKENS_PER_UPDATE``, so the effective batch is the same on 1 GPU or 64;
* precision: fp16 (with the loss-scale settings; CUDA only), bf16, fp32;
* memory (CUDA, ``memory.plan``): with the GPU's size (``GPU_MEMORY_GB``, else torch's device
  properties), the cheapest layout that fits 90% of the card: plain DDP, + activation
  checkpointing, + ZeRO-1, + memory-efficient fp16, then fewer ``MAX_TOKENS`` with a larger
  update-freq (the tokens per update unchanged); no GPU size known, or on CPU: no plan;
* activation checkpointing: ``CHECKPOINT_ACTIVATIONS=1`` or ``0`` (kept; the plan warns when it
  does not fit), or ``auto``: the plan's choice; on CPU, on only when the run would not fit 90%
  of this machine's memory without it (``cpu_checkpointing``: it costs time, and a CPU machine
  usually has the memory); on CUDA without a plan, on when
  ``ENC_LAYERS + DEC_LAYERS >= CHECKPOINT_ACTIVATIONS_FROM``; never for a method whose layers
  pass state to later layers (DLCL, ResiDual: ``auto`` leaves it off, ``1`` is refused).

Only global rank 0 (node 0, or the single srun/fairseq-train launcher) writes a run's files
(``runner.py``); node k > 0 keeps ``train.node<k>.log``.
"""

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Tuple

from ... import methods
from ..base.machine import count_gpus, gpu_memory_gb, machine_memory_gb
from .memory import FULL_SHARDING, MARGIN, MemoryPlanError, Plan, estimate as memory_estimate, \
    parameter_count, plan as memory_plan
from ..spec.settings import SettingError, Settings


@dataclass
class Layout:
    device: str
    gpus: int
    gpus_from: str
    nnodes: int
    nproc: int
    node_rank: int
    launcher: str
    master_addr: Optional[str]
    master_port: Optional[int]
    update_freq: int
    tokens_per_update: int
    precision: str
    checkpoint_activations: bool
    max_tokens: int = 0
    memory: Optional[Plan] = None  # CUDA with a known GPU size: the memory plan followed
    memory_unknown: str = ""  # CUDA without a known GPU size: why there is no plan
    cpu_memory: str = ""  # CPU under CHECKPOINT_ACTIVATIONS=auto: why checkpointing is on or off

    @property
    def world(self) -> int:
        return self.nnodes * self.nproc

    @property
    def is_rank0(self) -> bool:
        return self.node_rank == 0

    @property
    def node_suffix(self) -> str:
        """"" on node 0, ".node<k>" on node k: the name part of a node's own log files."""
        return "" if self.is_rank0 else f".node{self.node_rank}"

    def summary(self) -> str:
        return (f"{self.nnodes} node(s) x {self.nproc} process(es) via {self.launcher}"
                f"{'' if self.nnodes == 1 else f' (this is node {self.node_rank})'}, "
                f"{self.device} {self.precision} ({self.gpus} GPU(s) per node: {self.gpus_from}), "
                f"update-freq {self.update_freq} = {self.tokens_per_update} tokens per update"
                f"{', activation checkpointing' if self.checkpoint_activations else ''}"
                f"{f'; memory plan: {self.memory.short()}' if self.memory else ''}"
                f"{'; no memory plan (GPU memory unknown)' if self.memory_unknown else ''}"
                f"{f'; CPU memory: {self.cpu_memory}' if self.cpu_memory else ''}")

    def memory_text(self) -> str:
        """The memory plan's figures per component and its choice; on CUDA without a known GPU
        size, why there is none and how to get one; "" on CPU."""
        return self.memory.describe() if self.memory else self.memory_unknown


def no_memory_plan(checkpointing: bool, cfg: Settings) -> str:
    """What a CUDA layout does without the GPU's size (none set, none visible to torch here: a
    dry run on a login node), and how to plan it for the training machine's cards."""
    if cfg.text.machine.checkpoint_activations != "auto":
        rule = f"CHECKPOINT_ACTIVATIONS={cfg.text.machine.checkpoint_activations}"
    elif checkpointing_refused(cfg.text.run.method):
        rule = f"no activation checkpointing (METHOD={cfg.text.run.method} cannot have it)"
    else:
        rule = (f"activation checkpointing {'on' if checkpointing else 'off'} by depth alone "
                f"(on when ENC_LAYERS + DEC_LAYERS >= CHECKPOINT_ACTIVATIONS_FROM="
                f"{cfg.text.machine.checkpoint_activations_from})")
    return ("memory plan: none, the GPU memory is unknown (GPU_MEMORY_GB is not set and torch sees "
            f"no GPU on this machine), so it cannot plan memory: {rule}, no ZeRO-1, "
            f"MAX_TOKENS={cfg.text.machine.max_tokens} as set. Set GPU_MEMORY_GB=<GB per GPU> "
            "(e.g. GPU_MEMORY_GB=80 for 80 GB cards) to plan for the training machine's GPUs")


def dictionary_size(cfg: Settings) -> int:
    """fairseq's dictionary for VOCAB sentencepiece pieces: 4 special symbols, and the language
    tokens its dataset's task adds."""
    return cfg.data.vocab + 4 + cfg.declaration.task.language_tokens


# what every CPU process holds whatever its batch, in bytes a parameter: fp32 weights, their
# gradients and Adam's two moments (activations come on top: a lower bound of the peak)
CPU_RESIDENT_BYTES = 16


def _parameters(cfg: Settings) -> int:
    return parameter_count(cfg.run.enc_layers, cfg.run.dec_layers, cfg.model.embed_dim,
                           cfg.model.ffn_dim, dictionary_size(cfg))


def cpu_need_gib(cfg: Settings, nproc: int, precision: str, tokens: int,
                 checkpointing: bool) -> float:
    """GiB that ``nproc`` CPU processes of the run hold: the memory plan's CPU estimate (weights,
    gradients, Adam state and the activations of ``tokens`` tokens, measured:
    docs/reproducing.md), or, with activation checkpointing, which has no CPU activation model,
    the resident part alone (a lower bound)."""
    params = _parameters(cfg)
    if checkpointing:
        per_process = CPU_RESIDENT_BYTES * params
    else:
        per_process = memory_estimate(params, cfg.run.enc_layers + cfg.run.dec_layers,
                                      cfg.model.embed_dim, dictionary_size(cfg), tokens,
                                      precision, world=nproc, device="cpu").peak
    return per_process * nproc / 2 ** 30


def cpu_checkpointing(cfg: Settings, nproc: int, precision: str, tokens: int,
                      memory_gb: float) -> Tuple[bool, str]:
    """CHECKPOINT_ACTIVATIONS=auto on a CPU machine of ``memory_gb`` GiB: on only when the run
    without it needs more than MARGIN of that memory. Recomputing each layer's forward makes a
    CPU step a third to a half longer at 100L-100L, 64 wide (``benchmarks/throughput.py
    --depths 100``; docs/running.md), and a CPU machine's memory is seldom what limits it.
    (on, why) for the run's summary."""
    need = cpu_need_gib(cfg, nproc, precision, tokens, checkpointing=False)
    usable = MARGIN * memory_gb
    on = need > usable
    return on, (f"est. {need:,.1f} GiB without activation checkpointing in {nproc} "
                f"process(es), {usable:,.1f} of this machine's {memory_gb:,.1f} GiB usable: "
                f"trains {'with' if on else 'without'} it")


def machine_problem(cfg: Settings, layout: "Layout", cores: int, memory_gb: float) -> Optional[str]:
    """Why a CPU run cannot run on a machine with ``cores`` cores and ``memory_gb`` GiB (the
    launcher's own, for a run, not for a dry run planning another machine), or None. More
    processes than cores only slow each other down; a model that does not fit
    (``cpu_need_gib``) cannot start (CUDA runs: the memory plan's business)."""
    if layout.device != "cpu":
        return None
    if layout.nproc > cores:
        return (f"NPROC={layout.nproc} CPU processes, but this machine gives the run {cores} "
                f"core(s): at most one process per core (more only slow each other down); "
                f"set NPROC={cores} or less")
    tokens = layout.max_tokens or cfg.machine.max_tokens
    need_gb = cpu_need_gib(cfg, layout.nproc, layout.precision, tokens,
                           layout.checkpoint_activations)
    if layout.checkpoint_activations:
        what = "whose fp32 weights, gradients and Adam state alone take"
    else:
        what = (f"whose weights, gradients, Adam state and the activations of MAX_TOKENS="
                f"{tokens} tokens take")
    if need_gb > memory_gb:
        run, model = cfg.text.run, cfg.text.model
        params = _parameters(cfg)
        return (f"ENC_LAYERS={run.enc_layers} DEC_LAYERS={run.dec_layers} at EMBED_DIM="
                f"{model.embed_dim}, FFN_DIM={model.ffn_dim}: {params / 1e6:,.0f}M parameters, "
                f"{what} {need_gb:,.1f} GB in {layout.nproc} process(es), more than this "
                f"machine's {memory_gb:,.1f} GB; use fewer or narrower layers, a smaller "
                f"MAX_TOKENS (TOKENS_PER_UPDATE is kept by --update-freq), or a GPU machine")
    return None


def checkpointing_refused(method: str) -> Optional[str]:
    """Why the method's layers cannot be activation-checkpointed (DLCL's aggregation and
    ResiDual's dual stream pass state between layers outside the checkpointed forward), as its
    declaration says (``Method.stack_state``), or None."""
    try:
        state = methods.get(method).stack_state
    except ValueError:
        return None  # an unknown method is reported where its options are built
    return f"{state} passes each layer's output to later layers" if state else None


def plan_layout(cfg: Settings, env: Mapping[str, str], probe: Optional[Callable[[], int]] = None,
                memory_probe: Callable[[], Optional[float]] = gpu_memory_gb,
                ram_probe: Callable[[], float] = machine_memory_gb) -> Layout:
    """Processes, launcher, batch split, precision and memory plan of a training run (no side
    effects). ``memory_probe`` gives the GPU's GB when GPU_MEMORY_GB is not set, ``ram_probe``
    this machine's GiB, which decides activation checkpointing on CPU under auto."""
    device = cfg.text.where.device
    gpus, gpus_from, nnodes, nproc = _processes(cfg, env, device, probe)
    world = nnodes * nproc
    launcher, node_rank, master_addr, master_port = _launcher(cfg, env, nnodes, world)
    precision = cfg.text.machine.precision  # fp16 on CPU: fairseq_train_compat lifts its CUDA calls
    max_tokens, wanted = cfg.machine.max_tokens, cfg.optim.tokens_per_update
    if max_tokens < 1:
        raise SettingError("MAX_TOKENS must be at least 1")
    update_freq = max(1, math.ceil(wanted / (max_tokens * world)))
    forced = _checkpointing_forced(cfg)  # None: auto, for a method that can have it
    memory, memory_unknown, cpu_memory = None, "", ""
    if forced is not None:
        checkpointing = forced
    elif device == "cpu":
        checkpointing, cpu_memory = cpu_checkpointing(cfg, nproc, precision, max_tokens,
                                                      ram_probe())
    else:  # CUDA: the depth rule, unless the memory plan below decides
        checkpointing = (cfg.run.enc_layers + cfg.run.dec_layers
                         >= cfg.machine.checkpoint_activations_from)
    if device == "cuda":
        card = cfg.machine.gpu_memory_gb if "GPU_MEMORY_GB" in cfg else memory_probe()
        if not card:
            memory_unknown = no_memory_plan(checkpointing, cfg)
        else:
            try:
                memory = memory_plan(
                    cfg.run.enc_layers, cfg.run.dec_layers, cfg.model.embed_dim,
                    cfg.model.ffn_dim, dictionary_size(cfg), gpus_per_node=nproc, nodes=nnodes,
                    gpu_memory_gb=card, tokens_per_gpu=max_tokens, tokens_per_update=wanted,
                    precision=precision, checkpointing=forced,
                    full_shard=cfg.text.machine.ddp_backend == FULL_SHARDING)
            except MemoryPlanError as err:
                raise SettingError(f"memory plan: {err}") from None
            checkpointing = memory.choice.checkpointing
            max_tokens, update_freq = memory.choice.max_tokens, memory.choice.update_freq
    return Layout(device, gpus, gpus_from, nnodes, nproc, node_rank, launcher, master_addr,
                  master_port, update_freq, max_tokens * world * update_freq, precision,
                  checkpointing, max_tokens, memory, memory_unknown, cpu_memory)


def _processes(cfg: Settings, env: Mapping[str, str], device: str,
               probe: Optional[Callable[[], int]]):
    """(GPUs visible, what says so, nodes, processes per node)."""
    gpus, gpus_from = count_gpus(env, probe) if device == "cuda" else (0, "DEVICE=cpu")
    nnodes = cfg.processes.nnodes
    if nnodes < 1:
        raise SettingError("NNODES must be at least 1")
    nproc = cfg.processes.nproc  # checked where it was resolved: >= 1, or auto
    if nproc == "auto":
        nproc = gpus if device == "cuda" else 1
    if device == "cuda" and nproc > gpus:
        raise SettingError(f"NPROC={nproc} processes per node but only {gpus} GPU(s) visible "
                           f"({gpus_from})")
    return gpus, gpus_from, nnodes, nproc


def _launcher(cfg: Settings, env: Mapping[str, str], nnodes: int, world: int):
    """(launcher, this node's rank, master address, master port) of WORLD processes."""
    launcher = cfg.text.processes.launcher
    in_slurm = bool(env.get("SLURM_JOB_ID"))
    if launcher == "auto":
        launcher = "srun" if in_slurm and nnodes > 1 else "torchrun" if world > 1 else "none"
    if launcher == "none" and world > 1:
        raise SettingError(f"LAUNCHER=none starts one process; NNODES x NPROC = {world} needs "
                           "torchrun or srun")
    if launcher == "srun" and not in_slurm:
        raise SettingError("LAUNCHER=srun works inside a SLURM allocation (sbatch or salloc); "
                           "no SLURM_JOB_ID is set")
    if launcher == "srun":
        return launcher, 0, None, cfg.processes.master_port  # fairseq's --distributed-port
    if launcher != "torchrun" or nnodes == 1:
        return launcher, 0, None, None
    missing = [name for name in ("NODE_RANK", "MASTER_ADDR") if name not in cfg]
    if missing:
        raise SettingError(
            f"NNODES={nnodes} with torchrun: set {' and '.join(missing)} on every node "
            "(NODE_RANK=0 on the node at MASTER_ADDR, 1 ... NNODES-1 on the others; "
            "MASTER_ADDR the address of node 0, the same everywhere); a node without "
            "NODE_RANK is never assumed to be rank 0")
    node_rank = cfg.processes.node_rank
    if node_rank >= nnodes:
        raise SettingError(f"NODE_RANK={node_rank} must be below NNODES={nnodes}")
    return launcher, node_rank, cfg.text.processes.master_addr, cfg.processes.master_port


def _checkpointing_forced(cfg: Settings) -> Optional[bool]:
    """Activation checkpointing as CHECKPOINT_ACTIVATIONS forces it (True, False), None for
    auto; False for a method whose layers cannot have it, refused when forced on."""
    forced = {"1": True, "0": False}.get(cfg.text.machine.checkpoint_activations)
    if forced is False:
        return False
    refusal = checkpointing_refused(cfg.text.run.method)
    if refusal and forced:
        raise SettingError(f"CHECKPOINT_ACTIVATIONS=1 cannot be used with METHOD="
                           f"{cfg.text.run.method}: {refusal}; set CHECKPOINT_ACTIVATIONS=0 or "
                           f"auto (or reduce MAX_TOKENS to save memory)")
    return False if refusal else forced
