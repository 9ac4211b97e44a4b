"""Text side of every recipe's prepare.sh: clean, train sentencepiece, encode (cleaning and
encoding on ``--workers`` processes, a file or a pair's split each; the output is the same
for any number of them).

    python -m deepnet_fairseq.recipes.data.corpus --data DATA_DIR --pairs de-en,fr-en \\
        --vocab 32000 [--spm-sentences N] [--max-len 250] [--ratio 1.5] [--encoding utf-8] \\
        [--workers N]

Input: DATA_DIR/raw/{train,valid,test}.{PAIR}.{LANG} (PAIR = SRC-TGT, line-aligned text in
``--encoding``, UTF-8 by default; every step after cleaning reads and writes UTF-8).
Output, each step once (a finished step is skipped when re-run) and each written to a
temporary name first (directories made and replaced through ``workdir.py``: only those the
recipes created are ever deleted), and a failed step leaves nothing behind:

1. DATA_DIR/clean/: normalised text (``clean.py``); training pairs also filtered;
2. DATA_DIR/spm.model: one joint sentencepiece model over all cleaned training text
   (``deepnet_fairseq.spm``);
3. DATA_DIR/spm/: every split encoded into pieces, ready for fairseq-preprocess.
"""

import contextlib
import os
import sys

from .. import cli_parser
from ... import spm
from .clean import clean
from ..base.rawtext import SPLITS
from ...storage.directories import NotOurs, building, publish
from ...storage.fileio import create_new, is_disk_error, one_line_os_errors
from ..base.machine import cores
from .workers import run_all

_PROCESSORS = {}  # the sentencepiece model, loaded once per process (one file's worker, or all files)


def _encode_task(model: str, source: str, dest: str) -> None:
    if model not in _PROCESSORS:  # through the one reader of a model (a FIFO refused)
        _PROCESSORS[model] = spm.load(model)
    # newline="\n": lines as cleaning wrote them (it leaves no \r in them)
    with open(source, encoding="utf-8", newline="\n") as src, \
            create_new(dest) as dst:  # in the directory being built
        spm.encode(_PROCESSORS[model], src, dst)


def prepare(data: str, pairs, vocab: int, spm_sentences: int, max_len: int, ratio: float,
            encoding: str = "utf-8", stage=lambda name: contextlib.nullcontext(), workers: int = 1):
    """The three steps; ``stage(name)`` is entered around each step that runs (the prepare
    step's timings). Cleaning (a task per pair and split) and encoding (a task per file) run
    on ``workers`` processes (``workers.py``); what they write is the same for any number."""
    raw, cleaned, pieces = (os.path.join(data, d) for d in ("raw", "clean", "spm"))
    if not os.path.exists(os.path.join(cleaned, ".done")):
        with stage("clean"), building(cleaned) as tmp:
            names = [(pair, split) for pair in pairs for split in SPLITS]
            tasks = []
            for pair, split in names:
                src, tgt = pair.split("-")
                tasks.append((f"{raw}/{split}.{pair}.{src}", f"{raw}/{split}.{pair}.{tgt}", src,
                              tgt, f"{tmp}/{split}.{pair}", split == "train", max_len, ratio,
                              encoding))

            def cleaned_one(index, result):
                (pair, split), (kept, total) = names[index], result
                print(f"clean {split}.{pair}: kept {kept} of {total} pairs", file=sys.stderr)
                if kept == 0:
                    raise ValueError(f"no {split} pairs left for {pair} after cleaning")

            run_all(clean, tasks, workers, cleaned_one,
                    sizes=[os.path.getsize(task[0]) + os.path.getsize(task[1]) for task in tasks])
            publish(tmp, cleaned)
    model = os.path.join(data, "spm.model")
    if not os.path.exists(model):
        inputs = [f"{cleaned}/train.{pair}.{lang}" for pair in pairs for lang in pair.split("-")]
        print(f"sentencepiece: vocabulary {vocab} over {len(inputs)} files", file=sys.stderr)
        with stage("sentencepiece"):
            spm.train(inputs, os.path.join(data, "spm"), vocab, max_sentences=spm_sentences)
    if not os.path.exists(os.path.join(pieces, ".done")):
        with stage("encode"), building(pieces) as tmp:
            names = [f"{split}.{pair}.{lang}" for pair in pairs for split in SPLITS
                     for lang in pair.split("-")]
            run_all(_encode_task, [(model, f"{cleaned}/{name}", f"{tmp}/{name}") for name in names],
                    workers, sizes=[os.path.getsize(f"{cleaned}/{name}") for name in names])
            publish(tmp, pieces)


@one_line_os_errors
def main(argv=None) -> None:
    parser = cli_parser("python -m deepnet_fairseq.recipes.data.corpus", __doc__)
    parser.add_argument("--data", required=True, help="the recipe's data directory")
    parser.add_argument("--pairs", required=True, help="comma-separated SRC-TGT pairs")
    parser.add_argument("--vocab", type=int, required=True, help="sentencepiece vocabulary")
    parser.add_argument("--spm-sentences", type=int, default=10_000_000,
                        help="sentences sampled to train sentencepiece (default: %(default)s)")
    parser.add_argument("--max-len", type=int, default=250, help="default: %(default)s words")
    parser.add_argument("--ratio", type=float, default=1.5, help="default: %(default)s")
    parser.add_argument("--workers", type=int, default=cores(),
                        help="processes for cleaning and encoding (default: every core, "
                             "%(default)s here; the recipes' WORKERS)")
    parser.add_argument("--encoding", default="utf-8",
                        help="of the raw text (default: %(default)s; the recipes' ENCODING)")
    args = parser.parse_args(argv)
    try:
        prepare(args.data, args.pairs.split(","), args.vocab, args.spm_sentences, args.max_len,
                args.ratio, args.encoding, workers=max(1, args.workers))
    except (OSError, ValueError, RuntimeError, NotOurs) as err:
        if is_disk_error(err):
            raise
        parser.error(str(err))


if __name__ == "__main__":
    main()
