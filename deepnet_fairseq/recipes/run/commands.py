"""The exact commands of a run, from its settings and layout: fairseq-train's (launcher, task,
method, optimizer, batch, precision, checkpoints, logs) and the evaluation's. Planning only:
nothing here runs a process or writes a file (``runner.py`` and ``evaluation/step.py`` do).
A user's TRAIN_ARGS are checked against what the recipe sets in ``train_args.py``."""

import os
import sys
from typing import List, Optional

from ... import methods
from ...criterions import SOURCE_GAIN
from .layout import Layout
from .train_args import check_train_args, train_args_of
from ..spec.paths import paths
from ..spec.settings import SettingError, Settings


def prepare_first(cfg: Settings) -> str:
    """How a step refused for want of prepared data tells the user to prepare it: the dataset's
    script where the checkout has one (scripts/<dataset>/ is optional), else the program."""
    script = f"scripts/{cfg.dataset}/prepare.sh"
    if not os.path.isfile(os.path.join(cfg.repo, script)):
        script = f"python -m deepnet_fairseq.recipes {cfg.dataset} prepare"
    return f"run {script} first (same SIZE and DEEPNET_WORK)"


def _bin_list(cfg: Settings, name: str, dry_run: bool) -> str:
    path = os.path.join(paths(cfg).bin, name)
    if os.path.isfile(path):
        return open(path, encoding="utf-8").read().strip()
    if dry_run:
        return f"<{name} of prepare.sh>"
    raise SettingError(f"no {path}; {prepare_first(cfg)}")


def task_args(cfg: Settings, dry_run: bool = False) -> List[str]:
    """fairseq-train's task options for the dataset."""
    return cfg.declaration.task.train_args(cfg, lambda name: _bin_list(cfg, name, dry_run))


def method_args(cfg: Settings) -> List[str]:
    try:
        return list(methods.get(cfg.text.run.method).train_args(cfg.run.enc_layers,
                                                          cfg.run.dec_layers))
    except ValueError as err:
        raise SettingError(f"METHOD={cfg.text.run.method}: {err}") from None


# need the optimizer to step each tensor (nn/layernorm_lr.py)
PER_TENSOR_OPTIONS = ("--deepnorm-ln-lr-multiplier", "--depth-transfer",
                      "--layers-lr-multiplier")


def per_tensor_steps(layout: Layout, method: List[str], args: List[str]) -> List[str]:
    """``--fp16-no-flatten-grads`` when a method option (the LayerNorm lr multiplier) must see
    each parameter tensor but fairseq's fp16/bf16 optimizer would flatten them all into one
    buffer; the same memory (an fp32 master copy per tensor instead of one flat copy), and the
    launch summary says so."""
    needs = any(option in method for option in PER_TENSOR_OPTIONS)
    flat = layout.precision in ("fp16", "bf16") and not any(
        flag in args for flag in ("--fp16-no-flatten-grads", "--memory-efficient-fp16"))
    return ["--fp16-no-flatten-grads"] if needs and flat else []


def depth_rule_factor(cfg: Settings) -> Optional[float]:
    """LR_BASE_LAYERS's factor (LR_BASE_LAYERS / L)^LR_DEPTH_POWER, L the mean layers per side;
    None where the rule is off."""
    base = cfg.optim.lr_base_layers
    if not base:
        return None
    layers = (cfg.run.enc_layers + cfg.run.dec_layers) / 2
    return (base / layers) ** cfg.optim.lr_depth_power


def peak_lr(cfg: Settings) -> str:
    """fairseq's --lr: LR, or LR moved by LR_BASE_LAYERS's rule where it moves every parameter
    (LR_DEPTH_SCOPE=all)."""
    factor = depth_rule_factor(cfg)
    if factor is None or cfg.optim.lr_depth_scope != "all":
        return cfg.text.optim.lr
    return f"{cfg.optim.lr * factor:.6g}"


def layers_lr_args(cfg: Settings) -> List[str]:
    """--layers-lr-multiplier where LR_BASE_LAYERS's rule moves the layers alone
    (LR_DEPTH_SCOPE=layers): the layers train at LR x factor, the rest at LR."""
    factor = depth_rule_factor(cfg)
    if factor is None or cfg.optim.lr_depth_scope != "layers":
        return []
    return ["--layers-lr-multiplier", f"{factor:.6g}"]


def train_command(cfg: Settings, layout: Layout, method: List[str], task: List[str],
                  python: str = sys.executable) -> List[str]:
    """The exact command line of one node's training launch."""
    from ... import USER_DIR

    where = paths(cfg)
    # the values as resolved (their text: 1e-7 stays 1e-7 on the command line)
    model, optim, machine = cfg.text.model, cfg.text.optim, cfg.text.machine
    method = [*method, *layers_lr_args(cfg)]
    args = [where.bin, "--user-dir", USER_DIR, *task, *method,
            "--encoder-embed-dim", model.embed_dim, "--encoder-ffn-embed-dim", model.ffn_dim,
            "--encoder-attention-heads", model.heads, "--decoder-embed-dim", model.embed_dim,
            "--decoder-ffn-embed-dim", model.ffn_dim, "--decoder-attention-heads", model.heads,
            "--share-all-embeddings", "--dropout", optim.dropout,
            "--optimizer", "adam", "--adam-betas", optim.adam_betas, "--lr", peak_lr(cfg),
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", optim.warmup,
            "--warmup-init-lr", optim.warmup_init_lr, "--clip-norm", optim.clip_norm,
            "--weight-decay", optim.weight_decay,
            "--criterion", (SOURCE_GAIN if cfg.run.source_gain
                            else "label_smoothed_cross_entropy"),
            "--label-smoothing", optim.label_smoothing,
            "--max-update", optim.max_update, "--max-epoch", optim.max_epoch,
            "--seed", cfg.text.run.seed,
            "--max-tokens", str(layout.max_tokens or machine.max_tokens),
            "--update-freq", str(layout.update_freq),
            "--ddp-backend", (layout.memory.ddp_backend(machine.ddp_backend) if layout.memory
                              else machine.ddp_backend),
            "--num-workers", machine.num_workers,
            # always explicit: fairseq's default is every visible GPU, which would undo the
            # update-freq computed for this world size
            "--distributed-world-size", str(layout.world)]
    if layout.device == "cpu":
        args.append("--cpu")
        if layout.world > 1:
            args += ["--distributed-backend", "gloo"]
    if layout.precision == "fp16":
        args += ["--fp16", "--fp16-init-scale", machine.fp16_init_scale,
                 "--fp16-scale-window", machine.fp16_scale_window,
                 "--min-loss-scale", machine.min_loss_scale]
    elif layout.precision == "bf16":
        args.append("--bf16")
    if layout.checkpoint_activations:
        args.append("--checkpoint-activations")
    if layout.memory:
        args += layout.memory.extra_flags  # ZeRO-1, memory-efficient fp16, per-tensor masters
    args += per_tensor_steps(layout, method, args)
    args += ["--save-dir", where.checkpoints,
             # fairseq's own TensorBoard logging (its master process: train_inner, train and
             # valid scalars), beside the run's log, for the tools users look with
             "--tensorboard-logdir", where.tensorboard,
             "--save-interval-updates", optim.save_interval_updates,
             "--keep-interval-updates", optim.average_last, "--no-epoch-checkpoints",
             "--log-format", "simple", "--log-interval", cfg.text.run.log_interval]
    extra = train_args_of(cfg)
    check_train_args(extra, args)
    args += extra  # last: options the recipe does not set
    return _launched(layout, args, python)


def _launched(layout: Layout, args: List[str], python: str) -> List[str]:
    """fairseq-train's ARGS as the layout's launcher starts them on this node."""
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
    score = (["--tokenized-bleu"] if cfg.eval.tokenized_bleu else []) + \
        (["--compound-split"] if cfg.eval.compound_split else []) + \
        (["--multilingual"] if declared.language_tokens else [])  # evaluate: see its --help
    generate = [where.bin, "--user-dir", USER_DIR, "--gen-subset", "test",
                "--beam", cfg.text.eval.beam, "--lenpen", cfg.text.eval.lenpen,
                "--max-len-a", cfg.text.eval.max_len_a, "--max-len-b", cfg.text.eval.max_len_b,
                "--max-tokens", str(cfg.machine.max_tokens * 2),
                "--bpe", "sentencepiece",
                "--sentencepiece-model", os.path.join(where.data_dir, "spm.model"),
                # fairseq 0.12.3's batch_by_size drops the last batch when its size is not a
                # multiple of --required-batch-size-multiple (8 by default): that would
                # silently drop test sentences
                "--required-batch-size-multiple", "1"]
    if cfg.text.where.device == "cpu":
        generate.append("--cpu")
    elif cfg.text.machine.precision in ("fp16", "bf16"):
        generate.append(f"--{cfg.text.machine.precision}")
    return [python, "-m", "deepnet_fairseq.recipes.evaluation.evaluate",
            "--run-dir", where.run_dir, "--average-last", cfg.text.optim.average_last,
            "--directions", directions,
            "--references", where.raw, *score, "--", *generate, *task]
