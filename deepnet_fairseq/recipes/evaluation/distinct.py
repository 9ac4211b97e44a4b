"""How many different hypotheses a test set got: the quick sign of a model that ignores its
source. Such a model is a target-side language model: it writes the same few sentences for every
input, and its BLEU alone reads like "training is slow" rather than "the model is broken".

    python -m deepnet_fairseq.recipes.evaluation.distinct HYPOTHESES [--min-share 0.5]

HYPOTHESES has one detokenised hypothesis a line. Prints the count; prints a warning block and
exits with status 3 when fewer than ``--min-share`` of the lines are distinct (exit status 0
otherwise), so that scripts can stop or carry on as they choose.
"""

import collections
import sys
from typing import Dict, List

from .. import cli_parser

# Multi30k's 1,000 test references are 1,000 different sentences, and a translating model
# writes well over 90 % distinct hypotheses. Half is far below that and far above a collapsed
# model (a handful of sentences).
DEFAULT_MIN_SHARE = 0.5


def distinct_summary(hypotheses: List[str]) -> Dict:
    """Count, share and the most frequent hypothesis of a list of hypotheses."""
    if not hypotheses:
        raise ValueError("no hypotheses to count")
    counts = collections.Counter(hypotheses)
    top, top_count = counts.most_common(1)[0]
    return {"sentences": len(hypotheses), "distinct": len(counts),
            "distinct_share": round(len(counts) / len(hypotheses), 4),
            "most_frequent": top, "most_frequent_count": top_count}


def ignores_source(summary: Dict, min_share: float = DEFAULT_MIN_SHARE) -> bool:
    return summary["distinct_share"] < min_share


def counted(count: int, noun: str, plural: str = "") -> str:
    """"1 distinct translation", "60 distinct translations": the noun agrees with the count."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def report(summary: Dict, min_share: float = DEFAULT_MIN_SHARE) -> str:
    line = (f"{counted(summary['distinct'], 'distinct hypothesis', 'distinct hypotheses')} for "
            f"{counted(summary['sentences'], 'test sentence')} "
            f"({100 * summary['distinct_share']:.1f} %)")
    if not ignores_source(summary, min_share):
        return line
    bar = "!" * 78
    return "\n".join([
        bar, f"WARNING: {line}: the model ignores its source.",
        f"The most frequent hypothesis, written {summary['most_frequent_count']} times:",
        f"  {summary['most_frequent']}",
        "It has collapsed into a target-side language model; its BLEU measures nothing useful.",
        "Train longer, lower the learning rate or lengthen the warmup (see docs/findings.md).",
        bar])


def main(argv=None) -> int:
    parser = cli_parser("python -m deepnet_fairseq.recipes.evaluation.distinct", __doc__)
    parser.add_argument("hypotheses", help="one hypothesis a line")
    parser.add_argument("--min-share", type=float, default=DEFAULT_MIN_SHARE,
                        help="warn below this share of distinct lines [%(default)s]")
    args = parser.parse_args(argv)
    if not 0.0 < args.min_share <= 1.0:
        parser.error(f"--min-share must be in (0, 1], got {args.min_share}")
    try:
        with open(args.hypotheses, encoding="utf-8") as handle:
            summary = distinct_summary([line.rstrip("\n") for line in handle])
    except (OSError, ValueError) as err:
        parser.error(f"{args.hypotheses}: {err}")
    print(report(summary, args.min_share), file=sys.stderr)
    return 3 if ignores_source(summary, args.min_share) else 0


if __name__ == "__main__":
    sys.exit(main())
