"""Validation-loss curves of recipe runs, and a record of them to keep with the results.

    python -m deepnet_fairseq.recipes.reporting.curves RUN [RUN ...] --plot curves.png
    python -m deepnet_fairseq.recipes.reporting.curves runs/wmt17-mini/runs/deepnet-50L-50L \\
        --export results/x

A RUN is a run directory of the recipes (``WORK/runs/<run>``, whose ``train.log`` holds
fairseq-train's validation records: loss in bits and update count) or a directory written by
``--export`` (whose ``valid_loss.csv`` holds the same curve).

* ``--plot PNG``: validation loss against updates, one line per run, named by its directory;
* ``--export DIR``: for each run, ``DIR/<run>/`` with its ``command.sh``, ``status.json``,
  ``eval.json`` (the scores, where the run was evaluated) and ``valid_loss.csv``: the few KB of
  a run worth committing, without its checkpoints.
"""

import argparse
import csv
import io
import os
import sys
from typing import Dict, List

from .. import save_png, write_atomically
from ...fairseq_log import valid_curve
from ...plotting import pyplot
from ...storage.fileio import (add_force_argument, check_tool_output, copy_file,
                                one_line_os_errors)

CURVE_FILE = "valid_loss.csv"
EXPORTED = (("command.sh", "command.sh"), ("status.json", "status.json"), ("config.json", "config.json"),
            (os.path.join("eval", "eval.json"), "eval.json"))


def read_curve(run_dir: str) -> Dict[int, float]:
    """The run's validation curve, from its train.log or an exported valid_loss.csv."""
    log = os.path.join(run_dir, "train.log")
    if os.path.isfile(log):
        with open(log, encoding="utf-8", errors="replace") as handle:
            curve = valid_curve(handle.read())
    elif os.path.isfile(os.path.join(run_dir, CURVE_FILE)):
        with open(os.path.join(run_dir, CURVE_FILE), encoding="utf-8") as handle:
            curve = {int(r["num_updates"]): float(r["valid_loss_bits"])
                     for r in csv.DictReader(handle)}
    else:
        raise FileNotFoundError(f"{run_dir} has neither train.log nor {CURVE_FILE}: give a run "
                                f"directory of the recipes (WORK/runs/<run>) or one --export wrote")
    if not curve:
        raise ValueError(f"{run_dir}: no validation record yet (fairseq validates at the end of "
                         f"each epoch and every --validate-interval-updates)")
    return curve


def curve_csv(curve: Dict[int, float]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["num_updates", "valid_loss_bits"])
    writer.writerows([n, f"{loss:g}"] for n, loss in curve.items())
    return out.getvalue()


def export(run_dir: str, out_dir: str) -> str:
    """Copy the run's small records and its curve to OUT_DIR/<run>; returns that directory."""
    name = os.path.basename(os.path.normpath(run_dir))
    target = os.path.join(out_dir, name)
    curve = read_curve(run_dir)  # before anything is written: a run without a curve writes nothing
    for source, kept in EXPORTED:
        if os.path.isfile(os.path.join(run_dir, source)):
            copy_file(os.path.join(run_dir, source), os.path.join(target, kept))
    write_atomically(os.path.join(target, CURVE_FILE), curve_csv(curve))
    return target


def plot(path: str, curves: Dict[str, Dict[int, float]], title: str) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, curve in curves.items():
        ax.plot(list(curve), list(curve.values()), "o-", markersize=3, label=name)
    ax.set_xlabel("updates")
    ax.set_ylabel("validation loss (bits per token)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    save_png(fig, path)
    plt.close(fig)


@one_line_os_errors
def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepnet_fairseq.recipes.reporting.curves",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories")
    parser.add_argument("--plot", metavar="PNG", help="draw the curves into this PNG")
    parser.add_argument("--title", default="validation loss", help="the plot's title")
    parser.add_argument("--export", metavar="DIR", help="keep each run's records in DIR/<run>/")
    add_force_argument(parser, "an existing PNG or exported file")
    args = parser.parse_args(argv)
    if not (args.plot or args.export):
        parser.error("nothing to do: give --plot PNG and/or --export DIR")
    # the run directories are the inputs: nothing is written into one (DIR/<run> may not be a
    # run itself); every file written is checked before the first is
    inputs = [*args.runs, *(os.path.join(r, name) for r in args.runs
                            for name in ("train.log", CURVE_FILE))]
    for run in args.runs if args.export else ():
        target = os.path.join(args.export, os.path.basename(os.path.normpath(run)))
        for _, kept in EXPORTED + ((CURVE_FILE, CURVE_FILE),):
            check_tool_output(os.path.join(target, kept), inputs, args.force, "--export")
    if args.plot:
        check_tool_output(args.plot, inputs, args.force, "--plot")
    try:
        curves = {os.path.basename(os.path.normpath(r)): read_curve(r) for r in args.runs}
    except (OSError, ValueError) as error:
        parser.error(str(error))
    for name, curve in curves.items():
        last = list(curve)[-1]
        print(f"{name}: {len(curve)} validations, {curve[last]:.3f} bits at update {last}",
              file=sys.stderr)
    if args.export:
        for run in args.runs:
            print(f"wrote {export(run, args.export)}", file=sys.stderr)
    if args.plot:
        plot(args.plot, curves, args.title)
        print(f"wrote {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
