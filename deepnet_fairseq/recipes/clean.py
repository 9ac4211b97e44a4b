"""Normalise and filter a parallel corpus (the cleaning step of every recipe's prepare.sh).

    python -m deepnet_fairseq.recipes.clean --src-lang en --tgt-lang de \\
        --src raw/train.en --tgt raw/train.de --out-prefix clean/train [--filter]

Every line is normalised: Moses punctuation normalisation (sacremoses, per language), control
and non-printing characters removed, whitespace collapsed. With ``--filter`` (training data
only) a pair is dropped when either side is empty, longer than ``--max-len`` words, or the
word counts differ by more than ``--ratio`` (Moses ``clean-corpus-n`` custom). Validation and
test data are normalised but never filtered, so they stay line-aligned with their references.
Writes OUT_PREFIX.SRC_LANG and OUT_PREFIX.TGT_LANG through temporary files and a rename.
"""

import argparse
import os
import re
import sys
import unicodedata

from sacremoses import MosesPunctNormalizer

from . import atomic_open

_SPACES = re.compile(r"\s+")


def normaliser(lang: str):
    punct = MosesPunctNormalizer(lang=lang)

    def normalise(line: str) -> str:
        line = "".join(ch for ch in line if not unicodedata.category(ch).startswith("C") or ch == "\t")
        return _SPACES.sub(" ", punct.normalize(line)).strip()

    return normalise


def keep(src: str, tgt: str, max_len: int, ratio: float) -> bool:
    n_src, n_tgt = len(src.split()), len(tgt.split())
    if n_src == 0 or n_tgt == 0 or n_src > max_len or n_tgt > max_len:
        return False
    return max(n_src, n_tgt) / min(n_src, n_tgt) <= ratio


def clean(src_path, tgt_path, src_lang, tgt_lang, out_prefix, filter_pairs, max_len, ratio):
    """Return (kept, total) after writing the cleaned pair of files."""
    norm_src, norm_tgt = normaliser(src_lang), normaliser(tgt_lang)
    kept = total = 0
    with open(src_path, encoding="utf-8", errors="replace") as fs, \
            open(tgt_path, encoding="utf-8", errors="replace") as ft, \
            atomic_open(f"{out_prefix}.{src_lang}") as out_src, \
            atomic_open(f"{out_prefix}.{tgt_lang}") as out_tgt:
        for total, (src, tgt) in enumerate(zip(fs, ft), start=1):
            src, tgt = norm_src(src), norm_tgt(tgt)
            if filter_pairs and not keep(src, tgt, max_len, ratio):
                continue
            out_src.write(src + "\n")
            out_tgt.write(tgt + "\n")
            kept += 1
        if fs.readline() or ft.readline():
            raise ValueError(f"{src_path} and {tgt_path} have different numbers of lines")
    return kept, total


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepnet_fairseq.recipes.clean",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--src-lang", required=True)
    parser.add_argument("--tgt-lang", required=True)
    parser.add_argument("--out-prefix", required=True)
    parser.add_argument("--filter", action="store_true", help="drop bad pairs (training data)")
    parser.add_argument("--max-len", type=int, default=250, help="default: %(default)s words")
    parser.add_argument("--ratio", type=float, default=1.5, help="default: %(default)s")
    args = parser.parse_args(argv)
    try:
        kept, total = clean(args.src, args.tgt, args.src_lang, args.tgt_lang, args.out_prefix,
                            args.filter, args.max_len, args.ratio)
    except (OSError, ValueError) as err:
        parser.error(str(err))
    print(f"{os.path.basename(args.out_prefix)}.{args.src_lang}-{args.tgt_lang}: "
          f"kept {kept} of {total} pairs", file=sys.stderr)


if __name__ == "__main__":
    main()
