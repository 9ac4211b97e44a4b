"""Normalise and filter a parallel corpus (the cleaning step of every recipe's prepare.sh).

    python -m deepnet_fairseq.recipes.clean --src-lang en --tgt-lang de \\
        --src raw/train.en --tgt raw/train.de --out-prefix clean/train [--filter]

Every line is normalised (``normaliser``): control characters removed, Moses punctuation
normalisation (sacremoses, per language), whitespace collapsed. Format characters are kept:
the zero-width non-joiner and joiner (U+200C, U+200D) are letters' shapes in Persian, Urdu,
Kurdish and the Indic scripts of OPUS-100 ("می‌خواهم", Persian "I want", has a U+200C). With ``--filter`` (training data
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
BYTE_ORDER_MARK = "\ufeff"


def dropped(ch: str) -> bool:
    """Whether cleaning removes ``ch``. By Unicode general category (the C* "other" ones):

    * Cc, control characters (NUL, BEL, ESC, CR, the C1 controls...): removed, but the tab,
      which separates words (it becomes a space, as all whitespace does);
    * Cf, format characters (ZWNJ U+200C, ZWJ U+200D, the bidirectional marks of Arabic and
      Hebrew text, the soft hyphen): kept, they are part of the writing of several OPUS-100
      languages and of emoji sequences; except U+FEFF, the byte order mark that a file
      written by some editors starts with, which is never text;
    * Cs, surrogates: removed; only a mis-decoded file has them (UTF-8 cannot encode a lone
      surrogate, so writing the line would fail);
    * Co, private use, and Cn, unassigned: kept. Private-use code points carry text in some
      legacy font encodings, and what is unassigned depends on the Unicode version of the
      Python that runs this (a character added in a later version, such as a new emoji, is
      Cn in an older one): removing them would make the cleaned corpus depend on it.
    """
    category = unicodedata.category(ch)
    return (category == "Cc" and ch != "\t") or category == "Cs" or ch == BYTE_ORDER_MARK


def normaliser(lang: str):
    """line -> its cleaned form: characters ``dropped`` removed, Moses punctuation
    normalisation for ``lang``, whitespace runs made one space, no space at either end."""
    punct = MosesPunctNormalizer(lang=lang)

    def normalise(line: str) -> str:
        line = "".join(ch for ch in line if not dropped(ch))
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
