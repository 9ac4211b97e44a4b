"""Draw the per-layer monitors of a ``--task translation_monitored`` run as heat maps.

Reads fairseq-train's output (``--log-format json`` or ``simple``; a saved stdout or a
``--log-file``), takes the ``train_inner`` records, and writes

* a PNG with one heat map per statistic (gradient norm, LayerNorm input norm, update ratio)
  and side (encoder, decoder): x = update, y = layer, colour = log10 of the value;
* a CSV of the same numbers (update, stat, side, layer, value), one row per measurement.

    fairseq-train ... --task translation_monitored --log-format json --log-file train.log
    deepnet-plot-monitors train.log --output monitors.png
"""

import argparse
import csv
import io
import json
import math
import os
import re
import sys
from typing import Dict, List, Tuple

from ..plotting import pyplot
from .common import atomic_savefig, atomic_write_text
from ..storage.fileio import add_force_argument, one_line_os_errors

KEY = re.compile(r"^mon_(grad|lnin|upd)\.(enc|dec)\.(\d+)$")
SIMPLE_PAIR = re.compile(r"([\w.]+)=([^,\s]+)")
TITLES = {"grad": "gradient norm", "lnin": "LayerNorm input norm", "upd": "||dtheta|| / ||theta||"}
SIDES = {"enc": "encoder", "dec": "decoder"}

Row = Tuple[int, str, str, int, float]  # update, stat, side, layer, value


def parse_log(lines) -> List[Row]:
    """The per-layer monitor values of every ``train_inner`` record of a fairseq-train log
    (stdout or --log-file; json or simple format)."""
    rows: List[Row] = []
    for line in lines:
        # train_inner records carry "num_updates" (epoch summaries "train_num_updates");
        # stdout lines start with "... | train_inner |", --log-file lines are the bare record
        if "{" in line:
            try:
                record = json.loads(line[line.index("{"):])
            except json.JSONDecodeError:
                continue
        else:
            record = dict(SIMPLE_PAIR.findall(line))  # "num_updates=4, mon_grad.enc.0=0.1"
        if "num_updates" not in record:
            continue
        update = int(float(record["num_updates"]))
        for key, value in record.items():
            match = KEY.match(key)
            if match and value not in (None, "None", "null"):
                stat, side, layer = match.group(1), match.group(2), int(match.group(3))
                rows.append((update, stat, side, layer, float(value)))
    return rows


def write_csv(path: str, rows: List[Row]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(("update", "stat", "side", "layer", "value"))
    writer.writerows(rows)
    atomic_write_text(path, buffer.getvalue())


def plot(path: str, rows: List[Row], title: str) -> None:
    plt = pyplot()
    import numpy as np

    stats = [s for s in TITLES if any(r[1] == s for r in rows)]
    sides = [s for s in SIDES if any(r[2] == s for r in rows)]
    fig, axes = plt.subplots(len(stats), len(sides), figsize=(5 * len(sides), 2.8 * len(stats)),
                             squeeze=False)
    for i, stat in enumerate(stats):
        for j, side in enumerate(sides):
            cell = {(r[0], r[3]): r[4] for r in rows if r[1] == stat and r[2] == side}
            updates = sorted({u for u, _ in cell})
            layers = sorted({l for _, l in cell})
            grid = np.full((len(layers), len(updates)), np.nan)
            for (u, l), v in cell.items():
                grid[layers.index(l), updates.index(u)] = math.log10(v) if v > 0 else np.nan
            ax = axes[i][j]
            x = np.array(updates, dtype=float)  # cell edges halfway between logged updates
            gaps = np.diff(x) if len(x) > 1 else np.array([1.0])
            x_edges = np.concatenate([[x[0] - gaps[0] / 2], x[:-1] + gaps / 2 if len(x) > 1
                                      else [], [x[-1] + gaps[-1] / 2]])
            y_edges = np.array(layers + [layers[-1] + 1], dtype=float) - 0.5
            image = ax.pcolormesh(x_edges, y_edges, grid, shading="flat")
            fig.colorbar(image, ax=ax, label="log10")
            ax.set_title(f"{SIDES[side]}: {TITLES[stat]}", fontsize=9)
            ax.set_xlabel("update")
            ax.set_ylabel("layer")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    atomic_savefig(fig, path)
    plt.close(fig)


@one_line_os_errors
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="deepnet-plot-monitors", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="fairseq-train output or --log-file of a monitored run")
    parser.add_argument("--output", default="monitors.png",
                        help="PNG to write (monitors.png); the CSV goes next to it (.csv)")
    add_force_argument(parser, "an existing PNG or CSV")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.log):
        parser.error(f"log file not found: {args.log}")
    from ..storage.fileio import OutputRefused, check_tool_output

    csv_path = os.path.splitext(args.output)[0] + ".csv"
    try:
        for output in (args.output, csv_path):
            check_tool_output(output, [args.log], args.force, "--output")
    except OutputRefused as err:
        parser.error(str(err))
    with open(args.log, errors="replace") as f:
        rows = parse_log(f)
    if not rows:
        sys.exit(f"error: no per-layer monitor values (mon_grad.enc.0 ...) in {args.log}; train "
                 f"with --task translation_monitored and a --log-interval/--monitor-interval "
                 f"that the run reaches")
    write_csv(csv_path, rows)
    plot(args.output, rows, os.path.basename(args.log))
    updates = sorted({r[0] for r in rows})
    print(f"{len(rows)} values at {len(updates)} logged updates ({updates[0]}..{updates[-1]}); "
          f"wrote {args.output} and {csv_path}")


if __name__ == "__main__":
    main()
