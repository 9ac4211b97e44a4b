"""Validation-loss curves of recipe runs, and a record of them to keep with the results.

    python -m deepnet_fairseq.recipes.reporting.curves RUN [RUN ...] --plot curves.png
    python -m deepnet_fairseq.recipes.reporting.curves runs/wmt17-mini/runs/deepnet-50L-50L \\
        --export results/x

A RUN is a run directory of the recipes (``WORK/runs/<run>``, whose ``train.log`` holds
fairseq-train's validation records: loss in bits and update count) or a directory written by
``--export`` (whose ``valid_loss.csv`` holds the same curve).

* ``--plot PNG``: validation loss against updates, one line per run, named by its directory;
* ``--factors PNG``: one factor at a time, as the paper's Figure 7: runs named as a RUNS entry
  names them (``deepnet-18L-18L+LR=0.002``), the first RUN the base setting and every other
  one it with some settings changed; one panel per set of settings changed (LR, TOKENS_PER_UPDATE,
  EMBED_DIM with FFN_DIM, ...), each holding the base and the runs that change it;
* ``--export DIR``: for each run, ``DIR/<run>/`` with its ``command.sh``, ``status.json``,
  ``eval.json`` (the scores, where the run was evaluated) and ``valid_loss.csv`` (each
  validation's update, label-smoothed loss, nll, both in bits, and the training seconds spent
  up to it: fairseq's ``train_wall``, ``fairseq_log.train_seconds``): the few KB of a run worth committing, without its
  checkpoints.
"""

import bisect
import csv
import io
import os
import sys
from typing import Tuple, Dict, List, Optional

from .. import cli_parser, save_png, write_atomically
from ...storage.records import read_record, read_status
from ...fairseq_log import train_seconds, valid_curve, valid_nll_curve
from ...plotting import pyplot
from ...storage.evaluations import stale_because
from ...storage.fileio import (add_force_argument, check_tool_output, copy_file,
                               one_line_os_errors, remove_file)

CURVE_FILE = "valid_loss.csv"
SECONDS_COLUMN = "train_seconds"
NLL_COLUMN = "valid_nll_bits"
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


def training_seconds(run_dir: str) -> Optional[Dict[int, float]]:
    """{num_updates: training seconds up to it} of the run, from its train.log (every logged
    interval) or an exported valid_loss.csv (at each validation); None where neither says
    (a curve exported before the column was kept)."""
    log = os.path.join(run_dir, "train.log")
    if os.path.isfile(log):
        with open(log, encoding="utf-8", errors="replace") as handle:
            return train_seconds(handle.read()) or None
    path = os.path.join(run_dir, CURVE_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or not rows[0].get(SECONDS_COLUMN):
        return None
    return {int(r["num_updates"]): float(r[SECONDS_COLUMN]) for r in rows}


def curve_csv(curve: Dict[int, float], seconds: Optional[Dict[int, float]] = None,
              nll: Optional[Dict[int, float]] = None) -> str:
    """The curve as CSV; with SECONDS (``training_seconds``), the training seconds up to each
    validation: those of the last logged interval at or before it; with NLL, the validation
    nll in bits beside the label-smoothed loss (empty where a validation logged none)."""
    logged = sorted(seconds or ())
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["num_updates", "valid_loss_bits"] + ([NLL_COLUMN] if nll else [])
                    + ([SECONDS_COLUMN] if logged else []))
    for n, loss in curve.items():
        at = bisect.bisect_right(logged, n)
        writer.writerow([n, f"{loss:g}"]
                        + ([f"{nll[n]:g}" if n in nll else ""] if nll else [])
                        + ([f"{seconds[logged[at - 1]]:g}" if at else "0"] if logged else []))
    return out.getvalue()


def nll_curve(run_dir: str) -> Optional[Dict[int, float]]:
    """The run's validation nll curve from its train.log; None for an export (which keeps it
    in its valid_loss.csv already, where it was exported with it)."""
    log = os.path.join(run_dir, "train.log")
    if not os.path.isfile(log):
        return None
    with open(log, encoding="utf-8", errors="replace") as handle:
        return valid_nll_curve(handle.read()) or None


def export(run_dir: str, out_dir: str) -> str:
    """Copy the run's small records and its curve to OUT_DIR/<run>; returns that directory."""
    name = os.path.basename(os.path.normpath(run_dir))
    target = os.path.join(out_dir, name)
    curve = read_curve(run_dir)  # before anything is written: a run without a curve writes nothing
    stale = stale_because(run_dir)  # scores of checkpoints the run no longer holds: left out
    for source, kept in EXPORTED:
        if kept == "eval.json" and stale:
            if os.path.isfile(os.path.join(target, kept)):  # an earlier export's: not this run's
                remove_file(os.path.join(target, kept))
            print(f"{name}: eval.json left out: {stale}", file=sys.stderr)
        elif os.path.isfile(os.path.join(run_dir, source)):
            copy_file(os.path.join(run_dir, source), os.path.join(target, kept))
    write_atomically(os.path.join(target, CURVE_FILE),
                     curve_csv(curve, training_seconds(run_dir), nll_curve(run_dir)))
    return target


def tokens_per_update(run_dir: str) -> int:
    """The run's tokens per update, as its status.json records it (ValueError where it does
    not: a run trained before it was recorded)."""
    status = read_status(run_dir) or {}
    if not isinstance(status.get("tokens_per_update"), int):
        raise ValueError(f"{run_dir}: its status.json does not record its tokens per update, "
                         "which --tokens needs")
    return status["tokens_per_update"]


def short_labels(names: List[str]) -> Tuple[Dict[str, str], str]:
    """({run: what tells it from the others}, the settings every run shares): run names carry
    every setting (METHOD-NL-ML+K=V...), too long for a legend, and mostly the same."""
    settings = {name: overrides(name) for name in names}
    shared = {k: v for k, v in settings[names[0]].items()
              if all(settings[n].get(k) == v for n in names)} if names else {}
    labels = {}
    for name in names:
        own = [f"{k}={v}" for k, v in settings[name].items() if k not in shared]
        labels[name] = " ".join([name.split("+")[0], *own])
    return labels, " ".join(f"{k}={v}" for k, v in shared.items())


def plot(path: str, curves: Dict[str, Dict[int, float]], title: str,
         tokens: Optional[Dict[str, int]] = None) -> None:
    """Validation loss against updates, or with TOKENS (each run's tokens per update) against
    the tokens trained on, which compares runs of other batch sizes. The right panel is the
    second half of the axis, on its own scale: where runs differ by hundredths of a bit, which
    the first updates' fall would flatten."""
    plt = pyplot()

    labels, shared = short_labels(list(curves))
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 4.6))
    points = {name: ([n * (tokens[name] / 1e6 if tokens else 1) for n in curve],
                     list(curve.values())) for name, curve in curves.items()}
    half = max((x[-1] for x, _ in points.values() if x), default=0) / 2
    for ax, start in zip(axes, (None, half)):
        for name, (x, y) in points.items():
            kept = [(a, b) for a, b in zip(x, y) if start is None or a >= start]
            ax.plot([a for a, _ in kept], [b for _, b in kept], "o-", markersize=3,
                    label=labels[name])
        ax.set_xlabel("tokens trained on (millions)" if tokens else "updates")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("validation loss (bits per token)")
    axes[1].set_title("second half, zoomed", fontsize=9)
    fig.suptitle(title + (f"\n(every run: {shared})" if shared else ""), fontsize=9)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(3, max(1, len(names))), fontsize=8)
    fig.tight_layout(rect=(0, 0.06 + 0.04 * ((len(names) - 1) // 3), 1, 1))
    save_png(fig, path)
    plt.close(fig)


def overrides(name: str) -> Dict[str, str]:
    """The KEY=VALUE settings a run's name carries (``settings.run_name``: METHOD-NL-ML+K=V...)."""
    return dict(part.split("=", 1) for part in name.split("+")[1:] if "=" in part)


def factor_panels(base: str, others: List[str]) -> Dict[str, List[str]]:
    """{the settings changed: the runs changing them} of OTHERS against BASE, each by name; a
    run that changes nothing, or is not BASE's method and depth, is an error."""
    stem, fixed = base.split("+")[0], overrides(base)
    panels: Dict[str, List[str]] = {}
    for name in others:
        changed = {k: v for k, v in overrides(name).items() if fixed.get(k) != v}
        if name.split("+")[0] != stem or not changed:
            raise ValueError(f"{name} is not {base} with some settings changed: --factors "
                             "takes the base run first, then runs named as it plus KEY=VALUE")
        panels.setdefault(" and ".join(sorted(changed)), []).append(name)
    return panels


def recorded_settings(run_dir: str) -> Dict[str, str]:
    """The settings the run was resolved with (its config.json), {} where it has none."""
    record = read_record(os.path.join(run_dir, "config.json"), "run-config") or {}
    return {name: entry.get("value", "") for name, entry in record.get("settings", {}).items()}


def plot_factors(path: str, curves: Dict[str, Dict[int, float]], title: str,
                 base_settings: Dict[str, str]) -> None:
    """One panel per factor (``factor_panels``), the base run in each, named by its values
    (BASE_SETTINGS, its resolved settings; "base" where they do not say)."""
    plt = pyplot()
    base, *others = curves
    panels = factor_panels(base, others)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.0), sharey=True,
                             squeeze=False)
    for ax, (factor, names) in zip(axes[0], panels.items()):
        keys = factor.split(" and ")
        for name in [base, *names]:
            values = {**base_settings, **overrides(name)}
            label = ", ".join(f"{k}={values.get(k, 'base')}" for k in keys)
            curve = curves[name]
            ax.plot(list(curve), list(curve.values()), "o-", markersize=3,
                    label=label + (" (base)" if name == base else ""))
        ax.set_title(factor, fontsize=9)
        ax.set_xlabel("updates")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("validation loss (bits per token)")
    fig.suptitle(f"{title}: {base}", fontsize=9)
    save_png(fig, path)
    plt.close(fig)


@one_line_os_errors
def main(argv: List[str] = None) -> None:
    parser = cli_parser("python -m deepnet_fairseq.recipes.reporting.curves", __doc__)
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories")
    parser.add_argument("--plot", metavar="PNG", help="draw the curves into this PNG")
    parser.add_argument("--factors", metavar="PNG",
                        help="one panel per factor changed from the first RUN (Figure 7)")
    parser.add_argument("--tokens", action="store_true",
                        help="--plot against the tokens trained on (updates x each run's tokens "
                             "per update), not updates: runs of other batch sizes side by side")
    parser.add_argument("--title", default="validation loss", help="the plot's title")
    parser.add_argument("--export", metavar="DIR", help="keep each run's records in DIR/<run>/")
    add_force_argument(parser, "an existing PNG or exported file")
    args = parser.parse_args(argv)
    if not (args.plot or args.export or args.factors):
        parser.error("nothing to do: give --plot PNG, --factors PNG and/or --export DIR")
    if args.factors:
        names = [os.path.basename(os.path.normpath(r)) for r in args.runs]
        try:
            factor_panels(names[0], names[1:])
        except ValueError as error:
            parser.error(str(error))
        if len(names) < 2:
            parser.error("--factors: give the base run, then the runs that change it")
    # the run directories are the inputs: nothing is written into one (DIR/<run> may not be a
    # run itself); every file written is checked before the first is
    inputs = [*args.runs, *(os.path.join(r, name) for r in args.runs
                            for name in ("train.log", CURVE_FILE))]
    for run in args.runs if args.export else ():
        target = os.path.join(args.export, os.path.basename(os.path.normpath(run)))
        for _, kept in EXPORTED + ((CURVE_FILE, CURVE_FILE),):
            check_tool_output(os.path.join(target, kept), inputs, args.force, "--export",
                              given=args.export)
    for png, option in ((args.plot, "--plot"), (args.factors, "--factors")):
        if png:
            check_tool_output(png, inputs, args.force, option)
    try:
        curves = {os.path.basename(os.path.normpath(r)): read_curve(r) for r in args.runs}
        tokens = {os.path.basename(os.path.normpath(r)): tokens_per_update(r)
                  for r in args.runs} if args.tokens else None
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
        plot(args.plot, curves, args.title, tokens)
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.factors:
        plot_factors(args.factors, curves, args.title, recorded_settings(args.runs[0]))
        print(f"wrote {args.factors}", file=sys.stderr)


if __name__ == "__main__":
    main()
