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
"""

import argparse
import math
import os
import tempfile
from typing import Dict, List

import torch

from . import common
from .common import (Progress, add_methods_option, atomic_savefig,
                     build_training, positive_ints, pyplot, reverse_copy_batch, write_dictionary)

FIELDS = ("method", "encoder_layers", "decoder_layers", "step", "lr", "loss", "update")


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
    parser.add_argument("--seed", type=int, default=1, help="seed of data and models (1)")
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
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out, _ = model(**sample["net_input"], features_only=True)
    model.train(was_training)
    return out.float()


def update_norm(now: torch.Tensor, start: torch.Tensor) -> float:
    """Mean over positions of the L2 norm (over the hidden dimension) of the difference."""
    return (now - start).norm(dim=-1).mean().item()


def measure(data_dir: str, method: str, layers: int, args) -> List[Dict]:
    """Train one model for ``args.steps`` updates, recording the update after each."""
    from fairseq.trainer import Trainer

    from ..models.method_transformers import initialise_from_batch

    cfg, task, model, criterion = build_training(data_dir, method, layers, fairseq_options(args),
                                                 seed=args.seed)
    trainer = Trainer(cfg, task, model, criterion)
    generator = torch.Generator().manual_seed(args.seed)
    dictionary = task.source_dictionary
    batches = [reverse_copy_batch(dictionary, args.batch_size, args.length, generator)
               for _ in range(args.batches)]
    probe = reverse_copy_batch(dictionary, args.batch_size, args.length, generator)
    # theta_0 is the model as training starts: data-dependent init (Admin's profiling, which
    # training would run on its first batch) happens first, so it is not counted as an update
    initialise_from_batch(model, batches[0]["net_input"])
    start = features(model, probe)
    rows = [dict(method=method, encoder_layers=layers, decoder_layers=layers, step=0,
                 lr=trainer.get_lr(), loss=float("nan"), update=0.0)]
    for step in range(1, args.steps + 1):
        lr = trainer.get_lr()
        log = trainer.train_step([batches[(step - 1) % len(batches)]])
        loss = float(log["loss"]) if log is not None else float("nan")
        rows.append(dict(method=method, encoder_layers=layers, decoder_layers=layers, step=step,
                         lr=lr, loss=loss, update=update_norm(features(model, probe), start)))
    return rows


def write_csv(path: str, rows: List[Dict]) -> None:
    common.write_csv(path, rows, FIELDS, ".6g")


def plot(path: str, rows: List[Dict], title: str) -> None:
    """One panel per method, one curve per depth, shared y axis (the layout of Figure 5)."""
    plt = pyplot()
    method_list = list(dict.fromkeys(r["method"] for r in rows))
    depths = sorted({r["encoder_layers"] for r in rows})
    fig, axes = plt.subplots(1, len(method_list), figsize=(4.2 * len(method_list), 3.4),
                             sharey=True, squeeze=False)
    colors = plt.cm.viridis([i / max(1, len(depths) - 1) for i in range(len(depths))])
    for ax, method in zip(axes[0], method_list):
        for color, depth in zip(colors, depths):
            curve = [r for r in rows if r["method"] == method and r["encoder_layers"] == depth]
            ax.plot([r["step"] for r in curve], [r["update"] for r in curve], color=color,
                    label=f"{depth}L-{depth}L")
        ax.set_title(method)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(r"$\|F(x,\theta_t) - F(x,\theta_0)\|$")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    atomic_savefig(fig, path)
    plt.close(fig)


def summary(rows: List[Dict]) -> List[str]:
    """Per method: the update at a few steps per depth, and the deepest/shallowest ratio."""
    lines = []
    steps = sorted({r["step"] for r in rows})
    shown = [s for s in (1, 5, 10, 20, steps[-1]) if s in steps]
    shown = sorted(set(shown))
    for method in dict.fromkeys(r["method"] for r in rows):
        by = {(r["encoder_layers"], r["step"]): r["update"] for r in rows if r["method"] == method}
        depths = sorted({d for d, _ in by})
        for depth in depths:
            values = " ".join(f"t={s}:{by[(depth, s)]:.4g}" for s in shown)
            lines.append(f"{method:10s} {depth:4d}L-{depth}L  {values}")
        if len(depths) > 1:
            lo, hi = depths[0], depths[-1]
            ratios = " ".join(f"t={s}:{by[(hi, s)] / by[(lo, s)]:.3g}" for s in shown
                              if by[(lo, s)] > 0)
            lines.append(f"{method:10s} ratio {hi}L/{lo}L  {ratios}")
    return lines


def main(argv=None) -> None:
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.steps <= 0 or args.batch_size <= 0 or args.length <= 0 or args.batches <= 0:
        parser.error("--steps, --batch-size, --length and --batches must be positive")
    if args.vocab < 2:
        parser.error("--vocab must be at least 2")
    progress = Progress("deepnet-model-update", args.quiet)
    csv_path = os.path.join(args.output_dir, "model_update.csv")
    png_path = os.path.join(args.output_dir, "model_update.png")
    title = (f"64-128-2, {args.optimizer} lr {args.lr:g}, warmup {args.warmup}, "
             f"batch {args.batch_size}x{args.length + 1} tokens, seed {args.seed}")
    rows: List[Dict] = []
    with tempfile.TemporaryDirectory() as data_dir:
        write_dictionary(data_dir, args.vocab)
        for method in args.methods:
            for layers in args.depths:
                progress(f"{method} {layers}L-{layers}L: {args.steps} updates")
                model_rows = measure(data_dir, method, layers, args)
                bad = [r["step"] for r in model_rows if not math.isfinite(r["update"])]
                if bad:
                    progress(f"  warning: non-finite update from step {bad[0]} (diverged)")
                rows += model_rows
                progress(f"  update at step {args.steps}: {model_rows[-1]['update']:.4g}")
                write_csv(csv_path, rows)  # partial results survive an interrupted run
    plot(png_path, rows, title)
    for line in summary(rows):
        print(line)
    print(f"wrote {csv_path} and {png_path}")


if __name__ == "__main__":
    main()
