"""Normalise and filter a parallel corpus (the cleaning step of every recipe's prepare.sh).

    python -m deepnet_fairseq.recipes.data.clean --src-lang en --tgt-lang de \\
        --src raw/train.en --tgt raw/train.de --out-prefix clean/train [--filter]

Every line is normalised (``normaliser``): control characters removed, Moses punctuation
normalisation (sacremoses, per language), whitespace collapsed. Format characters are kept:
the zero-width non-joiner and joiner (U+200C, U+200D) are letters' shapes in Persian, Urdu,
Kurdish and the Indic scripts of OPUS-100 ("می‌خواهم", Persian "I want", has a U+200C). With ``--filter`` (training data
only) a pair is dropped when either side is empty, longer than ``--max-len`` words, or the
word counts differ by more than ``--ratio`` (Moses ``clean-corpus-n`` custom). Validation and
test data are normalised but never filtered, so they stay line-aligned with their references.
Input is read strictly in ``--encoding`` (default UTF-8) and split into lines on \\n only,
as ``wc -l`` counts them; an undecodable line or sides of different lengths are refused.
Writes OUT_PREFIX.SRC_LANG and OUT_PREFIX.TGT_LANG (UTF-8) through temporary files and a
rename, so an error leaves no output.
"""

import codecs
import itertools
import os
import re
import sys
import unicodedata

from .. import atomic_open, cli_parser
from ...storage.fileio import (add_force_argument, check_tool_output, is_disk_error,
                                one_line_os_errors, open_regular)

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
    # imported here, not at the top: planning a step (a dry run, --help) imports this module,
    # and sacremoses takes half a second to import
    from sacremoses import MosesPunctNormalizer

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


def check_encoding(encoding: str) -> None:
    """Refuse an encoding whose lines cannot be split on the byte \\n (UTF-16, UTF-32, EBCDIC):
    lines are split on bytes, as ``wc -l`` (the shell's alignment check) counts them."""
    try:
        ascii_compatible = b"\n\r a0".decode(encoding) == "\n\r a0"
    except LookupError:
        raise ValueError(f"unknown encoding {encoding!r}") from None
    except UnicodeDecodeError:
        ascii_compatible = False
    if not ascii_compatible:
        raise ValueError(f"encoding {encoding} is not ASCII-compatible (lines cannot be split "
                         "on newline bytes); convert the files to UTF-8")


def read_lines(path: str, encoding: str = "utf-8"):
    """Yield the lines of ``path`` decoded, without their line end.

    Lines are split on \\n only, so that they are the lines ``wc -l`` counts: a lone \\r
    inside a line stays in it (cleaning drops it as a control character) instead of splitting
    it and shifting every later pair. The \\r of a \\r\\n line end is removed with the \\n.
    Decoding is strict: an undecodable line is refused with its line number (from 1) and byte
    offsets (from 0) in the file and in the line, never replaced by U+FFFD.
    """
    with open_regular(path, "rb") as raw:  # a FIFO or device refused, not read for ever
        offset = 0
        for number, line in enumerate(raw, start=1):
            body = line[:-1] if line.endswith(b"\n") else line
            if body.endswith(b"\r"):
                body = body[:-1]
            try:
                yield body.decode(encoding)
            except UnicodeDecodeError as err:
                bad = " ".join(f"0x{byte:02x}" for byte in err.object[err.start:err.end])
                name = "UTF-8" if codecs.lookup(encoding).name == "utf-8" else encoding
                raise ValueError(
                    f"{path} line {number}, byte {offset + err.start} (byte {err.start} of the "
                    f"line): not {name} ({bad}); convert the file to UTF-8 or set "
                    "ENCODING=latin-1 (cp1252 for Windows text)") from None
            offset += len(line)


def count_lines(path: str):
    """(lines, whether the last one ends with \\n). ``wc -l`` counts \\n, so it counts one
    line fewer than there are when the last has no final newline."""
    lines, last = 0, b"\n"
    with open_regular(path, "rb") as raw:
        for lines, last in enumerate(raw, start=1):
            pass
    return lines, last.endswith(b"\n")


def _not_aligned(src_path: str, tgt_path: str) -> ValueError:
    parts = []
    for path in (src_path, tgt_path):
        lines, terminated = count_lines(path)
        note = ("" if terminated
                else f" (the last without a final newline: wc -l counts {lines - 1})")
        parts.append(f"{path} has {lines} lines{note}")
    return ValueError(f"{parts[0]} but {parts[1]}: not line-aligned")


def clean(src_path, tgt_path, src_lang, tgt_lang, out_prefix, filter_pairs, max_len, ratio,
          encoding="utf-8"):
    """Return (kept, total) after writing the cleaned pair of files (UTF-8).

    A last line without a final newline is a line (the pairs stay aligned when one side lacks
    it). Any error (undecodable line, different line counts, empty input) leaves no output:
    the outputs are temporaries until the whole input has been read, and ``atomic_open``
    removes them on an exception.
    """
    check_encoding(encoding)
    norm_src, norm_tgt = normaliser(src_lang), normaliser(tgt_lang)
    kept = total = 0
    inputs = (src_path, tgt_path)
    with atomic_open(f"{out_prefix}.{src_lang}", inputs=inputs) as out_src, \
            atomic_open(f"{out_prefix}.{tgt_lang}", inputs=inputs) as out_tgt:
        pairs = itertools.zip_longest(read_lines(src_path, encoding),
                                      read_lines(tgt_path, encoding))
        for total, (src, tgt) in enumerate(pairs, start=1):
            if src is None or tgt is None:
                raise _not_aligned(src_path, tgt_path)
            src, tgt = norm_src(src), norm_tgt(tgt)
            if filter_pairs and not keep(src, tgt, max_len, ratio):
                continue
            out_src.write(src + "\n")
            out_tgt.write(tgt + "\n")
            kept += 1
        if total == 0:
            raise ValueError(f"{src_path} and {tgt_path} are empty")
    return kept, total


@one_line_os_errors
def main(argv=None) -> None:
    parser = cli_parser("python -m deepnet_fairseq.recipes.data.clean", __doc__)
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--src-lang", required=True)
    parser.add_argument("--tgt-lang", required=True)
    parser.add_argument("--out-prefix", required=True)
    parser.add_argument("--filter", action="store_true", help="drop bad pairs (training data)")
    parser.add_argument("--max-len", type=int, default=250, help="default: %(default)s words")
    parser.add_argument("--ratio", type=float, default=1.5, help="default: %(default)s")
    parser.add_argument("--encoding", default="utf-8",
                        help="of the input files (default: %(default)s); output is UTF-8")
    add_force_argument(parser, "existing PREFIX.SRC_LANG and PREFIX.TGT_LANG")
    args = parser.parse_args(argv)
    for lang in (args.src_lang, args.tgt_lang):
        check_tool_output(f"{args.out_prefix}.{lang}", [args.src, args.tgt], args.force,
                          "--out-prefix")
    try:
        kept, total = clean(args.src, args.tgt, args.src_lang, args.tgt_lang, args.out_prefix,
                            args.filter, args.max_len, args.ratio, args.encoding)
    except (OSError, ValueError) as err:
        if is_disk_error(err):
            raise
        parser.error(str(err))
    print(f"{os.path.basename(args.out_prefix)}.{args.src_lang}-{args.tgt_lang}: "
          f"kept {kept} of {total} pairs", file=sys.stderr)


if __name__ == "__main__":
    main()
