"""The learning-rate transfer report of a depth study: does the peak learning rate tuned at one
depth stay the best at the others (``--depth-transfer``, docs/methods.md)?

    python -m deepnet_fairseq.recipes.reporting.lr_transfer RUNS [RUNS ...] --out DIR [--eps-check]

RUNS: directories holding run directories (a sweep's ``WORK/runs``, or results exported by
``python -m deepnet_fairseq.recipes.reporting.curves --export``), each run from a sweep whose
``RUNS`` gave the learning rate, e.g. ``RUNS="deepnet:18:18:LR=0.0005 deepnet:18:18:LR=0.002"``.
Every figure comes from the records the runs wrote: ``status.json`` (method, depths, status, last
validation loss), ``config.json`` (the resolved settings: LR) and ``eval.json`` (BLEU).

Writes into DIR:

* ``lr_transfer.png``: last validation loss (label-smoothed, bits) against the peak learning rate, one panel per
  method, one curve per depth, each depth's optimum marked (the plot of the muP papers); a run
  that diverged is drawn at the top edge;
* ``lr_transfer.md`` and ``lr_transfer.csv``: every cell (loss, BLEU), each depth's optimum and
  its drift from the shallowest depth's optimum (1.00: the optimum transfers), and the power k
  of depth that drift implies, lr ~ L^-k (0: it transfers; 1/2: a 1/sqrt(L) rule), where both
  optima lie inside their grids;
* with ``--eps-check`` (reads ``checkpoints/checkpoint_last.pt`` of each run, so the runs' own
  directories, not exported ones): ``eps_check.md``, for each method, depth and parameter group,
  the median over the group's entries of sqrt(v) (Adam's second moment after training) in units
  of the epsilon that parameter trains with. Below 1, epsilon dominates Adam's denominator and
  the step is smaller than the learning rate says. (--depth-transfer applies its epsilon
  multiplier e as gradient / e during the step, so the stored v is that of gradient / e and the
  ratio to the plain --adam-eps is the ratio of the true sqrt(v) to epsilon x e.)
"""

import csv
import io
import math
import os
import sys
from collections import defaultdict
from typing import Dict, List, Optional

from .. import cli_parser, save_png, write_atomically
from ...plotting import pyplot
from ...storage.evaluations import current_evaluation
from ...storage.records import read_record, read_status, run_names
from ...storage.fileio import (add_force_argument, check_tool_output, ensure_directory,
                                one_line_os_errors)

FIELDS = ["method", "encoder_layers", "decoder_layers", "lr", "status", "last_valid_loss",
          "bleu", "run"]


def read_runs(roots: List[str]) -> List[Dict]:
    """One row per run directory under ROOTS that has a status and a learning rate."""
    rows = []
    for root in roots:
        if not os.path.isdir(root):
            raise ValueError(f"{root} is not a directory of runs")
        for name in run_names(root):
            run = os.path.join(root, name)
            status = read_status(run)
            config = read_record(os.path.join(run, "config.json"), "run-config")
            if status is None or config is None or "LR" not in config.get("settings", {}):
                continue  # not a run of a sweep with a learning-rate axis (or not started)
            scores = current_evaluation(run)[0] or {}  # none of other checkpoints
            bleu = next(iter(scores.get("directions", {}).values()), {}).get("tok_bleu")
            rows.append({"method": status["method"], "encoder_layers": status["encoder_layers"],
                         "decoder_layers": status["decoder_layers"],
                         "lr": float(config["settings"]["LR"]["value"]),
                         "status": status["status"], "last_valid_loss": status.get("last_valid_loss"),
                         "bleu": bleu, "run": run})
    return rows


def cells(rows: List[Dict]) -> Dict[str, Dict[int, Dict[float, Dict]]]:
    """method -> layers per side -> lr -> row (the N = M cells of the study)."""
    table: Dict = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        if row["encoder_layers"] == row["decoder_layers"]:
            table[row["method"]][row["encoder_layers"]][row["lr"]] = row
    return table


def trained(row: Dict) -> bool:
    return row["status"] == "ok" and row["last_valid_loss"] is not None


def optimum(by_lr: Dict[float, Dict]) -> Optional[float]:
    """The learning rate of the lowest last validation loss among the runs that trained."""
    ok = {lr: row["last_valid_loss"] for lr, row in by_lr.items() if trained(row)}
    return min(ok, key=ok.get) if ok else None


def bracketed(by_lr: Dict[float, Dict]) -> bool:
    """Whether the optimum of these runs has a trained-or-tried rate on each side of it."""
    best = optimum(by_lr)
    return best is not None and min(by_lr) < best < max(by_lr)


def markdown(table) -> str:
    lines = ["| method | layers per side | learning rate: last validation loss (label-smoothed, bits), BLEU | "
             "optimum | optimum / shallowest's | k of lr ~ L^-k |", "|---|---|---|---|---|---|"]
    for method, depths in sorted(table.items()):
        base = min(depths)
        shallow = optimum(depths[base])
        for depth in sorted(depths):
            by_lr = depths[depth]
            best = optimum(by_lr)
            text = "; ".join(
                f"{lr:g}: " + (f"{row['last_valid_loss']:.3f}, "
                               f"{'-' if row['bleu'] is None else row['bleu']}" if trained(row)
                               else row["status"]) for lr, row in sorted(by_lr.items()))
            drift = f"{best / shallow:.2f}" if best and shallow else "-"
            # the power of depth that the drift from the shallowest depth implies (0 where the
            # rate transfers unchanged, 1/2 for a 1/sqrt(L) rule), where both optima are
            # bracketed: a rate at a grid's edge, or the only one tried, is a bound, not an optimum
            power = (f"{-math.log(best / shallow) / math.log(depth / base) + 0.0:.2f}"
                     if depth > base and bracketed(by_lr) and bracketed(depths[base]) else "-")
            edge = (" (at the edge)" if best in (min(by_lr), max(by_lr)) and len(by_lr) > 1
                    else "")
            lines.append(f"| {method} | {depth} | {text} | {best:g}{edge} | {drift} | {power} |"
                         if best else f"| {method} | {depth} | {text} | none trained | - | - |")
    return "\n".join(lines) + "\n"


def plot(path: str, table) -> None:
    plt = pyplot()

    methods = sorted(table)
    fig, axes = plt.subplots(1, len(methods), figsize=(3.6 * len(methods), 3.6), sharey=True,
                             squeeze=False)
    losses = [r["last_valid_loss"] for d in table.values() for by_lr in d.values()
              for r in by_lr.values() if trained(r)]
    top = max(losses) + 0.3 if losses else 1.0
    for ax, method in zip(axes[0], methods):
        for depth in sorted(table[method]):
            by_lr = table[method][depth]
            lrs = sorted(by_lr)
            ys = [by_lr[lr]["last_valid_loss"] if trained(by_lr[lr]) else top for lr in lrs]
            line, = ax.plot(lrs, ys, "o-", markersize=4, label=f"{depth}L-{depth}L")
            best = optimum(by_lr)
            if best is not None:
                ax.plot([best], [by_lr[best]["last_valid_loss"]], "*", markersize=14,
                        color=line.get_color(), markeredgecolor="black")
        ax.set_xscale("log", base=2)
        ax.set_title(method, fontsize=9)
        ax.set_xlabel("peak learning rate")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("last validation loss\n(label-smoothed, bits); * optimum")
    save_png(fig, path)
    plt.close(fig)


# --- the epsilon check ------------------------------------------------------------------------

def group_of(name: str) -> str:
    """The parameter group of a fairseq Transformer parameter, for the epsilon check."""
    side = name.split(".")[0]
    if ".layers." not in name:
        return f"{side} embeddings/final LN/output"
    if "layer_norm" in name or "layernorm" in name:
        return f"{side} layers: LayerNorms"
    return f"{side} layers: " + ("biases" if name.endswith("bias") else "weights")


def eps_ratios(run_dir: str) -> Dict[str, float]:
    """Parameter group -> median of sqrt(v) / --adam-eps after training, from the run's last
    checkpoint (the model is built by fairseq, with its data's dictionaries, to name the
    optimizer's parameters in the order the trainer gave them)."""
    import torch
    from fairseq import checkpoint_utils

    from ... import register
    from ...storage.checkpoint_io import read_fairseq_checkpoint

    register()
    path = os.path.join(run_dir, "checkpoints", "checkpoint_last.pt")
    state = read_fairseq_checkpoint(path)
    optimizer = state["last_optimizer_state"]
    [model], _, _ = checkpoint_utils.load_model_ensemble_and_task([path], state=dict(state))
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    (group,) = optimizer["param_groups"]
    if len(group["params"]) != len(names):
        raise ValueError(f"{path}: the optimizer holds {len(group['params'])} parameters, the "
                         f"model {len(names)}: not a plain Adam state of this model")
    eps = group["eps"]
    ratios = defaultdict(list)
    for index, name in zip(group["params"], names):
        v = optimizer["state"][index]["exp_avg_sq"].float()
        ratios[group_of(name)].append(v.sqrt().flatten() / eps)
    return {g: torch.cat(r).median().item() for g, r in sorted(ratios.items())}


def eps_markdown(rows: List[Dict]) -> str:
    lines = ["| method | layers per side | learning rate | parameter group | "
             "median sqrt(v) / epsilon |", "|---|---|---|---|---|"]
    for row in rows:
        for group, ratio in row["ratios"].items():
            lines.append(f"| {row['method']} | {row['encoder_layers']} | {row['lr']:g} | "
                         f"{group} | {ratio:.3g}{' (epsilon dominates)' if ratio < 1 else ''} |")
    return "\n".join(lines) + "\n"


# the files main writes into --out
WRITTEN = ("lr_transfer.csv", "lr_transfer.md", "lr_transfer.png", "eps_check.md")


@one_line_os_errors
def main(argv: List[str] = None) -> None:
    parser = cli_parser("python -m deepnet_fairseq.recipes.reporting.lr_transfer", __doc__)
    parser.add_argument("roots", nargs="+", metavar="RUNS", help="directories of run directories")
    parser.add_argument("--out", required=True, help="directory to write the report into")
    parser.add_argument("--eps-check", action="store_true",
                        help="also read each run's last checkpoint: Adam's sqrt(v) against "
                             "epsilon per parameter group (eps_check.md)")
    add_force_argument(parser, "the report's existing files in --out")
    args = parser.parse_args(argv)
    # --out is a directory of this program's own files (not into a directory of runs it reads)
    check_tool_output(args.out, args.roots, args.force, "--out", files=WRITTEN)
    try:
        rows = read_runs(args.roots)
    except ValueError as error:
        parser.error(str(error))
    if not rows:
        parser.error(f"no run with a status and a learning rate under {', '.join(args.roots)}")
    table = cells(rows)
    ensure_directory(args.out)
    out = io.StringIO()
    writer = csv.DictWriter(out, FIELDS, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(sorted(({**r, "run": os.path.basename(r["run"])} for r in rows),
                            key=lambda r: (r["method"], r["encoder_layers"], r["lr"])))
    write_atomically(os.path.join(args.out, "lr_transfer.csv"), out.getvalue())
    write_atomically(os.path.join(args.out, "lr_transfer.md"), markdown(table))
    plot(os.path.join(args.out, "lr_transfer.png"), table)
    print(f"{len(rows)} runs; wrote lr_transfer.png, .md, .csv into {args.out}", file=sys.stderr)
    if args.eps_check:
        checked = []
        for row in sorted(rows, key=lambda r: (r["method"], r["encoder_layers"], r["lr"])):
            if trained(row) and os.path.isfile(os.path.join(row["run"], "checkpoints",
                                                            "checkpoint_last.pt")):
                print(f"eps check: {os.path.basename(row['run'])}", file=sys.stderr)
                checked.append({**row, "ratios": eps_ratios(row["run"])})
        write_atomically(os.path.join(args.out, "eps_check.md"), eps_markdown(checked))
        print(f"{len(checked)} runs checked; wrote eps_check.md", file=sys.stderr)


if __name__ == "__main__":
    main()
