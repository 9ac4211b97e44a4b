"""Measure the model update ||F(x, theta_t) - F(x, theta_0)|| over the first training steps, for
several methods and depths (the paper's Figure 5).

Each model is built through fairseq (parser, arch hook, task: ``methods.get(name).train_args``
plus the 64-128-2 width), trained by fairseq's own ``Trainer`` (its optimizer, lr scheduler,
criterion, gradient normalisation) on a fixed cycle of generated reverse-copy batches, and after
every update probed on one fixed held-out batch x:

    F(x, theta)  = the decoder's last hidden states (the input of the output projection,
                   B x T x d), computed in eval mode (dropout off) without gradients;
    update(t)    = mean over the B*T target positions of the L2 norm (over d) of
                   F(x, theta_t) - F(x, theta_0).

Every layer of these models ends in a LayerNorm, so ||F|| is about sqrt(d) and update(t) is
bounded by about 2 sqrt(d); the depth dependence shows before that bound is reached, hence
the small default learning rate. Same seed => same data and the same draws for every model.

    deepnet-model-update --output-dir runs/model-update          # Figure 5, minutes on CPU
    deepnet-model-update --methods deepnet --depths 6,100 --steps 3 --seed 1,2,3 \
        --freeze layernorm --attribute                            # docs/findings.md

``--freeze`` leaves parameter groups out of the optimizer; ``--attribute`` splits the update
into the groups' contributions (``attribution``: definition, and how well they sum).
"""

from __future__ import annotations  # (torch in annotations: it is imported where it computes)

import argparse
import math
import os
import statistics
from typing import Dict, List, Sequence

from . import attribution, common
from ..storage.fileio import one_line_os_errors, scratch_directory
from ..plotting import pyplot
from .common import (Progress, add_methods_option, atomic_savefig,
                     build_training, positive_ints, reverse_copy_batch, write_dictionary)

FIELDS = ("method", "encoder_layers", "decoder_layers", "seed", "step", "lr", "loss", "update")
GROUP_FIELDS = ("method", "encoder_layers", "decoder_layers", "seed", "step", "group", "trained",
                "alone", "contribution", "share")


def get_parser():
    parser = argparse.ArgumentParser(
        prog="deepnet-model-update", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_methods_option(parser, default=("post_ln", "deepnet"))
    parser.add_argument("--depths", type=positive_ints, default=[6, 18, 50, 100],
                        help="layers per side (N-N models), comma-separated; default: 6,18,50,100")
    parser.add_argument("--steps", type=int, default=30, help="training updates per model (30)")
    parser.add_argument("--optimizer", choices=("adam", "sgd"), default="adam",
                        help="fairseq optimizer (adam: betas 0.9,0.98) (adam)")
    parser.add_argument("--lr", type=float, default=1e-4,
                        help="peak learning rate (1e-4)")
    parser.add_argument("--warmup", type=int, default=0,
                        help="linear warmup updates of fairseq's inverse_sqrt schedule, from lr 0; "
                             "0 = constant lr (default)")
    parser.add_argument("--batch-size", type=int, default=8, help="sentences per batch (8)")
    parser.add_argument("--length", type=int, default=10, help="words per sentence (10)")
    parser.add_argument("--batches", type=int, default=4,
                        help="fixed training batches, used in turn (4)")
    parser.add_argument("--vocab", type=int, default=100, help="generated vocabulary size (100)")
    parser.add_argument("--seed", type=positive_ints, default=[1],
                        help="seeds of data and models, comma-separated: one run per seed, "
                             "method and depth (1)")
    parser.add_argument("--freeze", type=attribution.group_names, default=[],
                        help=f"parameter groups left untrained, comma-separated, of: "
                             f"{', '.join(attribution.GROUPS)} (see diagnostics/attribution.py)")
    parser.add_argument("--attribute", action="store_true",
                        help="also attribute the update to the parameter groups after every "
                             "step: model_update_groups.csv and model_update_groups.png")
    parser.add_argument("--report-step", type=int, default=1,
                        help="step of the printed across-seed table and the shares plot (1)")
    parser.add_argument("--output-dir", default="model-update",
                        help="where model_update.csv and model_update.png go (./model-update)")
    parser.add_argument("--fairseq-args", default="",
                        help="more fairseq-train options for every model, one quoted string "
                             "(e.g. \"--clip-norm 1.0\")")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    return parser


def fairseq_options(args) -> List[str]:
    opts = ["--optimizer", args.optimizer, "--lr", str(args.lr), "--dropout", "0",
            "--criterion", "cross_entropy", "--share-all-embeddings"]
    if args.optimizer == "adam":
        opts += ["--adam-betas", "(0.9, 0.98)"]
    if args.warmup > 0:
        opts += ["--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(args.warmup)]
    else:
        opts += ["--lr-scheduler", "fixed"]
    return opts + args.fairseq_args.split()


def features(model, sample) -> torch.Tensor:
    """F(x, theta): the decoder's last hidden states, B x T x d, eval mode, no gradients."""
    import torch

    was_training = model.training
    model.eval()
    with torch.no_grad():
        out, _ = model(**sample["net_input"], features_only=True)
    model.train(was_training)
    return out.float()


def update_norm(now: torch.Tensor, start: torch.Tensor) -> float:
    """Mean over positions of the L2 norm (over the hidden dimension) of the difference."""
    return (now - start).norm(dim=-1).mean().item()


def measure(data_dir: str, method: str, layers: int, args, seed: int):
    """Train one model for ``args.steps`` updates, recording the update after each: (rows,
    group rows), the latter empty unless ``args.attribute``."""
    import torch
    from fairseq.trainer import Trainer

    from ..models.method_transformers import initialise_from_batch

    cfg, task, model, criterion = build_training(data_dir, method, layers, fairseq_options(args),
                                                 seed=seed)
    attribution.freeze(model, args.freeze)  # before the Trainer builds its optimizer
    trainer = Trainer(cfg, task, model, criterion)
    generator = torch.Generator().manual_seed(seed)
    dictionary = task.source_dictionary
    batches = [reverse_copy_batch(dictionary, args.batch_size, args.length, generator)
               for _ in range(args.batches)]
    probe = reverse_copy_batch(dictionary, args.batch_size, args.length, generator)
    # theta_0 is the model as training starts: data-dependent init (Admin's profiling, which
    # training would run on its first batch) happens first, so it is not counted as an update
    initialise_from_batch(model, batches[0]["net_input"])
    start = features(model, probe)
    attribute = attribution.Attribution(model, lambda m: features(m, probe)) if args.attribute else None
    key = dict(method=method, encoder_layers=layers, decoder_layers=layers, seed=seed)
    rows = [dict(key, step=0, lr=trainer.get_lr(), loss=float("nan"), update=0.0)]
    group_rows = []
    for step in range(1, args.steps + 1):
        lr = trainer.get_lr()
        log = trainer.train_step([batches[(step - 1) % len(batches)]])
        loss = float(log["loss"]) if log is not None else float("nan")
        rows.append(dict(key, step=step, lr=lr, loss=loss,
                         update=update_norm(features(model, probe), start)))
        if attribute is not None:
            group_rows += [dict(key, step=step, **row) for row in attribute()]
    return rows, group_rows


def write_csv(path: str, rows: List[Dict]) -> None:
    common.write_csv(path, rows, FIELDS, ".6g")


def plot(path: str, rows: List[Dict], title: str) -> None:
    """One panel per method, one curve per depth (the mean over seeds, the band their range),
    shared y axis (the layout of Figure 5)."""
    plt = pyplot()
    method_list = list(dict.fromkeys(r["method"] for r in rows))
    depths = sorted({r["encoder_layers"] for r in rows})
    fig, axes = plt.subplots(1, len(method_list), figsize=(4.2 * len(method_list), 3.4),
                             sharey=True, squeeze=False)
    colors = plt.cm.viridis([i / max(1, len(depths) - 1) for i in range(len(depths))])
    for ax, method in zip(axes[0], method_list):
        for color, depth in zip(colors, depths):
            by_step: Dict[int, List[float]] = {}
            for r in rows:
                if r["method"] == method and r["encoder_layers"] == depth:
                    by_step.setdefault(r["step"], []).append(r["update"])
            steps = sorted(by_step)
            ax.plot(steps, [statistics.fmean(by_step[s]) for s in steps], color=color,
                    label=f"{depth}L-{depth}L")
            if any(len(v) > 1 for v in by_step.values()):
                ax.fill_between(steps, [min(by_step[s]) for s in steps],
                                [max(by_step[s]) for s in steps], color=color, alpha=0.2)
        ax.set_title(method)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(r"$\|F(x,\theta_t) - F(x,\theta_0)\|$")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    atomic_savefig(fig, path)
    plt.close(fig)


def spread(values: Sequence[float]) -> str:
    """``mean ± std (min-max, n)`` of values over seeds; one value as is."""
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return (f"{statistics.fmean(values):.4g} ± {statistics.stdev(values):.2g} "
            f"({min(values):.4g}-{max(values):.4g}, n={len(values)})")


def summary(rows: List[Dict], report_step: int) -> List[str]:
    """Per method: the update at a few steps per depth (mean over seeds) and the
    deepest/shallowest ratio; then at ``report_step`` each depth and the ratio across seeds
    (the ratio is taken per seed, same data and draws for both depths)."""
    lines = []
    steps = sorted({r["step"] for r in rows})
    shown = sorted({s for s in (1, 5, 10, 20, steps[-1]) if s in steps})
    for method in dict.fromkeys(r["method"] for r in rows):
        values: Dict[tuple, List[float]] = {}
        for r in rows:
            if r["method"] == method:
                values.setdefault((r["encoder_layers"], r["step"]), []).append(r["update"])
        by = {key: statistics.fmean(v) for key, v in values.items()}
        depths = sorted({d for d, _ in by})
        for depth in depths:
            text = " ".join(f"t={s}:{by[(depth, s)]:.4g}" for s in shown)
            lines.append(f"{method:10s} {depth:4d}L-{depth}L  {text}")
        if len(depths) > 1:
            lo, hi = depths[0], depths[-1]
            ratios = " ".join(f"t={s}:{by[(hi, s)] / by[(lo, s)]:.3g}" for s in shown
                              if by[(lo, s)] > 0)
            lines.append(f"{method:10s} ratio {hi}L/{lo}L  {ratios}")
        if report_step not in steps:
            continue
        per_seed = {(r["encoder_layers"], r["seed"]): r["update"] for r in rows
                    if r["method"] == method and r["step"] == report_step}
        seeds = sorted({seed for _, seed in per_seed})
        for depth in depths:
            lines.append(f"{method:10s} {depth:4d}L-{depth}L  step {report_step}, seeds "
                         f"{','.join(map(str, seeds))}: {spread([per_seed[(depth, s)] for s in seeds])}")
        if len(depths) > 1 and all(per_seed[(lo, s)] > 0 for s in seeds):
            ratios = [per_seed[(hi, s)] / per_seed[(lo, s)] for s in seeds]
            lines.append(f"{method:10s} ratio {hi}L/{lo}L step {report_step}: {spread(ratios)}")
    return lines


def group_summary(group_rows: List[Dict], report_step: int) -> List[str]:
    """Mean share of each group (and the interaction) per method and depth at ``report_step``."""
    lines = []
    shares: Dict[tuple, List[float]] = {}
    for r in group_rows:
        if r["step"] == report_step and r["group"] != "all":
            key = (r["method"], r["encoder_layers"], r["group"])
            shares.setdefault(key, []).append(r["share"])
    for method, depth in dict.fromkeys((m, d) for m, d, _ in shares):
        text = " ".join(f"{g}:{statistics.fmean(v):.3f}" for (m, d, g), v in shares.items()
                        if (m, d) == (method, depth))
        lines.append(f"{method:10s} {depth:4d}L-{depth}L  shares at step {report_step}: {text}")
    return lines


def plot_shares(path: str, group_rows: List[Dict], report_step: int, title: str) -> None:
    """One panel per method: per depth, a stacked bar of the groups' mean shares of the update
    at ``report_step`` (the interaction as its own segment; shares can be negative)."""
    plt = pyplot()
    rows = [r for r in group_rows if r["step"] == report_step and r["group"] != "all"]
    method_list = list(dict.fromkeys(r["method"] for r in rows))
    depths = sorted({r["encoder_layers"] for r in rows})
    groups = [g for g in (*attribution.GROUPS, "interaction") if any(r["group"] == g for r in rows)]
    fig, axes = plt.subplots(1, len(method_list), figsize=(1.2 + 1.1 * len(depths) * len(method_list),
                                                           3.4), sharey=True, squeeze=False)
    colors = dict(zip(groups, plt.cm.tab10(range(len(groups)))))
    for ax, method in zip(axes[0], method_list):
        positive, negative = [0.0] * len(depths), [0.0] * len(depths)
        for group in groups:
            means = []
            for depth in depths:
                v = [r["share"] for r in rows
                     if (r["method"], r["encoder_layers"], r["group"]) == (method, depth, group)]
                means.append(statistics.fmean(v) if v else 0.0)
            bottoms = [p if m >= 0 else n for m, p, n in zip(means, positive, negative)]
            ax.bar(range(len(depths)), means, bottom=bottoms, color=colors[group], label=group)
            positive = [p + max(m, 0) for m, p in zip(means, positive)]
            negative = [n + min(m, 0) for m, n in zip(means, negative)]
        ax.set_xticks(range(len(depths)), [f"{d}L" for d in depths])
        ax.axhline(0, color="black", lw=0.5)
        ax.set_title(method)
        ax.grid(alpha=0.3, axis="y")
    axes[0][0].set_ylabel(f"share of the update at step {report_step}")
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle(title, fontsize=9)
    atomic_savefig(fig, path)
    plt.close(fig)


@one_line_os_errors
def main(argv=None) -> None:
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.steps <= 0 or args.batch_size <= 0 or args.length <= 0 or args.batches <= 0:
        parser.error("--steps, --batch-size, --length and --batches must be positive")
    if args.vocab < 2:
        parser.error("--vocab must be at least 2")
    if not 1 <= args.report_step <= args.steps:
        parser.error(f"--report-step must be between 1 and --steps ({args.steps})")
    progress = Progress("deepnet-model-update", args.quiet)
    out = lambda name: os.path.join(args.output_dir, name)  # noqa: E731
    seeds = ",".join(map(str, args.seed))
    frozen = f", frozen: {','.join(args.freeze)}" if args.freeze else ""
    title = (f"64-128-2, {args.optimizer} lr {args.lr:g}, warmup {args.warmup}, "
             f"batch {args.batch_size}x{args.length + 1} tokens, seeds {seeds}{frozen} "
             f"{args.fairseq_args}".strip())
    rows: List[Dict] = []
    group_rows: List[Dict] = []
    with scratch_directory() as data_dir:
        write_dictionary(data_dir, args.vocab)
        for seed in args.seed:
            for method in args.methods:
                for layers in args.depths:
                    progress(f"{method} {layers}L-{layers}L seed {seed}: {args.steps} updates")
                    model_rows, model_group_rows = measure(data_dir, method, layers, args, seed)
                    bad = [r["step"] for r in model_rows if not math.isfinite(r["update"])]
                    if bad:
                        progress(f"  warning: non-finite update from step {bad[0]} (diverged)")
                    rows += model_rows
                    group_rows += model_group_rows
                    progress(f"  update at step {args.steps}: {model_rows[-1]['update']:.4g}")
                    # partial results survive an interrupted run
                    write_csv(out("model_update.csv"), rows)
                    if args.attribute:
                        common.write_csv(out("model_update_groups.csv"), group_rows,
                                         GROUP_FIELDS, ".6g")
    plot(out("model_update.png"), rows, title)
    written = ["model_update.csv", "model_update.png"]
    if args.attribute:
        plot_shares(out("model_update_groups.png"), group_rows, args.report_step, title)
        written += ["model_update_groups.csv", "model_update_groups.png"]
    for line in summary(rows, args.report_step) + group_summary(group_rows, args.report_step):
        print(line)
    print(f"wrote {', '.join(out(name) for name in written)}")


if __name__ == "__main__":
    main()
