"""The depth law of a multilingual sweep: the paper's Table 2 and Figure 8 in miniature.

    python -m deepnet_fairseq.recipes.reporting.depth_law RUNS --out DIR [--force]

RUNS is a directory of run directories of a multilingual recipe (``WORK/runs``, or what
``recipes.reporting.curves --export`` kept of them). Written into DIR:

* ``depth_law.md``: every run with what it cost and what it scored, as Table 2 (layers, width,
  non-embedding parameters, training FLOPs, training hours, BLEU X->En, En->X and their
  average); the fit BLEU = A ln d + B (d: layers in all) of each series with two depths or
  more, with R^2, beside the same fit of the paper's Table 2 rows;
* ``depth_law.csv``: the rows, as the table;
* ``depth_law.png``: average BLEU against depth, this study's series and fits beside the
  paper's, and between them the same runs against their parameters (depth or size?).

A series is a row label of the sweep's report (``report.collect``: the method, and the settings
that tell its runs apart), so the runs of a depth sweep that share their settings, the rule
``LR_BASE_LAYERS`` that moves the learning rate with depth included, are one series; a run
that differs in another setting (a wider shallow model, a second learning rate) is a series of
its own, and a point of the plot. A series whose rate moves with depth by ``LR_BASE_LAYERS=K``
starts from the run of its other settings at K layers a side: there the rule leaves the rate
as it is, so that run is the series' model at its base depth, trained once and fitted in both
series (``deepnet-6L-6L+LR=0.002`` in the series of ``deepnet-50L-50L+LR=0.002+LR_BASE_LAYERS=6``).

Size and cost, so that a shallow-and-wide control can be matched to a deep model:

* non-embedding parameters: the attention, feed-forward and LayerNorm weights of every layer
  of a Post-LN Transformer of that width (``layer_parameters``; a method's few extra scalars
  or a final LayerNorm are left out);
* training FLOPs: the usual 6 x parameters x tokens, with the shared output projection
  (width x vocabulary) counted as a parameter that every target token uses, and the tokens
  TOKENS_PER_UPDATE x updates (a bound: batches are filled to under the limit, and padding
  counts); attention's length-squared term is left out (sentences of some 15 pieces);
* training hours: fairseq's ``train_wall`` over the run's logged intervals, each once
  (``fairseq_log.train_seconds``), on whatever machine ran it.
"""

import csv
import io
import math
import os
import re
import sys
from typing import Dict, List

from .. import cli_parser, save_png, write_atomically
from ...plotting import pyplot
from ...storage.fileio import (add_force_argument, check_tool_output, ensure_directory,
                                one_line_os_errors)
from ..datasets import DATASETS
from ...storage.records import read_record
from . import report
from .report import Fit, fit_log
from .curves import training_seconds
from ..run.memory import parameter_count

WRITTEN = ("depth_law.md", "depth_law.csv", "depth_law.png")
FIELDS = ["run", "label", "method", "encoder_layers", "decoder_layers", "layers", "width",
          "peak_lr", "params_m", "train_pflops", "train_hours", "num_updates", "status",
          "x_en", "en_x", "avg", "distinct_share"]


def layer_parameters(width: int, ffn: int, encoder_layers: int, decoder_layers: int) -> int:
    """Non-embedding parameters of a Post-LN Transformer encoder-decoder: per encoder layer
    self-attention (4 projections with biases), the feed-forward block and two LayerNorms; per
    decoder layer also encoder attention and a third LayerNorm: the memory plan's count
    without a vocabulary."""
    return parameter_count(encoder_layers, decoder_layers, width, ffn, 0)


def _setting(config: Dict, name: str) -> str:
    return config.get("settings", {}).get(name, {}).get("value", "")


def _peak_lr(config: Dict) -> str:
    """The --lr the run was launched with (LR, moved by LR_BASE_LAYERS where set)."""
    command = config.get("command") or []
    return command[command.index("--lr") + 1] if "--lr" in command[:-1] else ""


def size_and_cost(row: Dict, run_dir: str) -> Dict:
    """ROW's width, peak lr, parameters, training FLOPs and hours, from its records."""
    config = read_record(os.path.join(run_dir, "config.json"), "run-config") or {}
    out = {"width": "", "peak_lr": _peak_lr(config), "params_m": "", "train_pflops": "",
           "train_hours": ""}
    try:
        width, ffn = int(_setting(config, "EMBED_DIM")), int(_setting(config, "FFN_DIM"))
    except ValueError:  # a record without the model's width: no size to give
        return out
    params = layer_parameters(width, ffn, row["encoder_layers"], row["decoder_layers"])
    out.update(width=width, params_m=round(params / 1e6, 3))
    try:
        tokens = int(_setting(config, "TOKENS_PER_UPDATE")) * int(row["num_updates"])
        vocab = int(_setting(config, "VOCAB"))
        out["train_pflops"] = round(6 * (params + width * vocab) * tokens / 1e15, 4)
    except (TypeError, ValueError):
        pass
    seconds = training_seconds(run_dir)
    if seconds:
        out["train_hours"] = round(seconds[max(seconds)] / 3600, 3)
    return out


def rows_of(runs_dir: str, dataset: str) -> List[Dict]:
    unreadable: List[str] = []
    rows = []
    for row in report.collect(dataset, runs_dir, unreadable):
        row = {**row, **size_and_cost(row, os.path.join(runs_dir, row["run"]))}
        if report.ignores_its_source(row):  # trained, but writes the same few sentences for
            # every input: its BLEU is a language model's, no point of a depth law
            row["status"] = f"ignores its source ({float(row['distinct_share']):.1%} distinct)"
        ok = row["status"] == "ok"
        row.update(avg=row["bleu"] if ok else "", x_en=row["x_en"] if ok else "",
                   en_x=row["en_x"] if ok else "")
        rows.append(row)
    return sorted(rows, key=lambda r: (r["label"], r["layers"], r["run"]))


def _rule_base_run(row: Dict) -> str:
    """The run a series moved by LR_BASE_LAYERS=K starts from (the module's docstring), by the
    run names of ``spec.settings.run_name``; "" for a run without the rule."""
    rule = re.search(r"\+LR_BASE_LAYERS=(\d+)(?=\+|$)", row["run"])
    depth = f"{row['method']}-{row['encoder_layers']}L-{row['decoder_layers']}L"
    if not rule or not row["run"].startswith(depth):
        return ""
    without_rule = row["run"][len(depth):rule.start()] + row["run"][rule.end():]
    return f"{row['method']}-{rule.group(1)}L-{rule.group(1)}L{without_rule}"


def series_members(rows: List[Dict]) -> Dict[str, List[Dict]]:
    """The scored runs of each series, by depth (a rule series with its base depth's run)."""
    scored = {r["run"]: r for r in rows if r["status"] == "ok" and r["avg"] != ""}
    members: Dict[str, Dict[str, Dict]] = {}
    for row in scored.values():
        base = scored.get(_rule_base_run(row))
        for member in (row, base) if base else (row,):
            members.setdefault(row["label"], {})[member["run"]] = member
    return {label: sorted(runs.values(), key=lambda r: (r["layers"], r["run"]))
            for label, runs in members.items()}


def series_points(rows: List[Dict]) -> Dict[str, List]:
    """(layers in all, average BLEU) of each series' scored runs, by depth."""
    return {label: sorted({(r["layers"], float(r["avg"])) for r in runs})
            for label, runs in series_members(rows).items()}


def size_points(rows: List[Dict]) -> Dict[str, List]:
    """(parameters without embeddings in millions, average BLEU) of each series' scored runs:
    depth and width on one axis, so that a shallow, wide control stands beside the deep runs
    it was matched to."""
    return {label: sorted({(float(r["params_m"]), float(r["avg"])) for r in runs})
            for label, runs in series_members(rows).items()}


def fits(rows: List[Dict]) -> Dict[str, Fit]:
    return {label: fit for label, pts in series_points(rows).items() if (fit := fit_log(pts))}


def paper_fits(dataset: str) -> Dict[str, Fit]:
    """The same fit of the paper's rows, per method of its table (baseline, DeepNet)."""
    points: Dict[str, list] = {}
    for ref in DATASETS[dataset].paper:
        if ref.bleu is not None:
            points.setdefault(ref.method or "paper", []).append(
                (ref.encoder_layers + ref.decoder_layers, ref.bleu))
    return {method: fit for method, pts in points.items() if (fit := fit_log(pts))}


def _fit_text(fit: Fit) -> str:
    r2 = "2 points: exact" if fit.r2 is None else f"{fit.r2:.3f}"
    return f"{fit.a:.2f} | {fit.b:.2f} | {r2} | {fit.points}"


def _cell(value, spec: str = "") -> str:
    return "" if value in ("", None) else format(value, spec)


def markdown(dataset: str, rows: List[Dict]) -> str:
    out = [f"# {dataset}: BLEU by depth, size and cost\n",
           "Average BLEU over the directions (detokenised sacreBLEU), as the paper's Table 2; "
           "parameters without embeddings; FLOPs and hours of training (the module's docstring "
           "says how they are counted).\n",
           "| series | layers | width | peak lr | params (M) | train PFLOPs | train h | updates "
           "| X->En | En->X | Avg | status |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['label']} | {r['encoder_layers']}L-{r['decoder_layers']}L | {r['width']} "
                   f"| {r['peak_lr']} | {_cell(r['params_m'], '.2f')} | "
                   f"{_cell(r['train_pflops'], '.3f')} | {_cell(r['train_hours'], '.2f')} | "
                   f"{r['num_updates']} | {r['x_en']} | {r['en_x']} | {r['avg']} | {r['status']} |")
    out += ["\nThe depth law, BLEU = A ln d + B (d: layers in all), fitted by least squares:\n",
            "| series | A | B | R^2 | points |", "|---|---|---|---|---|"]
    out += [f"| {label} | {_fit_text(fit)} |" for label, fit in sorted(fits(rows).items())]
    out += [f"| paper: {method} | {_fit_text(fit)} |"
            for method, fit in sorted(paper_fits(dataset).items())]
    if DATASETS[dataset].paper:
        out.append("\nThe paper's rows (Table 2, average BLEU over its directions):\n")
        out += [f"- {ref.label}, {ref.encoder_layers}L-{ref.decoder_layers}L: {ref.bleu}"
                for ref in DATASETS[dataset].paper]
    return "\n".join(out) + "\n"


def plot(path: str, dataset: str, rows: List[Dict]) -> None:
    """Three panels: this study's average BLEU by depth with its fits, the same runs by
    parameters (depth or size?), the paper's Table 2 with its fits. A series of one depth
    at the study's width is a tuning cell (grey); one at another width, the control (a star)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    ours, by_size, paper = axes
    fitted, sizes, members = fits(rows), size_points(rows), series_members(rows)
    widths = [r["width"] for r in rows]
    study_width = max(set(widths), key=widths.count)
    single = "one depth only (tuning cells)"
    for label, pts in sorted(series_points(rows).items()):
        width = members[label][0]["width"]
        if label in fitted:
            line, = ours.plot(*zip(*pts), "o")
            style = {"color": line.get_color()}
            by_size.plot(*zip(*sizes[label]), "o-", **style)
            _draw_fit(ours, fitted[label], pts, line.get_color(), label)
        elif width != study_width:  # the matched-size control: its own entry
            style = {"marker": "*", "markersize": 12, "color": "black", "linestyle": "none"}
            ours.plot(*zip(*pts), label=f"{label}: {width} wide", **style)
            by_size.plot(*zip(*sizes[label]), **style)
        else:  # a rate tried at one depth: context for the series, not a law of its own
            style = {"marker": "o", "color": "0.6", "markerfacecolor": "none",
                     "linestyle": "none"}
            ours.plot(*zip(*pts), label=single, **style)
            by_size.plot(*zip(*sizes[label]), **style)
            single = None  # one legend entry for all of them
    refs = [r for r in DATASETS[dataset].paper if r.bleu is not None]
    for method, fit in sorted(paper_fits(dataset).items()):
        pts = sorted((r.encoder_layers + r.decoder_layers, r.bleu) for r in refs
                     if (r.method or "paper") == method)
        line, = paper.plot(*zip(*pts), "s")
        _draw_fit(paper, fit, pts, line.get_color(), method)
    depths = ({r["layers"] for r in rows}, {r.encoder_layers + r.decoder_layers for r in refs})
    for ax, shown in ((ours, depths[0]), (paper, depths[1])):
        report.depth_axis(ax, sorted(shown))
        ax.set_xlabel("layers (encoder + decoder)")
    _size_axis(by_size, [x for pts in sizes.values() for x, _ in pts])
    for ax, title in zip(axes, ("this study, by depth", "the same runs by size: depth or width?",
                                "the paper (Table 2, OPUS-100)")):
        ax.set_title(title, fontsize=10)
    for ax in axes:
        ax.set_ylabel("average BLEU")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # below the panel: a series' laws name it in
            # full, too long to sit over its points
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    save_png(fig, path)
    plt.close(fig)


def _size_axis(ax, sizes: List[float]) -> None:
    """A log axis of millions of parameters, ticked 1-2-5 in plain numbers."""
    ax.set_xscale("log")
    ticks = [m * 10 ** e for e in range(-2, 5) for m in (1, 2, 5)]
    if sizes:
        ticks = [t for t in ticks if min(sizes) / 2 <= t <= max(sizes) * 2]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("parameters without embeddings (millions)")


def _draw_fit(ax, fit: Fit, pts, colour, series: str) -> None:
    """The fitted law over the series' depths, its legend entry naming the series and the law."""
    lo, hi = pts[0][0], pts[-1][0]
    xs = [lo * (hi / lo) ** (i / 40) for i in range(41)]
    r2 = "" if fit.r2 is None else f", R^2 {fit.r2:.2f}"
    ax.plot(xs, [fit.a * math.log(x) + fit.b for x in xs], "--", color=colour,
            label=f"{series}: {fit.a:.2f} ln d + {fit.b:.2f}{r2}")


@one_line_os_errors
def main(argv: List[str] = None) -> None:
    parser = cli_parser("python -m deepnet_fairseq.recipes.reporting.depth_law", __doc__)
    parser.add_argument("runs", metavar="RUNS", help="directory of run directories")
    parser.add_argument("--out", required=True, help="directory to write the report into")
    multilingual = [name for name, declared in DATASETS.items() if declared.task.depth_law]
    parser.add_argument("--dataset", default=multilingual[0], choices=multilingual,
                        help=f"the multilingual dataset the runs trained on [{multilingual[0]}]")
    add_force_argument(parser, "the report's existing files in --out")
    args = parser.parse_args(argv)
    check_tool_output(args.out, [args.runs], args.force, "--out", files=WRITTEN)
    rows = rows_of(args.runs, args.dataset)
    if not rows:
        parser.error(f"no run with a status under {args.runs}")
    ensure_directory(args.out)
    table = io.StringIO()
    writer = csv.DictWriter(table, FIELDS, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(os.path.join(args.out, "depth_law.csv"), table.getvalue())
    write_atomically(os.path.join(args.out, "depth_law.md"), markdown(args.dataset, rows))
    plot(os.path.join(args.out, "depth_law.png"), args.dataset, rows)
    print(f"{len(rows)} runs; wrote {', '.join(WRITTEN)} into {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
