"""Collect a sweep's runs into the paper-shaped results: Markdown table, CSV and PNG plot.

    python -m deepnet_fairseq.recipes.reporting.report --dataset wmt17 --runs WORK/runs \\
        --out WORK/results

Reads every ``RUN/status.json`` (written by train.sh: method, depth, ok/diverged/failed) and
``RUN/eval/eval.json`` (written by evaluate.sh) under ``--runs`` and writes, atomically:

* ``results.csv``: one row per run, every number, the sacreBLEU signature and the paper's value;
* ``table.md``: WMT-17 / IWSLT-14 in the shape of the paper's Table 1 (a row per method, a
  column per depth, "diverged" where training diverged), OPUS-100 in the shape of Table 2
  (X->En, En->X and average per model) with the fit BLEU(d) = A ln d + B, d = N + M layers;
  the paper's numbers beside ours;
* ``bleu_vs_depth.png``: BLEU against the number of layers (log axis), one line per method,
  diverged/failed runs marked on the axis, the paper's points hollow, the OPUS-100 fit drawn;
* ``by_group.png`` (runs of more than one group of methods): a column per group, BLEU and the
  last validation loss against depth, DeepNet as the grey reference in each;
* with ``--data``: ``valid_loss.md`` and ``loss_vs_depth.png``, the last validation loss of
  each method and depth against the source-blind baseline (the depth study's table and plot).

With ``--data BIN`` (a single-pair binarised directory, as the sweep passes), a run that
trained but whose last validation nll is not below the source-blind baseline (the entropy of
the validation targets' unigram distribution, the loss of a model that ignores its source)
minus ``--margin`` bits is marked **stalled** (``deepnet-depth-study``'s verdict: it is a sweep).

Runs of one method and depth with different seeds (the seed their records hold) share a
cell: the mean BLEU and the spread (sample standard deviation over the seeds that trained), the
number of seeds and of those that diverged or ignore their source; the plots draw the mean with
the spread as an error bar. ``results.csv`` keeps one row per run, with its seed.

The table's BLEU is the paper's metric: tokenized BLEU with compound splitting for WMT-17,
detokenised sacreBLEU for OPUS-100 (averaged over directions) and IWSLT-14. A WMT-17-recipe run
evaluated without tokenized BLEU (``TOKENIZED_BLEU=0``: the quickstart's sizes) gets it here,
from its decoded test set (``eval/S-T/generate-test.txt``) and the reference file its
evaluation scored against (``eval.json`` records it), by the evaluation's own scorer; where
those are gone, or an older ``eval.json`` does not name it, its cell says that it was not
scored. An ``eval/`` of other checkpoints than the run holds is not the run's score.

The losses are fairseq's, in bits: ``last_valid_loss`` the criterion's (label-smoothed),
``last_valid_nll`` the references' cross-entropy (the progress line's and docs/findings.md's
figure; runs trained before it was recorded have none). The plots draw the nll where every run
has it, else the label-smoothed loss, and say which.
"""

import csv
import io
import math
import os
import statistics
import sys
from typing import Dict, List, NamedTuple, Optional

from .. import cli_parser, save_png, write_atomically
from ...fairseq_log import STALLED_MARGIN, stalled
from ...plotting import pyplot
from ...storage.evaluations import current_evaluation
from ...storage.records import read_record, read_status, run_names
from ...storage.fileio import (RecordError, add_force_argument, check_tool_output,
                                ensure_directory, one_line_os_errors)
from ..evaluation.distinct import DEFAULT_MIN_SHARE, ignores_source
from ..datasets import DATASETS, METRICS
from .paper import lookup
from ..spec.settings import TRAINED, affecting, recorded_value

COLUMNS = ["dataset", "run", "method", "label", "encoder_layers", "decoder_layers", "layers",
           "seed", "status", "bleu", "sacrebleu", "chrf", "tok_bleu", "x_en", "en_x", "paper_bleu",
           "distinct_share", "last_valid_loss", "last_valid_nll", "stalled", "num_updates",
           "reason", "signature"]


def seed_of(status: Dict, config: Dict) -> str:
    """The run's seed, from its records: STATUS (``status.json``, for runs trained since it
    records it), else CONFIG's resolved settings (``config.json``); "" where neither says."""
    if "seed" in status:
        return str(status["seed"])
    return str(config.get("settings", {}).get("SEED", {}).get("value", ""))


def tokenized_bleu_from_decode(run_dir: str, direction: str, scored: Dict) -> Optional[float]:
    """The paper's WMT-17 metric (tokenized BLEU, compound-split: ``score.score_direction``)
    of a run evaluated without it, from its decoded test set and the reference file its
    evaluation scored against (SCORED: the direction's entry in ``eval.json``, which records
    it since schema version 2); None where either is gone or not recorded."""
    from ..evaluation.score import score_direction

    output = os.path.join(run_dir, "eval", direction, "generate-test.txt")
    ref = scored.get("reference")
    if not (os.path.isfile(output) and isinstance(ref, str)):
        return None
    try:
        return score_direction(output, ref, direction.split("-")[1], True, True)["tok_bleu"]
    except (OSError, ValueError):  # references moved or changed: not scored
        return None


def collect(dataset: str, runs_dir: str, unreadable: Optional[List[str]] = None) -> List[Dict]:
    """One row per run directory holding a status.json. A run whose records cannot be read
    (a truncated or edited status.json, a version this code does not read, a field missing)
    is left out of the rows with a warning naming it, and listed in UNREADABLE ("run: why",
    which the table shows): one broken run does not stop the report of the others."""
    rows = []
    for name in run_names(runs_dir):
        try:
            row = _row(dataset, runs_dir, name)
        except (RecordError, KeyError, TypeError, ValueError) as error:
            detail = f"no {error} in its records" if isinstance(error, KeyError) else str(error)
            print(f"WARNING: run {name} left out of the report: {detail}", file=sys.stderr)
            if unreadable is not None:
                unreadable.append(f"{name}: {detail}")
            continue
        if row is not None:
            rows.append(row)
    return _apart(rows, unreadable)


# what places a run in a cell of the table (its row and column) rather than in a variant of it
CELL_SETTINGS = ("METHOD", "ENC_LAYERS", "DEC_LAYERS", "SEED")


def _apart(rows: List[Dict], unreadable: Optional[List[str]]) -> List[Dict]:
    """ROWS with the runs of one label kept apart where they trained differently: the seeds of
    a cell are runs that differ in their seed alone. Where the runs of a label differ in a
    setting that changes what is trained (``affects`` TRAINED in spec/settings.py: LR,
    TRAIN_ARGS, ...; read from each run's config.json), each row's label names its values
    ("deepnet (LR=0.002)"), and a variant is no longer the paper's setting. A run with the
    settings and seed of another in its cell is the same training again: left out, with a
    warning naming both, instead of counting as a second seed."""
    by_label: Dict[str, List[Dict]] = {}
    for row in rows:
        by_label.setdefault(row["label"], []).append(row)
    for label, members in by_label.items():
        differing = [name for name in affecting(TRAINED) if name not in CELL_SETTINGS
                     and len({_value(r, name) for r in members}) > 1]
        shown: Dict[tuple, str] = {}  # one spelling per value: 1e-3 and 0.001 are one LR
        for row in members if differing else ():
            row["label"] = f"{label} (" + ", ".join(
                f"{name}=" + shown.setdefault((name, _value(row, name)),
                                              row["_settings"].get(name, "(unset)"))
                for name in differing) + ")"
            row["paper_bleu"] = ""
    kept, seen = [], {}
    for row in rows:
        seed = _value(row, "SEED") if "SEED" in row["_settings"] else row["seed"]
        key = (row["label"], row["encoder_layers"], row["decoder_layers"],
               seed if seed != "" else row["run"])  # a seed no record names: not compared
        if key in seen:
            why = f"the same training as {seen[key]} (the same settings and seed): left out"
            print(f"WARNING: run {row['run']}: {why}", file=sys.stderr)
            if unreadable is not None:
                unreadable.append(f"{row['run']}: {why}")
            continue
        seen[key] = row["run"]
        kept.append(row)
    for row in kept:
        del row["_settings"]
    return kept


def _value(row: Dict, name: str):
    """The setting NAME of ROW's run as its kind reads it (LR 1e-3 is 0.001), None if unset."""
    return recorded_value(row["_settings"], name)


def _row(dataset: str, runs_dir: str, name: str) -> Optional[Dict]:
    """The report's row of run NAME, or None if it has no status.json."""
    run_dir = os.path.join(runs_dir, name)
    status = read_status(run_dir)  # a launcher killed meanwhile: interrupted
    if status is None:
        return None
    # an evaluation of other checkpoints (trained again with RETRY=1, and the new evaluation
    # failed) is not this run's score
    evaluation, stale = current_evaluation(run_dir)
    evaluation = evaluation or {}
    n, m = int(status["encoder_layers"]), int(status["decoder_layers"])
    config = read_record(os.path.join(run_dir, "config.json"), "run-config") or {}
    row = {key: "" for key in COLUMNS}
    row["_settings"] = {k: v["value"] for k, v in config.get("settings", {}).items()}
    row.update(dataset=dataset, run=name, method=status["method"],
               label=status.get("label") or status["method"], encoder_layers=n, decoder_layers=m,
               layers=n + m, status=status["status"], seed=seed_of(status, config),
               reason=status.get("reason", ""), num_updates=status.get("num_updates", ""),
               last_valid_loss=status.get("last_valid_loss"),
               last_valid_nll=status.get("last_valid_nll"))
    if row["status"] == "ok" and not evaluation:  # trained well: not a failed run
        row.update(status="not evaluated", reason="trained, but not evaluated" + (
            " since: eval/ holds the evaluation of earlier checkpoints" if stale else "")
            + " (see evaluate.log)")
    directions = evaluation.get("directions", {})
    if len(directions) == 1:
        (direction, only), = directions.items()
        tok_bleu = only.get("tok_bleu", "")
        if tok_bleu == "" and DATASETS[dataset].metric == "tok_bleu" and row["status"] == "ok":
            tok_bleu = tokenized_bleu_from_decode(run_dir, direction, only)
            tok_bleu = "" if tok_bleu is None else tok_bleu
        row.update(sacrebleu=only["sacrebleu"], tok_bleu=tok_bleu, signature=only["signature"])
    elif directions:
        row.update(sacrebleu=evaluation["sacrebleu_avg"], x_en=evaluation.get("x_en", ""),
                   en_x=evaluation.get("en_x", ""),
                   signature=next(iter(directions.values()))["signature"])
    # chrF beside sacreBLEU (the mean over directions; "" for an evaluation older than chrF)
    row["chrf"] = evaluation.get("chrf_avg", "")
    # The lowest share over directions: one collapsed direction is enough to say so.
    shares = [d["distinct_share"] for d in directions.values() if "distinct_share" in d]
    if shares:
        row["distinct_share"] = min(shares)
    metric = DATASETS[dataset].metric
    row["bleu"] = (evaluation.get(metric) if metric in evaluation
                   else row.get(metric.replace("_avg", ""), ""))
    ref = lookup(dataset, row["method"], n, m) if row["label"] == row["method"] else None
    if ref is not None:
        row["paper_bleu"] = "diverged" if ref.bleu is None else ref.bleu
    return row


class Fit(NamedTuple):
    """BLEU = a ln d + b, fitted by least squares over POINTS (d, BLEU) points."""
    a: float
    b: float
    r2: Optional[float]  # the share of the variance explained; None where two points fix it
    points: int


def fit_log(points) -> Optional[Fit]:
    """Least-squares BLEU = A ln d + B over (d, bleu) points; None with fewer than 2 depths."""
    if len({d for d, _ in points}) < 2:
        return None
    xs = [math.log(d) for d, _ in points]
    ys = [b for _, b in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    b = my - a * mx
    total = sum((y - my) ** 2 for y in ys)
    residual = sum((y - (a * x + b)) ** 2 for x, y in zip(xs, ys))
    r2 = None if len(points) <= 2 else (1 - residual / total if total else 1.0)
    return Fit(a, b, r2, len(points))


def fits(rows: List[Dict]) -> Dict[str, Fit]:
    by_label: Dict[str, list] = {}
    for row in rows:
        if row["status"] == "ok" and row["bleu"] != "":
            by_label.setdefault(row["label"], []).append((row["layers"], float(row["bleu"])))
    return {label: fit for label, pts in by_label.items() if (fit := fit_log(pts))}


def ignores_its_source(row: Dict) -> bool:
    return row["status"] == "ok" and row["distinct_share"] != "" and ignores_source(row)


def source_blind_baseline(data: str) -> float:
    """The unigram entropy of the validation targets of a single-pair binarised directory."""
    from ...storage.baseline import unigram_baseline

    pairs = sorted({tuple(name.split(".")[1].split("-")) for name in os.listdir(data)
                    if name.startswith("valid.") and name.endswith(".idx")})
    if len(pairs) != 1:
        raise ValueError(f"--data {data}: expected the validation set of one language pair "
                         f"(valid.SRC-TGT.*.idx), found {len(pairs)}")
    return unigram_baseline(data, *pairs[0])


def mark_stalled(rows: List[Dict], baseline: float, margin: float = STALLED_MARGIN) -> None:
    """Set each row's ``stalled``: trained (ok) but its last validation nll not below
    ``baseline - margin`` bits. The baseline is a cross-entropy of the references, so it is
    compared with the nll, not with the label-smoothed loss (higher by the smoothing's share);
    records written before the nll was kept give only the loss."""
    for row in rows:
        nll = row.get("last_valid_nll")
        loss = nll if nll not in (None, "") else row["last_valid_loss"]
        row["stalled"] = (row["status"] == "ok" and loss not in (None, "")
                          and stalled(float(loss), baseline, margin))


def _markdown(text: str) -> str:
    """TEXT as one cell of a markdown table: a "|" in a run's label (RUN_LABEL is free text)
    would otherwise open a column of its own, or a row."""
    return text.replace("\\", "\\\\").replace("|", "\\|")


def by_cell(rows: List[Dict]) -> Dict[tuple, List[Dict]]:
    """(label, N, M) -> the runs of that method and depth, one per seed."""
    cells: Dict[tuple, List[Dict]] = {}
    for row in rows:
        cells.setdefault((row["label"], row["encoder_layers"], row["decoder_layers"]), []).append(row)
    return cells


def bleu_spread(runs: List[Dict]):
    """(mean, sample standard deviation or None with one) of the BLEU of the runs that trained
    (status ok); None when none did."""
    values = [float(r["bleu"]) for r in runs if r["status"] == "ok" and r["bleu"] != ""]
    if not values:
        return None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def _cell(runs: Optional[List[Dict]]) -> str:
    """A table cell. One run: its BLEU (marked when the model ignores its source), or the status
    of a run that did not finish (diverged, failed). Several seeds: mean +- spread of those that
    trained, how many seeds, and how many diverged/failed or ignore their source."""
    if not runs:
        return ""
    if len(runs) == 1:
        row = runs[0]
        if row["status"] != "ok":
            return row["status"]
        marks = [m for m, on in (("stalled", row.get("stalled") is True),
                                 ("ignores its source", ignores_its_source(row))) if on]
        if row["bleu"] in ("", None):  # evaluated without the table's metric, decode gone
            return "not scored" + (f" (sacreBLEU {row['sacrebleu']})" if row["sacrebleu"] != ""
                                   else "")
        return f"{row['bleu']}" + (f" ({', '.join(marks)})" if marks else "")
    notes = [f"{len(runs)} seeds"]
    for status in sorted({r["status"] for r in runs} - {"ok"}):
        notes.append(f"{sum(r['status'] == status for r in runs)} {status}")
    stalled = sum(r.get("stalled") is True for r in runs)
    if stalled:
        notes.append(f"{stalled} stalled")
    ignoring = sum(ignores_its_source(r) for r in runs)
    if ignoring:
        notes.append(f"{ignoring} {'ignores its' if ignoring == 1 else 'ignore their'} source")
    summary = bleu_spread(runs)
    if summary is None:
        return f"{runs[0]['status']} ({', '.join(notes)})"
    mean, spread = summary
    value = f"{mean:.2f}" + (f" ± {spread:.2f}" if spread is not None else "")
    return f"{value} ({', '.join(notes)})"


def family(label: str) -> str:
    """The results-table group of a run's method (methods.FAMILIES), "other" if unknown."""
    from ... import methods

    try:
        return methods.get(label.split(" ")[0]).family
    except ValueError:
        return "other"


def grouped(labels):
    """(group, labels) in the paper's order of groups, labels sorted within each."""
    from ...methods import FAMILIES

    order = {name: i for i, name in enumerate(FAMILIES)}
    groups: Dict[str, list] = {}
    for label in sorted(labels):
        groups.setdefault(family(label), []).append(label)
    return sorted(groups.items(), key=lambda item: order.get(item[0], len(order)))


def _sacrebleu(runs: List[Dict]) -> str:
    """A cell of the sacreBLEU table: one trained run's value as it was scored, or the mean."""
    ok = [r for r in runs if r["status"] == "ok" and r["sacrebleu"] != ""]
    if len(ok) == 1:
        return str(ok[0]["sacrebleu"])
    return f"{statistics.fmean(float(r['sacrebleu']) for r in ok):.2f}" if ok else ""


def _paper(value) -> str:
    return "" if value in ("", None) else f" (paper {value})"


def markdown(dataset: str, rows: List[Dict], unreadable: List[str] = ()) -> str:
    declared = DATASETS[dataset]
    out = [f"# {dataset}: BLEU by depth\n"]
    metric = METRICS[declared.metric]
    out.append(f"BLEU: {metric}; the paper's number in parentheses where it reports one.\n")
    if declared.task.depth_law:  # a row a run, by direction, and the fit over depth
        out.extend(_directions_table(rows))
    else:
        out.extend(_depth_tables(declared, rows))
    out.extend(_notes(declared, rows, unreadable))
    return "\n".join(out) + "\n"


def _directions_table(rows: List[Dict]) -> List[str]:
    """A multilingual dataset's lines: a run a row (X->En, En->X, their average), then the fit
    of BLEU to ln(depth) of each method."""
    out = ["| model | layers | X->En | En->X | Avg |", "|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: (r["label"], r["layers"])):
        ok = row["status"] == "ok"
        out.append(f"| {row['label']} {row['encoder_layers']}L-{row['decoder_layers']}L | "
                   f"{row['layers']} | {row['x_en'] if ok else ''} | {row['en_x'] if ok else ''} | "
                   f"{_cell([row])}{_paper(row['paper_bleu'])} |")
    fitted = fits(rows)
    if fitted:
        out.append("\nFit over the ok runs, d = number of layers (N + M):\n")
        for label, fit in sorted(fitted.items()):
            out.append(f"- {label}: BLEU(d) = {fit.a:.3f} ln d + {fit.b:.3f}"
                       + ("" if fit.r2 is None else f" (R^2 {fit.r2:.3f}, {fit.points} points)"))
    return out


def _depth_tables(declared, rows: List[Dict]) -> List[str]:
    """A one-pair dataset's lines: method by depth in its metric (grouped under headings when
    there are more than a few methods), then in detokenised sacreBLEU if that is another."""
    depths = sorted({(r["encoder_layers"], r["decoder_layers"]) for r in rows})
    labels = sorted({r["label"] for r in rows})
    index = by_cell(rows)
    head = ["| method | " + " | ".join(f"{n}L-{m}L" for n, m in depths) + " |",
            "|---|" + "---|" * len(depths)]
    out = list(head)
    for group, members in grouped(labels):
        if len(labels) > 3:  # a few rows read without headings
            out.append(f"| **{group}** |" + " |" * len(depths))
        for label in members:
            cells = []
            for n, m in depths:
                runs = index.get((label, n, m))
                cells.append(_cell(runs) + (_paper(runs[0]["paper_bleu"]) if runs else ""))
            out.append(f"| {_markdown(label)} | " + " | ".join(cells) + " |")
    if declared.metric != "sacrebleu":
        out.append("\nDetokenised sacreBLEU of the same runs:\n")
        out.extend(head)
        for label in labels:
            cells = [_sacrebleu(index.get((label, n, m), [])) for n, m in depths]
            out.append(f"| {_markdown(label)} | " + " | ".join(cells) + " |")
    return out


def _notes(declared, rows: List[Dict], unreadable: List[str]) -> List[str]:
    """The lines under the tables: runs that ignore their source, the paper's numbers and the
    dataset's note, runs that did not finish or cannot be read, sacreBLEU's signatures."""
    out = []
    collapsed = [r for r in rows if ignores_its_source(r)]
    if collapsed:
        out.append(f"\nRuns with fewer than {DEFAULT_MIN_SHARE:.0%} distinct test translations "
                   "(in their worst direction; a model that ignores its source writes the same "
                   "few sentences for every input):\n")
        out.extend(f"- {r['run']}: {r['distinct_share']:.1%} distinct" for r in collapsed)
    if declared.paper:
        out.append("\nThe paper's numbers:\n")
        for ref in declared.paper:
            value = "diverged" if ref.bleu is None else ref.bleu
            out.append(f"- {ref.label} {ref.encoder_layers}L-{ref.decoder_layers}L: {value}")
    if declared.note:
        out.append(f"\n{declared.note}")
    problems = [r for r in rows if r["status"] != "ok"]
    if problems:
        out.append("\nRuns that did not finish:\n")
        out.extend(f"- {r['run']}: {r['status']} — {r['reason']}" for r in problems)
    if unreadable:
        out.append("\nRuns whose records cannot be read (not in the table):\n")
        out.extend(f"- {line}" for line in unreadable)
    signatures = sorted({r["signature"] for r in rows if r["signature"]})
    if signatures:
        out.append("\nsacreBLEU signature: " + "; ".join(f"`{s}`" for s in signatures))
    return out


def write_csv(path: str, rows: List[Dict]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(path, buffer.getvalue())


def _given(value) -> bool:
    return value not in (None, "")


def loss_measure(rows: List[Dict]) -> tuple:
    """(column, axis label) of the loss the plots draw: the nll where every run with a loss has
    one (runs trained since it is recorded), else the label-smoothed loss."""
    if any(_given(r["last_valid_loss"]) for r in rows) and all(
            _given(r.get("last_valid_nll")) for r in rows if _given(r["last_valid_loss"])):
        return "last_valid_nll", "last validation nll (bits)"
    return "last_valid_loss", "last validation loss (label-smoothed, bits)"


def depth_points(rows: List[Dict], label: str) -> List[Dict]:
    """The label's cells by depth, for the plots: layers, the mean BLEU and its spread (0 with
    one seed; None where no seed trained), the mean last validation loss (``loss_measure``),
    and whether any seed diverged or failed."""
    column = loss_measure(rows)[0]
    points = []
    for (name, n, m), runs in sorted(by_cell(rows).items(), key=lambda c: c[0][1] + c[0][2]):
        if name != label:
            continue
        summary = bleu_spread(runs)
        losses = [float(r[column]) for r in runs if _given(r.get(column))]
        points.append({"layers": n + m, "bleu": summary and summary[0],
                       "spread": (summary[1] or 0.0) if summary else None,
                       "loss": statistics.fmean(losses) if losses else None,
                       "bad": any(r["status"] != "ok" for r in runs)})
    return points


def depth_axis(ax, depths) -> None:
    """A log x axis labelled with plain layer counts at DEPTHS, not 3x10^1-style log ticks."""
    import matplotlib.ticker

    ax.set_xscale("log")
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def plot(path: str, dataset: str, rows: List[Dict]) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colours = {}
    for label in sorted({r["label"] for r in rows}):
        points = depth_points(rows, label)
        ok = [p for p in points if p["bleu"] is not None]
        line = ax.errorbar([p["layers"] for p in ok], [p["bleu"] for p in ok],
                           yerr=[p["spread"] for p in ok], fmt="o-", capsize=3,
                           label=label if ok else None).lines[0]
        colours[label] = line.get_color()
        bad = [p["layers"] for p in points if p["bad"]]
        if bad:
            ax.plot(bad, [0] * len(bad), "x", color=line.get_color(), markersize=9,
                    clip_on=False, label=f"{label}: diverged/failed")
    paper = DATASETS[dataset].paper
    for ref in paper:
        if ref.bleu is not None:
            ax.plot(ref.encoder_layers + ref.decoder_layers, ref.bleu, "o", mfc="none",
                    color=colours.get(ref.method, "grey"), markersize=9)
    if any(ref.bleu is not None for ref in paper):
        ax.plot([], [], "o", mfc="none", color="grey", label="paper")
    if DATASETS[dataset].task.depth_law:
        for label, (a, b, _, _) in fits(rows).items():
            ds = sorted({r["layers"] for r in rows if r["label"] == label})
            xs = [ds[0] * (ds[-1] / ds[0]) ** (i / 50) for i in range(51)]
            ax.plot(xs, [a * math.log(x) + b for x in xs], "--", color=colours[label],
                    label=f"{label}: {a:.2f} ln d + {b:.2f}")
    # the measured and the paper's depths
    depth_axis(ax, sorted({r["layers"] for r in rows} | {ref.encoder_layers + ref.decoder_layers
                                                         for ref in paper}))
    ax.set_xlabel("layers (encoder + decoder)")
    ax.set_ylabel("BLEU")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{dataset}: BLEU vs depth")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    save_png(fig, path)
    plt.close(fig)


def _loss_cell(runs: Optional[List[Dict]], column: str) -> str:
    """A cell of the loss table: the mean last validation loss of the seeds that trained, marked
    stalled where every one of them did; diverged or failed where none trained."""
    if not runs:
        return ""
    ok = [r for r in runs if r["status"] == "ok" and _given(r.get(column))]
    if not ok:
        return "/".join(sorted({r["status"] for r in runs}))
    value = f"{statistics.fmean(float(r[column]) for r in ok):.2f}"
    if all(r.get("stalled") is True for r in ok):
        value = f"stalled ({value})"
    others = [r["status"] for r in runs if r not in ok]
    return value + (f" ({len(runs)} seeds, {len(others)} {'/'.join(sorted(set(others)))})"
                    if others else "")


def loss_markdown(dataset: str, rows: List[Dict], baseline: float, margin: float) -> str:
    """valid_loss.md: the last validation loss of each method and depth (a row per method, a
    column per depth), against the source-blind baseline: the depth study's table, for any
    single-pair sweep. Where BLEU needs a trained model, this says how far each got."""
    column, name = loss_measure(rows)
    depths = sorted({(r["encoder_layers"], r["decoder_layers"]) for r in rows})
    index = by_cell(rows)
    out = [f"# {dataset}: {name} by depth\n",
           f"Source-blind baseline {baseline:.2f} bits (the entropy of the validation targets' "
           f"unigram distribution); **stalled**: not below {baseline - margin:.2f}. Seeds of "
           "one cell are averaged.\n",
           "| method | " + " | ".join(f"{n}L-{m}L" for n, m in depths) + " |",
           "|---|" + "---|" * len(depths)]
    for label in sorted({r["label"] for r in rows}):
        out.append(f"| {_markdown(label)} | " + " | ".join(_loss_cell(index.get((label, n, m)), column)
                                                 for n, m in depths) + " |")
    return "\n".join(out) + "\n"


def plot_loss(path: str, dataset: str, rows: List[Dict], baseline: float) -> None:
    """loss_vs_depth.png: the last validation loss against depth, one line per method, the
    source-blind baseline dashed, runs that diverged or failed as x on it."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label in sorted({r["label"] for r in rows}):
        points = depth_points(rows, label)
        losses = [p for p in points if p["loss"] is not None]
        line, = ax.plot([p["layers"] for p in losses], [p["loss"] for p in losses], "o-",
                        label=label)
        bad = [p["layers"] for p in points if p["bad"]]
        ax.plot(bad, [baseline] * len(bad), "x", color=line.get_color(), markersize=10)
    ax.axhline(baseline, color="grey", linestyle="--", linewidth=1,
               label="source-blind baseline (x: diverged/failed)")
    depth_axis(ax, sorted({r["layers"] for r in rows}))
    ax.set_xlabel("layers (encoder + decoder)")
    ax.set_ylabel(loss_measure(rows)[1])
    ax.set_ylim(0, 1.1 * max([baseline, *(y for line in ax.lines for y in line.get_ydata())]))
    ax.set_title(f"{dataset}: validation loss vs depth")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    save_png(fig, path)
    plt.close(fig)


def plot_groups(path: str, dataset: str, rows: List[Dict]) -> List[str]:
    """One column per group of methods (methods.FAMILIES), BLEU above and the last validation
    loss below, against depth; DeepNet drawn grey in every other group as the reference. For
    a table of many methods, which one plot cannot show legibly. Returns the groups drawn, in
    their order; none (and nothing written) when the runs are of one group only."""
    groups = dict(grouped({r["label"] for r in rows}))
    if len(groups) < 2:
        return []
    plt = pyplot()
    depths = sorted({r["layers"] for r in rows})
    fig, axes = plt.subplots(2, len(groups), figsize=(3.2 * len(groups), 5.6), sharex=True,
                             sharey="row", squeeze=False)
    reference = [label for label in groups.get("DeepNet", []) if label == "deepnet"]

    def draw(ax_bleu, ax_loss, label, **style):
        points = depth_points(rows, label)
        ok = [p for p in points if p["bleu"] is not None]
        style = {"marker": "o", "linestyle": "-", **style}  # the reference overrides the line
        line = ax_bleu.errorbar([p["layers"] for p in ok], [p["bleu"] for p in ok],
                                yerr=[p["spread"] for p in ok], capsize=3, label=label,
                                **style).lines[0]
        losses = [p for p in points if p["loss"] is not None]
        ax_loss.plot([p["layers"] for p in losses], [p["loss"] for p in losses],
                     **{**style, "color": line.get_color()})
        bad = [p["layers"] for p in points if p["bad"]]
        if bad:  # an empty unclipped line still counts for the layout, at the figure's corner
            ax_bleu.plot(bad, [0] * len(bad), "x", color=line.get_color(), markersize=9,
                         clip_on=False)

    for column, (group, labels) in enumerate(groups.items()):
        ax_bleu, ax_loss = axes[0][column], axes[1][column]
        for label in reference if group != "DeepNet" else []:
            draw(ax_bleu, ax_loss, label, color="0.6", linestyle="--")
        for label in labels:
            draw(ax_bleu, ax_loss, label)
        ax_bleu.set_title(group)
        ax_bleu.legend(fontsize=7)
        for ax in (ax_bleu, ax_loss):
            depth_axis(ax, depths)
            ax.grid(True, alpha=0.3)
        ax_loss.set_xlabel("layers (encoder + decoder)")
    axes[0][0].set_ylabel("BLEU (x: diverged/failed)")
    axes[0][0].set_ylim(bottom=0)
    axes[1][0].set_ylabel(loss_measure(rows)[1])
    fig.suptitle(f"{dataset}: each group of methods against depth")
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
    return list(groups)


# the files main writes into --out (some only with --data, or several groups)
WRITTEN = ("results.csv", "table.md", "bleu_vs_depth.png", "by_group.png", "valid_loss.md",
           "loss_vs_depth.png")


@one_line_os_errors
def main(argv=None) -> None:
    parser = cli_parser("python -m deepnet_fairseq.recipes.reporting.report", __doc__)
    parser.add_argument("--dataset", required=True, choices=list(DATASETS))
    parser.add_argument("--runs", required=True, help="directory of run directories")
    parser.add_argument("--out", required=True, help="directory for table.md, results.csv, png")
    parser.add_argument("--data", help="the runs' binarised data (one language pair): mark the "
                                       "runs that stalled at the source-blind baseline")
    parser.add_argument("--margin", type=float, default=STALLED_MARGIN,
                        help=f"bits below that baseline a run must reach [{STALLED_MARGIN}]")
    # the sweep's own results directory is replaced by each sweep (the runner passes --force)
    add_force_argument(parser, "the report's existing files in --out")
    args = parser.parse_args(argv)
    # --out holds this program's own files, never in the runs or the data it reads
    check_tool_output(args.out, [args.runs, args.data], args.force, "--out", files=WRITTEN)
    unreadable: List[str] = []
    rows = collect(args.dataset, args.runs, unreadable)
    if not rows:
        parser.error(f"no runs with a status.json under {args.runs}")
    if args.data:
        try:
            baseline = source_blind_baseline(args.data)
        except (OSError, ValueError) as err:  # FileNotFoundError: no validation set there
            parser.error(str(err))
        mark_stalled(rows, baseline, args.margin)
        print(f"source-blind baseline {baseline:.3f} bits; stalled: not below "
              f"{baseline - args.margin:.3f}", file=sys.stderr)
    ensure_directory(args.out)
    write_csv(os.path.join(args.out, "results.csv"), rows)
    table = markdown(args.dataset, rows, unreadable)
    write_atomically(os.path.join(args.out, "table.md"), table)
    plot(os.path.join(args.out, "bleu_vs_depth.png"), args.dataset, rows)
    written = ["table.md", "results.csv", "bleu_vs_depth.png"]
    if plot_groups(os.path.join(args.out, "by_group.png"), args.dataset, rows):
        written.append("by_group.png")
    print(table)
    if args.data:  # the losses against the baseline: the depth study's table and plot
        losses = loss_markdown(args.dataset, rows, baseline, args.margin)
        write_atomically(os.path.join(args.out, "valid_loss.md"), losses)
        plot_loss(os.path.join(args.out, "loss_vs_depth.png"), args.dataset, rows, baseline)
        written += ["valid_loss.md", "loss_vs_depth.png"]
        print(losses)
    print(f"wrote {', '.join(written)} in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
