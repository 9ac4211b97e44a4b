"""``deepnet translate``: a text file, or standard input, translated line by line to standard
output by a checkpoint of this plugin, through the Python API (``deepnet_fairseq.load``: the
same checks, the same translations).

    deepnet translate runs/quickstart/runs/deepnet-6L-6L < sentences.en > sentences.de
    deepnet translate CHECKPOINT --input sentences.en --beam 5 --batch-size 64

MODEL is a checkpoint file, or a run directory of the recipes (its
``checkpoints/checkpoint_last.pt``). One output line per input line, in order; a blank line
gives a blank line. Sentences are translated in batches of ``--batch-size``; on a long input a
progress line goes to stderr every ``--progress-every`` sentences."""

import argparse
import os
import sys
import time
from typing import List, Optional


def checkpoint_of(model: str) -> str:
    """MODEL's checkpoint: the file itself, or a run directory's checkpoint_last.pt."""
    if os.path.isdir(model):
        for candidate in (os.path.join(model, "checkpoints", "checkpoint_last.pt"),
                          os.path.join(model, "checkpoint_last.pt")):
            if os.path.isfile(candidate):
                return candidate
        raise FileNotFoundError(f"{model} is a directory without checkpoints/checkpoint_last.pt "
                                "(a run directory of the recipes) or checkpoint_last.pt: give a "
                                "checkpoint file or a run directory")
    return model


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="deepnet translate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a checkpoint file, or a run directory of the recipes")
    parser.add_argument("--input", default="-", help="the text to translate, one sentence a "
                                                     "line (default: standard input)")
    parser.add_argument("--data", help="the fairseq-preprocess directory of the model's "
                                       "dictionaries (default: the one the checkpoint records)")
    parser.add_argument("--sentencepiece-model", help="default: the checkpoint's own, else "
                                                      "spm.model beside the data directory")
    parser.add_argument("--pieces", action="store_true",
                        help="the text is already split into the model's pieces")
    parser.add_argument("--source-lang", help="a multilingual model's source language")
    parser.add_argument("--target-lang", help="a multilingual model's target language")
    parser.add_argument("--beam", type=int, default=5, help="beam size (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="sentences a batch (default: %(default)s)")
    parser.add_argument("--progress-every", type=int, default=1000,
                        help="a progress line on stderr every N sentences (default: %(default)s)")
    parser.add_argument("--verbose", action="store_true", help="fairseq's INFO lines on stderr")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    for name in ("beam", "batch_size", "progress_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    from . import load
    from .hub import LoadError

    try:
        checkpoint = checkpoint_of(args.model)
        languages = {key: value for key, value in (("source_lang", args.source_lang),
                                                   ("target_lang", args.target_lang)) if value}
        model = load(checkpoint, args.data, args.sentencepiece_model, args.pieces,
                     args.verbose, **languages)
        source = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8")
    except (LoadError, OSError) as err:
        print(f"deepnet translate: {err}", file=sys.stderr)
        return 2
    start, done = time.monotonic(), 0
    with source:
        batch: List[str] = []
        for line in source:
            batch.append(line.rstrip("\n"))
            if len(batch) == args.batch_size:
                done = _translate(model, batch, args, done, start)
                batch = []
        if batch:
            done = _translate(model, batch, args, done, start)
    return 0


def _translate(model, batch: List[str], args, done: int, start: float) -> int:
    from .hub import InputError

    try:
        out = model.translate(batch, beam=args.beam)
    except InputError as err:  # "sentence I: why", I in the batch: the line in the input
        index, _, why = str(err).partition(": ")
        line = done + int(index.split()[-1]) + 1 if index.startswith("sentence ") else done + 1
        print(f"deepnet translate: line {line}: {why or err}", file=sys.stderr)
        sys.exit(2)
    sys.stdout.write("".join(f"{line}\n" for line in out))
    sys.stdout.flush()
    before, done = done, done + len(batch)
    if done // args.progress_every > before // args.progress_every:
        rate = done / max(time.monotonic() - start, 1e-9)
        print(f"deepnet translate: {done} sentences, {rate:.1f} a second", file=sys.stderr)
    return done
