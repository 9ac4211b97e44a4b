"""Depth study: train tiny (64-128-2) models of each method at several depths with identical
settings for a fixed number of updates, and report trained / stalled / diverged and the final
validation loss per method and depth (the paper's Table 1, at tiny scale, on CPU).

Every run is a real ``fairseq-train`` (``--user-dir deepnet_fairseq``, the method's options
from ``deepnet_fairseq/methods.py``, the 64-128-2 width, ``--criterion cross_entropy``), on a
generated reverse-copy corpus (binarised with fairseq-preprocess into OUTPUT/data) or on any
binarised translation directory given with --data (e.g. Multi30k from scripts/quickstart.sh:
--data runs/quickstart-smoke/data/bin --source-lang en --target-lang de). Status of a run:

  diverged  fairseq reported non-finite numbers, or the last validation loss is no better than
            a uniform guess over the vocabulary after the warmup: the recipes' rule
            (``fairseq_log.classify``), read from fairseq's own output, never the command
  stalled   trained, but the final validation loss not below the source-blind baseline minus
            --margin bits (``fairseq_log.stalled``, the rule of the sweeps' report); the
            baseline is the entropy of the unigram distribution of the validation targets, the
            loss of a model that ignores the source
  trained   otherwise
A run that fails for another reason (a bad option, out of memory) stops the study with its
error: it is not a result.

Each finished run is stored in OUTPUT/runs/METHOD-N.json and reused when the command is
repeated with the same settings (--force reruns); the results are depth_study.{csv,md,png}.

    deepnet-depth-study --output-dir runs/depth-study               # 6L-6L .. 500L-500L
    deepnet-depth-study --depths 6,18 --updates 50 --output-dir /tmp/ds   # a quick look
"""

import argparse
import json
import math
import os
import random
import signal
import sys
import time
from typing import Dict, List

from .. import USER_DIR, methods
from .. import fairseq_log
from ..processes import Interrupted, run_forwarding, signals_interrupt
from ..storage.baseline import unigram_baseline
from ..storage.fileio import ensure_directory, move, one_line_os_errors, open_no_follow
from . import common
from ..plotting import pyplot
from .common import (Progress, add_methods_option, atomic_savefig, atomic_write_text,
                     positive_ints, tiny_width_args)

FIELDS = ("method", "encoder_layers", "decoder_layers", "status", "valid_loss", "baseline",
          "last_train_loss", "updates", "seconds")


def get_parser():
    parser = argparse.ArgumentParser(prog="deepnet-depth-study", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_methods_option(parser, default=("post_ln", "pre_ln", "deepnet"))
    parser.add_argument("--depths", type=positive_ints, default=[6, 18, 50, 100, 200, 500],
                        help="layers per side, comma-separated (6,18,50,100,200,500)")
    parser.add_argument("--updates", type=int, default=400, help="updates per run (400)")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (1e-3)")
    parser.add_argument("--warmup", type=int, default=100,
                        help="warmup updates of the inverse_sqrt schedule (100)")
    parser.add_argument("--max-tokens", type=int, default=512, help="tokens per batch (512)")
    parser.add_argument("--seed", type=int, default=1, help="seed of every run (1)")
    parser.add_argument("--margin", type=float, default=fairseq_log.STALLED_MARGIN,
                        help="bits below the source-blind baseline a run must reach "
                             f"({fairseq_log.STALLED_MARGIN})")
    parser.add_argument("--data", help="binarised fairseq translation data (default: generate)")
    parser.add_argument("--source-lang", default="src")
    parser.add_argument("--target-lang", default="tgt")
    parser.add_argument("--fairseq-args", default="",
                        help="more fairseq-train options for every run, one quoted string")
    parser.add_argument("--output-dir", default="depth-study", help="(./depth-study)")
    parser.add_argument("--force", action="store_true", help="rerun runs already stored")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    return parser


def generate_data(directory: str, progress) -> str:
    """A reverse-copy corpus (random words and their reversal), binarised by fairseq."""
    bin_dir = os.path.join(directory, "bin")
    if os.path.isfile(os.path.join(bin_dir, "dict.tgt.txt")):
        return bin_dir
    progress(f"generating and binarising a reverse-copy corpus in {directory}")
    raw = os.path.join(directory, "raw")
    rng = random.Random(0)
    words = [f"w{i}" for i in range(30)]
    for split, count in (("train", 4000), ("valid", 200)):
        src, tgt = [], []
        for _ in range(count):
            sentence = [rng.choice(words) for _ in range(rng.randint(3, 9))]
            src.append(" ".join(sentence) + "\n")
            tgt.append(" ".join(reversed(sentence)) + "\n")
        atomic_write_text(os.path.join(raw, f"{split}.src"), "".join(src))
        atomic_write_text(os.path.join(raw, f"{split}.tgt"), "".join(tgt))
    tmp = bin_dir + ".tmp"
    log = os.path.join(directory, "preprocess.log")
    code, signum = run_forwarding(
        ["fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
         "--trainpref", os.path.join(raw, "train"), "--validpref", os.path.join(raw, "valid"),
         "--destdir", tmp, "--joined-dictionary", "--workers", "1"], os.environ, [log])
    if signum:
        raise Interrupted(signum)
    if code:
        raise RuntimeError(f"fairseq-preprocess exited {code}; see {log}")
    move(tmp, bin_dir)
    return bin_dir


def train_command(args, data: str, method: str, layers: int) -> List[str]:
    return ["fairseq-train", data, "--user-dir", USER_DIR, "--cpu", "--task", "translation",
            "--source-lang", args.source_lang, "--target-lang", args.target_lang,
            *methods.get(method).train_args(layers, layers), *tiny_width_args(),
            "--share-all-embeddings", "--dropout", "0.0",
            "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", str(args.lr),
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(args.warmup),
            "--criterion", "cross_entropy", "--max-tokens", str(args.max_tokens),
            "--max-update", str(args.updates), "--seed", str(args.seed), "--no-save",
            "--num-workers", "0",
            "--log-format", "simple", "--log-interval", "10", *args.fairseq_args.split()]


def run_one(args, data: str, method: str, layers: int, baseline: float) -> Dict:
    """One fairseq-train, run as the recipes run theirs (processes.run_forwarding: Ctrl-C or
    SIGTERM reaches it, it dies with the study), its output in OUTPUT/runs/METHOD-N.log."""
    start = time.time()
    path = os.path.join(args.output_dir, "runs", f"{method}-{layers}.log")
    ensure_directory(os.path.dirname(path))
    open_no_follow(path, "w").close()
    code, signum = run_forwarding(train_command(args, data, method, layers), os.environ, [path])
    if signum:
        raise Interrupted(signum)
    with open(path, encoding="utf-8", errors="replace") as handle:
        log = handle.read()
    vocab = fairseq_log.vocab_size(os.path.join(data, f"dict.{args.target_lang}.txt"))
    outcome = fairseq_log.classify(log, code, vocab, min_updates=args.warmup)
    if outcome["status"] not in ("ok", "diverged"):
        raise RuntimeError(f"fairseq-train failed for {method} {layers}L-{layers}L "
                           f"({outcome['reason']}); its log: {path}\n{log[-3000:]}")
    nll = outcome["last_valid_nll"]
    valid_loss = math.nan if nll is None else nll
    if outcome["status"] == "diverged":
        status = "diverged"
    else:
        status = "stalled" if fairseq_log.stalled(valid_loss, baseline, args.margin) else "trained"
    return dict(method=method, encoder_layers=layers, decoder_layers=layers, status=status,
                valid_loss=valid_loss, baseline=baseline,
                last_train_loss=fairseq_log.last_train_loss(log), updates=outcome["num_updates"],
                seconds=round(time.time() - start, 1))


def markdown_table(rows: List[Dict], baseline: float) -> str:
    depths = sorted({r["encoder_layers"] for r in rows})
    lines = ["| method | " + " | ".join(f"{d}L-{d}L" for d in depths) + " |",
             "|---|" + "---|" * len(depths)]
    for method in dict.fromkeys(r["method"] for r in rows):
        cells = []
        for depth in depths:
            row = next((r for r in rows if r["method"] == method and r["encoder_layers"] == depth),
                       None)
            if row is None:
                cells.append("")
            elif row["status"] == "diverged":
                cells.append("diverged")
            elif row["status"] == "stalled":
                cells.append(f"stalled ({row['valid_loss']:.2f})")
            else:
                cells.append(f"{row['valid_loss']:.2f}")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Final validation loss (bits/token); source-blind baseline {baseline:.2f}.")
    return "\n".join(lines) + "\n"


def plot(path: str, rows: List[Dict], baseline: float, title: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["encoder_layers"])
        line, = ax.plot([r["encoder_layers"] for r in mine],
                        [r["valid_loss"] if math.isfinite(r["valid_loss"]) else float("nan")
                         for r in mine], marker="o", label=method)
        for r in mine:
            if r["status"] == "diverged":
                ax.plot([r["encoder_layers"]], [baseline], marker="x", color=line.get_color(),
                        markersize=10)
    ax.axhline(baseline, color="grey", linestyle="--", linewidth=1, label="source-blind baseline")
    ax.set_xscale("log")
    ax.set_xlabel("layers per side (N-N)")
    ax.set_ylabel("final valid loss (bits)")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    atomic_savefig(fig, path)
    plt.close(fig)


def write_csv(path: str, rows: List[Dict]) -> None:
    common.write_csv(path, rows, FIELDS, ".4f")


@one_line_os_errors
def main(argv=None) -> None:
    parser = get_parser()
    args = parser.parse_args(argv)
    try:
        with signals_interrupt():  # SIGTERM ends the study as Ctrl-C does, its run with it
            study(parser, args)
    except (Interrupted, KeyboardInterrupt) as err:
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        print(f"deepnet-depth-study stopped by {signal.Signals(signum).name}; run it again: "
              "finished runs are reused", file=sys.stderr)
        sys.exit(128 + signum)


def study(parser, args) -> None:
    if args.updates <= 0 or args.max_tokens <= 0:
        parser.error("--updates and --max-tokens must be positive")
    progress = Progress("deepnet-depth-study", args.quiet)
    data = args.data or generate_data(os.path.join(args.output_dir, "data"), progress)
    if not os.path.isfile(os.path.join(data, f"dict.{args.target_lang}.txt")):
        parser.error(f"{data} is not a binarised fairseq directory with dict.{args.target_lang}.txt")
    try:
        baseline = unigram_baseline(data, args.source_lang, args.target_lang)
    except FileNotFoundError as err:
        sys.exit(f"error: {err}")
    rows = []
    for layers in args.depths:
        for method in args.methods:
            record = os.path.join(args.output_dir, "runs", f"{method}-{layers}.json")
            settings = train_command(args, data, method, layers)
            if os.path.isfile(record) and not args.force:
                with open(record) as f:
                    stored = json.load(f)
                if stored.get("command") == settings:
                    progress(f"{method} {layers}L-{layers}L: stored ({stored['result']['status']})")
                    rows.append(stored["result"])
                    continue
            progress(f"{method} {layers}L-{layers}L: fairseq-train, {args.updates} updates")
            row = run_one(args, data, method, layers, baseline)
            progress(f"  {row['status']}, valid loss {row['valid_loss']:.3f} "
                     f"(baseline {baseline:.3f}), {row['seconds']:.0f}s")
            atomic_write_text(record, json.dumps({"command": settings, "result": row}, indent=1))
            rows.append(row)
    title = (f"64-128-2, adam lr {args.lr:g} warmup {args.warmup}, {args.updates} updates, "
             f"{args.max_tokens} tokens/batch, seed {args.seed}")
    table = markdown_table(rows, baseline)
    write_csv(os.path.join(args.output_dir, "depth_study.csv"), rows)
    atomic_write_text(os.path.join(args.output_dir, "depth_study.md"), f"{title}\n\n{table}")
    plot(os.path.join(args.output_dir, "depth_study.png"), rows, baseline, title)
    print(table, end="")
    print(f"wrote {os.path.join(args.output_dir, 'depth_study')}.{{csv,md,png}}")


if __name__ == "__main__":
    main()
