"""The recipes' launch logic: settings -> processes, batch, precision -> the exact command.

Pure planning: nothing here runs a process or writes a file (``runner`` does; the command
line is ``python -m deepnet_fairseq.recipes``, ``__main__.py``). Settings: ``settings.py``;
GPUs: ``devices.py``; memory: ``memory.py``.

The layout, decided by ``plan_layout`` from the settings and the environment alone:

* processes per node: ``NPROC``, else one per visible GPU (``devices.count_gpus``), 1 on CPU;
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
  does not fit), or ``auto``: the plan's choice, or without a plan on when
  ``ENC_LAYERS + DEC_LAYERS >= CHECKPOINT_ACTIVATIONS_FROM``; never for a method whose layers
  pass state to later layers (DLCL, ResiDual: ``auto`` leaves it off, ``1`` is refused).

Only global rank 0 (node 0, or the single srun/fairseq-train launcher) writes a run's files
(``runner.py``); node k > 0 keeps ``train.node<k>.log``.
"""

import argparse
import math
import os
import shlex
import sys
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Tuple

from .devices import count_gpus
from .memory import MemoryPlanError, Plan, estimate as memory_estimate, parameter_count, \
    plan as memory_plan
from ..spec.settings import PREFIX, SettingError, Settings


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
                f"{'; no memory plan (GPU memory unknown)' if self.memory_unknown else ''}")

    def memory_text(self) -> str:
        """The memory plan's figures per component and its choice; on CUDA without a known GPU
        size, why there is none and how to get one; "" on CPU."""
        return self.memory.describe() if self.memory else self.memory_unknown


def no_memory_plan(checkpointing: bool, cfg: Settings) -> str:
    """What a CUDA layout does without the GPU's size (none set, none visible to torch here: a
    dry run on a login node), and how to plan it for the training machine's cards."""
    if cfg["CHECKPOINT_ACTIVATIONS"] != "auto":
        rule = f"CHECKPOINT_ACTIVATIONS={cfg['CHECKPOINT_ACTIVATIONS']}"
    elif checkpointing_refused(cfg["METHOD"]):
        rule = f"no activation checkpointing (METHOD={cfg['METHOD']} cannot have it)"
    else:
        rule = (f"activation checkpointing {'on' if checkpointing else 'off'} by depth alone "
                f"(on when ENC_LAYERS + DEC_LAYERS >= CHECKPOINT_ACTIVATIONS_FROM="
                f"{cfg['CHECKPOINT_ACTIVATIONS_FROM']})")
    return ("memory plan: none, the GPU memory is unknown (GPU_MEMORY_GB is not set and torch "
            f"sees no GPU on this machine), so it cannot plan memory: {rule}, no ZeRO-1, "
            f"MAX_TOKENS={cfg['MAX_TOKENS']} as set. Set GPU_MEMORY_GB=<GB per GPU> (e.g. "
            "GPU_MEMORY_GB=80 for 80 GB cards) to plan for the training machine's GPUs")


def gpu_memory_gb() -> Optional[float]:
    """Memory of the first visible GPU in GB (1e9 bytes), or None when torch sees none."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / 1e9


def dictionary_size(cfg: Settings) -> int:
    """fairseq's dictionary for VOCAB sentencepiece pieces: 4 special symbols, and the language
    tokens its dataset's task adds."""
    return cfg.int("VOCAB") + 4 + cfg.declaration.task.language_tokens


# what every CPU process holds whatever its batch, in bytes a parameter: fp32 weights, their
# gradients and Adam's two moments (activations come on top: a lower bound of the peak)
CPU_RESIDENT_BYTES = 16


def machine_memory_gb() -> float:
    """This machine's physical memory in GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30


def machine_problem(cfg: Settings, layout: "Layout", cores: int, memory_gb: float) -> Optional[str]:
    """Why a CPU run cannot run on a machine with ``cores`` cores and ``memory_gb`` GiB (the
    launcher's own, for a run, not for a dry run planning another machine), or None. More
    processes than cores only slow each other down; a model that does not fit cannot start:
    the memory plan's CPU estimate (weights, gradients, Adam state and the activations of
    MAX_TOKENS tokens, measured: docs/reproducing.md), or, with activation checkpointing, which
    has no CPU activation model, the resident part alone (CUDA runs: the memory plan's
    business)."""
    if layout.device != "cpu":
        return None
    if layout.nproc > cores:
        return (f"NPROC={layout.nproc} CPU processes, but this machine gives the run {cores} "
                f"core(s): at most one process per core (more only slow each other down); "
                f"set NPROC={cores} or less")
    enc, dec, width = cfg.int("ENC_LAYERS"), cfg.int("DEC_LAYERS"), cfg.int("EMBED_DIM")
    vocab = dictionary_size(cfg)
    params = parameter_count(enc, dec, width, cfg.int("FFN_DIM"), vocab)
    tokens = layout.max_tokens or cfg.int("MAX_TOKENS")
    if layout.checkpoint_activations:
        per_process = CPU_RESIDENT_BYTES * params
        what = "whose fp32 weights, gradients and Adam state alone take"
    else:
        per_process = memory_estimate(params, enc + dec, width, vocab, tokens, layout.precision,
                                      world=layout.nproc, device="cpu").peak
        what = (f"whose weights, gradients, Adam state and the activations of MAX_TOKENS="
                f"{tokens} tokens take")
    need_gb = per_process * layout.nproc / 2 ** 30
    if need_gb > memory_gb:
        return (f"ENC_LAYERS={cfg['ENC_LAYERS']} DEC_LAYERS={cfg['DEC_LAYERS']} at EMBED_DIM="
                f"{cfg['EMBED_DIM']}, FFN_DIM={cfg['FFN_DIM']}: {params / 1e6:,.0f}M parameters, "
                f"{what} {need_gb:,.1f} GB in {layout.nproc} process(es), more than this "
                f"machine's {memory_gb:,.1f} GB; use fewer or narrower layers, a smaller "
                f"MAX_TOKENS (TOKENS_PER_UPDATE is kept by --update-freq), or a GPU machine")
    return None


def checkpointing_refused(method: str) -> Optional[str]:
    """Why the method's layers cannot be activation-checkpointed (DLCL's aggregation and
    ResiDual's dual stream pass state between layers outside the checkpointed forward:
    ``method_layers.StackState``), or None. Imports the layer rules (torch, fairseq), so it is
    asked only where checkpointing could be on."""
    from ... import methods
    from ...nn.method_layers import RULES, StackState

    try:
        rule = methods.get(method).layers
    except ValueError:
        return None  # an unknown method is reported where its options are built
    if rule is None or not issubclass(RULES[rule], StackState):
        return None
    return f"{RULES[rule].state_name} passes each layer's output to later layers"


def plan_layout(cfg: Settings, env: Mapping[str, str],
                probe: Optional[Callable[[], int]] = None,
                memory_probe: Callable[[], Optional[float]] = gpu_memory_gb) -> Layout:
    """Processes, launcher, batch split, precision and memory plan of a training run (no side
    effects). ``memory_probe`` gives the GPU's GB when GPU_MEMORY_GB is not set."""
    device = cfg["DEVICE"]
    gpus, gpus_from = count_gpus(env, probe) if device == "cuda" else (0, "DEVICE=cpu")
    nnodes = cfg.int("NNODES")
    if nnodes < 1:
        raise SettingError("NNODES must be at least 1")
    nproc = cfg.int_or_auto("NPROC")  # checked where it was resolved: >= 1, or auto
    if nproc == "auto":
        nproc = gpus if device == "cuda" else 1
    if device == "cuda" and nproc > gpus:
        raise SettingError(f"NPROC={nproc} processes per node but only {gpus} GPU(s) visible "
                           f"({gpus_from})")
    world = nnodes * nproc

    launcher = cfg["LAUNCHER"]
    in_slurm = bool(env.get("SLURM_JOB_ID"))
    if launcher == "auto":
        launcher = "srun" if in_slurm and nnodes > 1 else "torchrun" if world > 1 else "none"
    if launcher == "none" and world > 1:
        raise SettingError(f"LAUNCHER=none starts one process; NNODES x NPROC = {world} needs "
                           "torchrun or srun")
    if launcher == "srun" and not in_slurm:
        raise SettingError("LAUNCHER=srun works inside a SLURM allocation (sbatch or salloc); "
                           "no SLURM_JOB_ID is set")

    node_rank, master_addr, master_port = 0, None, None
    if launcher == "torchrun" and nnodes > 1:
        missing = [name for name in ("NODE_RANK", "MASTER_ADDR") if name not in cfg]
        if missing:
            raise SettingError(
                f"NNODES={nnodes} with torchrun: set {' and '.join(missing)} on every node "
                "(NODE_RANK=0 on the node at MASTER_ADDR, 1 ... NNODES-1 on the others; "
                "MASTER_ADDR the address of node 0, the same everywhere); a node without "
                "NODE_RANK is never assumed to be rank 0")
        node_rank = cfg.int("NODE_RANK")
        if node_rank >= nnodes:
            raise SettingError(f"NODE_RANK={node_rank} must be below NNODES={nnodes}")
        master_addr, master_port = cfg["MASTER_ADDR"], cfg.int("MASTER_PORT")
    elif launcher == "srun":
        master_port = cfg.int("MASTER_PORT")  # fairseq's --distributed-port under SLURM

    precision = cfg["PRECISION"]  # fp16 on CPU: fairseq_train_compat lifts its CUDA calls
    max_tokens, wanted = cfg.int("MAX_TOKENS"), cfg.int("TOKENS_PER_UPDATE")
    if max_tokens < 1:
        raise SettingError("MAX_TOKENS must be at least 1")
    update_freq = max(1, math.ceil(wanted / (max_tokens * world)))
    layers = cfg.int("ENC_LAYERS") + cfg.int("DEC_LAYERS")
    forced = {"1": True, "0": False}.get(cfg["CHECKPOINT_ACTIVATIONS"])
    if forced is not False and (forced or device == "cuda"
                                or layers >= cfg.int("CHECKPOINT_ACTIVATIONS_FROM")):
        refusal = checkpointing_refused(cfg["METHOD"])
        if refusal and forced:
            raise SettingError(f"CHECKPOINT_ACTIVATIONS=1 cannot be used with METHOD="
                               f"{cfg['METHOD']}: {refusal}; set CHECKPOINT_ACTIVATIONS=0 or "
                               f"auto (or reduce MAX_TOKENS to save memory)")
        if refusal:
            forced = False
    checkpointing = forced if forced is not None else \
        layers >= cfg.int("CHECKPOINT_ACTIVATIONS_FROM")
    memory, memory_unknown = None, ""
    if device == "cuda":
        card = cfg.float("GPU_MEMORY_GB") if "GPU_MEMORY_GB" in cfg else memory_probe()
        if not card:
            memory_unknown = no_memory_plan(checkpointing, cfg)
        else:
            try:
                memory = memory_plan(
                    cfg.int("ENC_LAYERS"), cfg.int("DEC_LAYERS"), cfg.int("EMBED_DIM"),
                    cfg.int("FFN_DIM"), dictionary_size(cfg), gpus_per_node=nproc, nodes=nnodes,
                    gpu_memory_gb=card, tokens_per_gpu=max_tokens, tokens_per_update=wanted,
                    precision=precision, checkpointing=forced)
            except MemoryPlanError as err:
                raise SettingError(f"memory plan: {err}") from None
            checkpointing = memory.choice.checkpointing
            max_tokens, update_freq = memory.choice.max_tokens, memory.choice.update_freq
    return Layout(device, gpus, gpus_from, nnodes, nproc, node_rank, launcher, master_addr,
                  master_port, update_freq, max_tokens * world * update_freq, precision,
                  checkpointing, max_tokens, memory, memory_unknown)


# ---- paths and commands ---------------------------------------------------------------------

def paths(cfg: Settings) -> dict:
    work = os.path.abspath(cfg["WORK"])
    data = os.path.join(work, "data")
    run = os.path.join(work, "runs", cfg["RUN_NAME"])
    return {"WORK": work, "DATA_DIR": data, "BIN": os.path.join(data, "bin"),
            "RAW": os.path.join(data, "raw"), "RUNS_DIR": os.path.join(work, "runs"),
            "RUN_DIR": run, "CHECKPOINTS": os.path.join(run, "checkpoints"),
            "TENSORBOARD": os.path.join(run, "tensorboard"),
            "RESULTS": os.path.join(work, "results")}


def prepare_first(cfg: Settings) -> str:
    """How a step refused for want of prepared data tells the user to prepare it: the dataset's
    script where the checkout has one (scripts/<dataset>/ is optional), else the program."""
    script = f"scripts/{cfg.dataset}/prepare.sh"
    if not os.path.isfile(os.path.join(cfg.repo, script)):
        script = f"python -m deepnet_fairseq.recipes {cfg.dataset} prepare"
    return f"run {script} first (same SIZE and DEEPNET_WORK)"


def _bin_list(cfg: Settings, name: str, dry_run: bool) -> str:
    path = os.path.join(paths(cfg)["BIN"], name)
    if os.path.isfile(path):
        return open(path, encoding="utf-8").read().strip()
    if dry_run:
        return f"<{name} of prepare.sh>"
    raise SettingError(f"no {path}; {prepare_first(cfg)}")


def task_args(cfg: Settings, dry_run: bool = False) -> List[str]:
    """fairseq-train's task options for the dataset."""
    return cfg.declaration.task.train_args(cfg, lambda name: _bin_list(cfg, name, dry_run))


def method_args(cfg: Settings) -> List[str]:
    from ... import methods

    try:
        return list(methods.get(cfg["METHOD"]).train_args(cfg.int("ENC_LAYERS"),
                                                          cfg.int("DEC_LAYERS")))
    except ValueError as err:
        raise SettingError(f"METHOD={cfg['METHOD']}: {err}") from None


PER_TENSOR_OPTIONS = ("--deepnorm-ln-lr-multiplier", "--depth-transfer")  # need the optimizer to
# step each tensor (nn/layernorm_lr.py)


def per_tensor_steps(layout: Layout, method: List[str], args: List[str]) -> List[str]:
    """``--fp16-no-flatten-grads`` when a method option (the LayerNorm lr multiplier) must see
    each parameter tensor but fairseq's fp16/bf16 optimizer would flatten them all into one
    buffer; the same memory (an fp32 master copy per tensor instead of one flat copy), and the
    launch summary says so."""
    needs = any(option in method for option in PER_TENSOR_OPTIONS)
    flat = layout.precision in ("fp16", "bf16") and not any(
        flag in args for flag in ("--fp16-no-flatten-grads", "--memory-efficient-fp16"))
    return ["--fp16-no-flatten-grads"] if needs and flat else []


def train_args_of(cfg: Settings) -> List[str]:
    """TRAIN_ARGS split as a shell splits it; a quoting error is a setting error, not a
    traceback (and not the end of a sweep)."""
    text = cfg.get("TRAIN_ARGS") or ""
    try:
        return shlex.split(text)
    except ValueError as err:
        raise SettingError(f"TRAIN_ARGS={text!r} (from {cfg.sources.get('TRAIN_ARGS')}): {err}; "
                           "quote it as in a shell") from None


# fairseq-train's destinations (argparse's dest: one per option, whatever its spelling) that a
# setting decides, refused in TRAIN_ARGS with the setting to use instead, whether or not this
# run's command names them (PRECISION=fp32 leaves --fp16 out: it still decides it). A run's
# records (config.json, status.json, the results table) say what its settings say; an option
# slipped behind them would train something else.
SETTING_OF_DEST = {
    "arch": "METHOD", "encoder_layers": "LAYERS or ENC_LAYERS",
    "decoder_layers": "LAYERS or DEC_LAYERS", "save_dir": "RUN_NAME or DEEPNET_WORK",
    "task": "the dataset (scripts/<dataset>/)",
    "lr": "LR", "seed": "SEED", "max_update": "MAX_UPDATE", "max_epoch": "MAX_EPOCH",
    "warmup_updates": "WARMUP", "warmup_init_lr": "WARMUP_INIT_LR", "dropout": "DROPOUT",
    "max_tokens": "MAX_TOKENS", "update_freq": "TOKENS_PER_UPDATE",
    "distributed_world_size": "NPROC and NNODES", "encoder_embed_dim": "EMBED_DIM",
    "decoder_embed_dim": "EMBED_DIM", "encoder_ffn_embed_dim": "FFN_DIM",
    "decoder_ffn_embed_dim": "FFN_DIM", "encoder_attention_heads": "HEADS",
    "decoder_attention_heads": "HEADS", "source_lang": "SRC", "target_lang": "TGT",
    "label_smoothing": "LABEL_SMOOTHING", "weight_decay": "WEIGHT_DECAY",
    "clip_norm": "CLIP_NORM", "adam_betas": "ADAM_BETAS",
    "save_interval_updates": "SAVE_INTERVAL_UPDATES", "keep_interval_updates": "AVERAGE_LAST",
    "log_interval": "LOG_INTERVAL", "ddp_backend": "DDP_BACKEND",
    "num_workers": "NUM_WORKERS", "cpu": "DEVICE", "checkpoint_activations":
    "CHECKPOINT_ACTIVATIONS", "fp16_init_scale": "FP16_INIT_SCALE",
    "fp16_scale_window": "FP16_SCALE_WINDOW", "min_loss_scale": "MIN_LOSS_SCALE",
    "distributed_port": "MASTER_PORT", "distributed_init_method": "LAUNCHER, MASTER_ADDR and "
    "MASTER_PORT", "sampling_temperature": "TEMPERATURE",
    # each of these trains in another precision than PRECISION says (--memory-efficient-fp16
    # sets fp16; the memory plan adds it itself where a card needs it)
    **dict.fromkeys(("fp16", "bf16", "amp", "memory_efficient_fp16", "memory_efficient_bf16"),
                    "PRECISION"),
}

# Options that make fairseq read or write outside the run's directories ($WORK/data, the run's
# directory), refused with the way to do it instead: a run's records could not say where its
# weights came from, and files would land where no record (and no cleaning up) finds them.
OUTSIDE = {
    **dict.fromkeys(("restore_file", "finetune_from_model", "ema_seed_model"),
                    "starts from weights outside the run (a run resumes from its own "
                    "checkpoints/checkpoint_last.pt, and its records say it trained from "
                    "scratch); train a new run instead"),
    # files a component reads (a tokenizer's model, a dictionary, more data): the run is its
    # data directory's, whose record says how it was made
    **dict.fromkeys(("encoder_embed_path", "decoder_embed_path", "quantization_config_path",
                     "sentencepiece_model", "sentencepiece_model_path", "bpe_codes",
                     "gpt2_encoder_json", "gpt2_vocab_bpe", "bpe_vocab_file", "bpe_merges",
                     "bpe_vocab", "lang_dict", "source_dict", "target_dict", "fixed_dictionary",
                     "extra_data", "sampling_weights_from_file"),
                    "reads a file outside the run that its records would not name"),
    "tensorboard_logdir": "moves the TensorBoard event files the recipe writes into the run's "
                          "own tensorboard/ (tensorboard --logdir $DEEPNET_WORK/runs shows "
                          "every run)",
    **dict.fromkeys(("log_file", "aim_repo", "wandb_project", "azureml_logging"),
                    "writes the training log outside the run (or off this machine); the run's "
                    "train.log has every logged value: python -m "
                    "deepnet_fairseq.recipes.reporting.curves RUN_DIR plots them"),
    # renamed or missing checkpoints would be neither resumed nor evaluated; --no-save stays
    # allowed: a run that saves nothing (the GPU check's throughput runs) asks for it
    **dict.fromkeys(("checkpoint_suffix", "no_last_checkpoints"),
                    "changes the checkpoints the recipe resumes, averages and evaluates "
                    "(checkpoints/checkpoint_last.pt and checkpoint_*_N.pt); "
                    "SAVE_INTERVAL_UPDATES and AVERAGE_LAST set how often and how many"),
    "plasma_path": "puts a data store outside the run; the recipe loads the data itself",
    "help": "prints fairseq-train's options instead of training; run fairseq-train --help",
    "user_dir": "is set by the recipe (its plugin, deepnet_fairseq): another would load code "
                "that the run's records do not name",
}


# The splits the recipe trains and validates on, and its validation: the records say the run
# trained on DATA/bin's train split, and its status (ok / diverged) and the report read the
# valid split's loss from the log; an option here would make them say something else, or end
# a full training in "no validation loss in the log".
SPLITS = {
    **dict.fromkeys(("train_subset", "valid_subset", "combine_valid_subsets"),
                    "changes the split the run trains or validates on (the records say train "
                    "and valid of the prepared data; the test split is evaluation's)"),
    **dict.fromkeys(("disable_validation", "max_valid_steps"),
                    "removes or cuts short the validation the run's status and report are read "
                    "from (its valid loss)"),
}


class _Refused(Exception):
    """argparse's error or exit while a TRAIN_ARGS check parses: a message, not an exit."""


def _quiet(parser):
    """PARSER with argparse's exits and prints turned into _Refused (it is only asked)."""
    def fail(*args, message=None, **kwargs):
        raise _Refused(message or (args[-1] if args else ""))

    parser.error = parser.exit = fail
    parser.print_help = parser.print_usage = lambda *args, **kwargs: None
    return parser


def fairseq_train_parser(argv: List[str]):
    """fairseq-train's own parser for the command line ARGV, built as fairseq builds it (the
    architecture's, task's, optimizer's and other chosen components' options added), so that
    it knows every option and alias fairseq-train would accept there."""
    import logging

    from fairseq import options

    from ... import register

    register()  # the plugin's architectures and options, as fairseq-train's --user-dir adds them

    utils_log = logging.getLogger("fairseq.utils")  # "--user-dir=... already imported"
    level = utils_log.level
    utils_log.setLevel(logging.WARNING)
    try:
        parser = _quiet(options.get_training_parser())
        options.parse_args_and_arch(parser, argv, parse_known=True)
    finally:
        utils_log.setLevel(level)
    return parser


class _Seen(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        namespace.seen.append((self.dest, option_string))


def train_args_dests(extra: List[str], parser, strict: bool = True) -> List[Tuple[str, str]]:
    """(destination, option string) of every option of EXTRA as PARSER would read it: its
    option strings, abbreviations where it allows them, --opt=value, -xVALUE, found by
    argparse itself (a parser with PARSER's options that only notes which one it met)."""
    shadow = _quiet(argparse.ArgumentParser(add_help=False, allow_abbrev=parser.allow_abbrev,
                                            prefix_chars=parser.prefix_chars))
    for action in parser._actions:
        if action.option_strings:  # the positionals are the recipe's (the data directory)
            shadow.add_argument(*action.option_strings, dest=action.dest, nargs=action.nargs,
                                const=action.const, action=_Seen)
    found, unknown = shadow.parse_known_args(extra, argparse.Namespace(seen=[]))
    if unknown and strict:
        raise _Refused(f"fairseq-train would not accept {' '.join(unknown)} (no such option "
                       "here, or a value with no option before it)")
    return found.seen


def check_train_args(extra: List[str], own: List[str]) -> None:
    """Refuse TRAIN_ARGS options (``extra``) that set what the recipe's command (``own``) or a
    setting decides, or that read or write outside the run, by the destination fairseq-train's
    parser gives them, so that no alias (-a for --arch, -s/-t for the languages) gets by; and
    options fairseq-train would not accept, before anything is written."""
    if not extra:
        return
    user_dir = own[own.index("--user-dir"):own.index("--user-dir") + 2] if "--user-dir" in own \
        else []
    try:  # as fairseq builds it, with the recipe's own plugin (an extra --user-dir is refused)
        parser = fairseq_train_parser([*own, *extra, *user_dir])
    except Exception as err:  # a bad value in EXTRA (_Refused); refused below, or as this
        parser, problem = fairseq_train_parser(own), str(err) or repr(err)
    else:
        problem = None
    try:
        seen = train_args_dests(extra, parser)
    except _Refused as err:
        raise SettingError(f"TRAIN_ARGS: {err}") from None
    # [0]: the data directory; not strict: EXTRA may have chosen another architecture
    ours = {dest for dest, _ in train_args_dests(own[1:], parser, strict=False)}
    long_of = {action.dest: max(action.option_strings, key=len) for action in parser._actions
               if action.option_strings}
    refused = []
    for dest, option in seen:
        named = option if option == long_of[dest] else f"{option} ({long_of[dest]})"
        if dest in OUTSIDE or dest in SPLITS:
            refused.append(f"{named} {OUTSIDE.get(dest) or SPLITS[dest]}")
        elif dest in SETTING_OF_DEST:
            refused.append(f"{named} is set by the recipe from {SETTING_OF_DEST[dest]}: set "
                           "that instead")
        elif dest in ours:
            refused.append(f"{named} is set by the recipe: the run's records would not say "
                           "what it trained")
    if refused or problem:
        raise SettingError("TRAIN_ARGS: " + "; ".join(refused or [
            f"fairseq-train would refuse it: {problem}"]))


def peak_lr(cfg: Settings) -> str:
    """fairseq's --lr: LR, or with LR_BASE_LAYERS set, LR moved from that depth to the run's
    by the rule LR x (LR_BASE_LAYERS / L)^LR_DEPTH_POWER, L the mean layers per side."""
    base = cfg.int("LR_BASE_LAYERS")
    if not base:
        return cfg["LR"]
    layers = (cfg.int("ENC_LAYERS") + cfg.int("DEC_LAYERS")) / 2
    return f"{cfg.float('LR') * (base / layers) ** cfg.float('LR_DEPTH_POWER'):.6g}"


def train_command(cfg: Settings, layout: Layout, method: List[str], task: List[str],
                  python: str = sys.executable) -> List[str]:
    """The exact command line of one node's training launch."""
    from ... import USER_DIR

    where = paths(cfg)
    args = [where["BIN"], "--user-dir", USER_DIR, *task, *method,
            "--encoder-embed-dim", cfg["EMBED_DIM"], "--encoder-ffn-embed-dim", cfg["FFN_DIM"],
            "--encoder-attention-heads", cfg["HEADS"], "--decoder-embed-dim", cfg["EMBED_DIM"],
            "--decoder-ffn-embed-dim", cfg["FFN_DIM"], "--decoder-attention-heads", cfg["HEADS"],
            "--share-all-embeddings", "--dropout", cfg["DROPOUT"],
            "--optimizer", "adam", "--adam-betas", cfg["ADAM_BETAS"], "--lr", peak_lr(cfg),
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", cfg["WARMUP"],
            "--warmup-init-lr", cfg["WARMUP_INIT_LR"], "--clip-norm", cfg["CLIP_NORM"],
            "--weight-decay", cfg["WEIGHT_DECAY"],
            "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", cfg["LABEL_SMOOTHING"],
            "--max-update", cfg["MAX_UPDATE"], "--max-epoch", cfg["MAX_EPOCH"],
            "--seed", cfg["SEED"],
            "--max-tokens", str(layout.max_tokens or cfg["MAX_TOKENS"]),
            "--update-freq", str(layout.update_freq),
            "--ddp-backend", cfg["DDP_BACKEND"], "--num-workers", cfg["NUM_WORKERS"],
            # always explicit: fairseq's default is every visible GPU, which would undo the
            # update-freq computed for this world size
            "--distributed-world-size", str(layout.world)]
    if layout.device == "cpu":
        args.append("--cpu")
        if layout.world > 1:
            args += ["--distributed-backend", "gloo"]
    if layout.precision == "fp16":
        args += ["--fp16", "--fp16-init-scale", cfg["FP16_INIT_SCALE"],
                 "--fp16-scale-window", cfg["FP16_SCALE_WINDOW"],
                 "--min-loss-scale", cfg["MIN_LOSS_SCALE"]]
    elif layout.precision == "bf16":
        args.append("--bf16")
    if layout.checkpoint_activations:
        args.append("--checkpoint-activations")
    if layout.memory:
        args += layout.memory.extra_flags  # ZeRO-1, memory-efficient fp16
    args += per_tensor_steps(layout, method, args)
    args += ["--save-dir", where["CHECKPOINTS"],
             # fairseq's own TensorBoard logging (its master process: train_inner, train and
             # valid scalars), beside the run's log, for the tools users look with
             "--tensorboard-logdir", where["TENSORBOARD"],
             "--save-interval-updates", cfg["SAVE_INTERVAL_UPDATES"],
             "--keep-interval-updates", cfg["AVERAGE_LAST"], "--no-epoch-checkpoints",
             "--log-format", "simple", "--log-interval", cfg["LOG_INTERVAL"]]
    extra = train_args_of(cfg)
    check_train_args(extra, args)
    args += extra  # last: options the recipe does not set

    # fairseq-train, or fairseq_train_compat (fairseq-train's cli_main with its fixes) where
    # fairseq 0.12 alone fails: several CPU processes under torchrun, bf16 off TPUs, fp16 on
    # CPU; and under every torchrun, whose workers it makes die with torchrun
    compat = layout.precision == "bf16" or layout.launcher == "torchrun" or (
        layout.device == "cpu" and (layout.world > 1 or layout.precision == "fp16"))
    module = "deepnet_fairseq.fairseq_train_compat" if compat else "fairseq_cli.train"
    if layout.launcher == "torchrun":
        launch = ["torchrun"]
        if layout.nnodes == 1:
            launch += ["--standalone"]  # torchrun picks a free port on this node
        else:
            launch += ["--nnodes", str(layout.nnodes), "--node_rank", str(layout.node_rank),
                       "--master_addr", layout.master_addr, "--master_port",
                       str(layout.master_port)]
        return launch + ["--nproc_per_node", str(layout.nproc), "-m", module, *args]
    program = [python, "-m", module] if compat else ["fairseq-train"]
    if layout.launcher == "srun":
        # fairseq reads SLURM_PROCID / SLURM_LOCALID / the node list itself (_infer_slurm_init)
        return ["srun", "--nodes", str(layout.nnodes), "--ntasks-per-node", str(layout.nproc),
                *program, *args, "--distributed-port", str(layout.master_port)]
    return program + args


def evaluate_command(cfg: Settings, python: str = sys.executable,
                     dry_run: bool = False) -> List[str]:
    """python -m deepnet_fairseq.recipes.evaluation.evaluate for the run: average, decode, score."""
    from ... import USER_DIR

    where = paths(cfg)
    declared = cfg.declaration.task

    def read(name):
        return _bin_list(cfg, name, dry_run)

    directions, task = declared.directions(cfg, read), declared.generate_args(cfg, read)
    score = (["--tokenized-bleu"] if cfg.flag("TOKENIZED_BLEU") else []) + \
        (["--compound-split"] if cfg.flag("COMPOUND_SPLIT") else []) + \
        (["--multilingual"] if declared.language_tokens else [])  # evaluate: see its --help
    generate = [where["BIN"], "--user-dir", USER_DIR, "--gen-subset", "test",
                "--beam", cfg["BEAM"], "--lenpen", cfg["LENPEN"], "--max-len-a", cfg["MAX_LEN_A"],
                "--max-len-b", cfg["MAX_LEN_B"], "--max-tokens", str(cfg.int("MAX_TOKENS") * 2),
                "--bpe", "sentencepiece",
                "--sentencepiece-model", os.path.join(where["DATA_DIR"], "spm.model"),
                # fairseq 0.12.3's batch_by_size drops the last batch when its size is not a
                # multiple of --required-batch-size-multiple (8 by default): that would
                # silently drop test sentences
                "--required-batch-size-multiple", "1"]
    if cfg["DEVICE"] == "cpu":
        generate.append("--cpu")
    elif cfg["PRECISION"] in ("fp16", "bf16"):
        generate.append(f"--{cfg['PRECISION']}")
    return [python, "-m", "deepnet_fairseq.recipes.evaluation.evaluate",
            "--run-dir", where["RUN_DIR"], "--average-last", cfg["AVERAGE_LAST"],
            "--directions", directions,
            "--references", where["RAW"], *score, "--", *generate, *task]


QUIET_IMPORT_WARNINGS = ("ignore::FutureWarning:fairscale.experimental.nn.offload",)
"""Python warning filters (``-W`` syntax) for fairseq-train's processes: fairscale 0.4.13, which
fairseq imports before it loads the plugin (whose own filter, in ``deepnet_fairseq/__init__``,
comes too late there), warns twice about torch's deprecated AMP decorators it uses; nothing a
user can act on. Other warnings are left alone."""


def train_environment(env: Mapping[str, str]) -> dict:
    """ENV for fairseq-train's processes: ``PYTHONWARNINGS`` with ``QUIET_IMPORT_WARNINGS``
    first, so that a user's own PYTHONWARNINGS, after them, still decides (the later wins)."""
    own = env.get("PYTHONWARNINGS", "")
    return {**env, "PYTHONWARNINGS": ",".join([*QUIET_IMPORT_WARNINGS, *([own] if own else [])])}


def print_settings(cfg: Settings, step: str, out=None) -> None:
    # sys.stderr looked up at the call: a default bound at import misses a redirected stderr
    print(f"[{cfg.dataset}/{step}] settings ({PREFIX}<NAME> or <NAME> in the environment win "
          f"over the presets):\n{cfg.describe()}", file=out or sys.stderr)


# ---- command line ---------------------------------------------------------------------------
