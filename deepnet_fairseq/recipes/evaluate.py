"""Evaluate one trained run, in one process: average its last checkpoints, decode each
direction with fairseq-generate's own code, score it (``score.py``), write eval.json.

    python -m deepnet_fairseq.recipes.evaluate --run-dir RUN --average-last 5 \\
        --directions en-de --references DATA/raw [--tokenized-bleu] [--compound-split] \\
        -- DATA_BIN [fairseq-generate options but --path: --beam 5 --lenpen 1.0 ...]

1. ``RUN/eval.tmp/averaged.pt``: the mean of the last ``--average-last`` update checkpoints
   ``RUN/checkpoints/checkpoint_E_U.pt`` (fewer if fewer exist; checkpoint_last.pt if none);
2. for each direction S-T, fairseq_cli.generate's ``main`` with the given options plus
   ``--path averaged.pt --source-lang S --target-lang T --results-path RUN/eval.tmp/S-T``:
   the output is exactly fairseq-generate's (``S-T/generate-test.txt``). One process for all
   directions because OPUS-100 has 198 of them and every fairseq-generate start pays for
   importing torch and fairseq;
3. sacreBLEU (and tokenized BLEU if asked) against ``REFERENCES/test.S-T.T`` (or
   ``test.T-S.T``, pairs being stored once), X->En / En->X averages, into ``eval.json``;
4. ``RUN/eval.tmp`` becomes ``RUN/eval`` (the averaged weights are deleted: they are large and
   can be rebuilt). An interrupted evaluation resumes: finished directions are kept.
"""

import argparse
import os
import shutil
import sys

from . import write_json
from .score import score_direction, summarise


def average_last(checkpoints: str, count: int, output: str) -> None:
    from ..average_checkpoints import average, last_checkpoints, save_atomically

    available = len([n for n in os.listdir(checkpoints) if n.count("_") == 2 and n.endswith(".pt")
                     and n.startswith("checkpoint_")])
    if available < count:
        print(f"warning: {available} update checkpoint(s) in {checkpoints}, fewer than "
              f"--average-last {count} (a short run?)", file=sys.stderr)
        count = available
    if count == 0:
        print("evaluating checkpoint_last.pt as it is", file=sys.stderr)
        shutil.copyfile(os.path.join(checkpoints, "checkpoint_last.pt"), output + ".tmp")
        os.replace(output + ".tmp", output)
        return
    paths = last_checkpoints(checkpoints, count, "update")
    print(f"averaging {count} checkpoints: {' '.join(map(os.path.basename, paths))}",
          file=sys.stderr)
    save_atomically(average(paths), output)


def generate(direction: str, averaged: str, out_dir: str, generate_args) -> str:
    """fairseq-generate for one direction; returns the path of its output."""
    from fairseq import options
    from fairseq_cli.generate import main as generate_main

    src, tgt = direction.split("-")
    final = os.path.join(out_dir, direction)
    if not os.path.isdir(final):
        tmp = final + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        args = options.parse_args_and_arch(options.get_generation_parser(), [
            *generate_args, "--path", averaged, "--source-lang", src, "--target-lang", tgt,
            "--results-path", tmp])
        generate_main(args)
        os.replace(tmp, final)
    return os.path.join(final, "generate-test.txt")


def reference(references: str, direction: str) -> str:
    src, tgt = direction.split("-")
    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        path = os.path.join(references, f"test.{pair}.{tgt}")
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"no reference for {direction} in {references} (test.{src}-{tgt}.{tgt})")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepnet_fairseq.recipes.evaluate",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--average-last", type=int, required=True)
    parser.add_argument("--directions", required=True, help="comma-separated SRC-TGT list")
    parser.add_argument("--references", required=True, help="directory of test.PAIR.LANG text")
    parser.add_argument("--tokenized-bleu", action="store_true")
    parser.add_argument("--compound-split", action="store_true")
    parser.add_argument("generate_args", nargs=argparse.REMAINDER,
                        help="after --: DATA_BIN and fairseq-generate options (no --path)")
    args = parser.parse_args(argv)
    generate_args = args.generate_args[1:] if args.generate_args[:1] == ["--"] else args.generate_args
    checkpoints = os.path.join(args.run_dir, "checkpoints")
    work = os.path.join(args.run_dir, "eval.tmp")
    averaged = os.path.join(work, "averaged.pt")
    last = os.path.join(checkpoints, "checkpoint_last.pt")
    if not os.path.isfile(last):
        parser.error(f"no {last}: train the run first")
    if not (os.path.isfile(averaged) and os.path.getmtime(averaged) > os.path.getmtime(last)):
        shutil.rmtree(work, ignore_errors=True)  # stale: the checkpoints changed since
        os.makedirs(work)
        average_last(checkpoints, args.average_last, averaged)
    directions = {}
    for direction in args.directions.split(","):
        output = generate(direction, averaged, work, generate_args)
        directions[direction] = score_direction(output, reference(args.references, direction),
                                                direction.split("-")[1], args.tokenized_bleu,
                                                args.compound_split)
        extra = (f", tokenized BLEU {directions[direction]['tok_bleu']}"
                 if args.tokenized_bleu else "")
        print(f"{direction}: sacreBLEU {directions[direction]['sacrebleu']}{extra}",
              file=sys.stderr)
    summary = summarise(directions)
    write_json(os.path.join(work, "eval.json"), summary)
    os.remove(averaged)
    final = os.path.join(args.run_dir, "eval")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(work, final)
    if len(directions) > 1:
        print(f"average sacreBLEU {summary['sacrebleu_avg']}  X->En {summary.get('x_en')}  "
              f"En->X {summary.get('en_x')}", file=sys.stderr)


if __name__ == "__main__":
    main()
