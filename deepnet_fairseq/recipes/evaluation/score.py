"""Score fairseq-generate output: detokenised sacreBLEU (with its signature) and, optionally,
tokenized BLEU with compound splitting (the paper's WMT-17 metric); averages over directions.

    python -m deepnet_fairseq.recipes.evaluation.score --out eval.json [--tokenized-bleu] \\
        [--compound-split] --direction en-de generate-test.txt test.de [--direction de-en ... ...]

GENERATE_OUTPUT is fairseq-generate's stdout (or its ``--results-path`` file) with
``--bpe sentencepiece``, so its ``D-<id>`` lines are detokenised hypotheses; REFERENCE is the
raw reference text, one sentence a line, in the same order as the test set.

* sacreBLEU: case-sensitive, its default 13a tokenisation, the detokenised hypotheses against
  the raw references, as they are in the test set (the standard, comparable across papers and
  systems; sacreBLEU does its own tokenisation and must not get pre-processed references). The
  signature is stored beside each score.
* chrF: sacreBLEU's own chrF (character 6-grams, beta 2, no word n-grams) on the same
  detokenised text, with its signature.
* tokenized BLEU (``--tokenized-bleu``): hypotheses and references processed the same way
  (``tokenize``): the recipes' cleaning normalisation (``clean.normaliser``: control
  characters removed, Moses punctuation normalisation, e.g. German quotes, „…“ and »…«, become
  "…"), Moses tokenisation (sacremoses, target language, not aggressive on hyphens), then with
  ``--compound-split`` hyphenated compounds split as ``a ##AT##-##AT## b`` (fairseq's
  ``compound_split_bleu.sh``); BLEU on those tokens with no further tokenisation, as
  multi-bleu.perl and ``fairseq-score`` compute it. fairseq's WMT practice scores the ``H-``
  lines against the ``T-`` lines of fairseq-generate, both of which went through the corpus's
  normalisation and tokenisation: normalising the test sources only (the model is trained on
  normalised text, so it writes normalised punctuation) and leaving the raw references would
  count every quote the normaliser rewrote as a miss. See docs/evaluation.md.
* X->En / En->X: unweighted means of the directions into / out of English (OPUS-100 practice).
"""

import re
import statistics
import sys
import unicodedata
from typing import Dict, List

import sacrebleu

from .. import cli_parser
from ...storage.records import write_record
from ...storage.fileio import (add_force_argument, check_tool_output, one_line_os_errors,
                                open_regular)
from ..data.clean import dropped, normaliser, read_lines

_COMPOUND = re.compile(r"(\S)-(\S)")


def as_decoded(line: str) -> str:
    """Text as the model's output reaches the scorer: Unicode NFKC (sentencepiece's
    normalisation, ``spm.NORMALIZATION``, which every hypothesis went through), without the
    characters cleaning removes from every line the model reads or learns from
    (``clean.dropped``: control characters such as NUL, ESC or CR, the byte-order mark), which
    no translation can contain. Applied to both sides, so that a reference saved as NFD
    (macOS), with a BOM, CRLF line ends or a stray control character is compared as the text it
    is, not as its bytes: a perfect translation scores 100."""
    return unicodedata.normalize("NFKC", "".join(ch for ch in line if not dropped(ch)))


def references(path: str) -> List[str]:
    """The reference lines of ``path``, split as the corpus's lines are (``clean.read_lines``:
    on \\n only, so a lone \\r cannot add a line; strict UTF-8) and read ``as_decoded``."""
    return [as_decoded(line) for line in read_lines(path)]


def hypotheses(generate_output: str) -> List[str]:
    """The ``D-<id>`` hypotheses of a fairseq-generate output, in test-set order."""
    by_id = {}
    with open_regular(generate_output, "r") as handle:  # a FIFO refused, not waited on
        for line in handle:
            if line.startswith("D-"):
                head, _score, text = (line.rstrip("\n").split("\t") + ["", ""])[:3]
                by_id[int(head[2:])] = as_decoded(text)
    return [by_id[i] for i in sorted(by_id)]


def tokenize(lines: List[str], lang: str, compound_split: bool) -> List[str]:
    """Tokenized BLEU's processing of either side: normalised as the corpus was
    (``clean.normaliser``), Moses-tokenised, compounds split if asked."""
    from sacremoses import MosesTokenizer  # here: its import costs a dry run 0.7 s

    normalise, tok = normaliser(lang), MosesTokenizer(lang=lang)
    out = [tok.tokenize(normalise(line), escape=False, return_str=True) for line in lines]
    if compound_split:  # one pass, as fairseq's compound_split_bleu.sh
        out = [_COMPOUND.sub(r"\1 ##AT##-##AT## \2", line) for line in out]
    return out


def score_direction(generate_output: str, reference: str, target_lang: str,
                    tokenized: bool, compound_split: bool) -> Dict:
    hyps, refs = hypotheses(generate_output), references(reference)
    if len(hyps) != len(refs):
        raise ValueError(f"{generate_output} has {len(hyps)} hypotheses but {reference} has "
                         f"{len(refs)} references: decoding was incomplete or the files differ")
    metric, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    result = {"sacrebleu": round(metric.corpus_score(hyps, [refs]).score, 2),
              "signature": str(metric.get_signature()),
              "chrf": round(chrf.corpus_score(hyps, [refs]).score, 2),
              "chrf_signature": str(chrf.get_signature()), "sentences": len(refs)}
    if tokenized:
        tok_metric = sacrebleu.BLEU(tokenize="none", force=True)
        result["tok_bleu"] = round(tok_metric.corpus_score(
            tokenize(hyps, target_lang, compound_split),
            [tokenize(refs, target_lang, compound_split)]).score, 2)
        result["tok_bleu_kind"] = ("normalised, moses-tokenized"
                                   + (", compound-split" if compound_split else ""))
    return result


def summarise(directions: Dict[str, Dict]) -> Dict:
    summary = {"directions": directions}
    scores = {name: d["sacrebleu"] for name, d in directions.items()}
    summary["sacrebleu_avg"] = round(statistics.fmean(scores.values()), 2)
    chrf = [d["chrf"] for d in directions.values() if "chrf" in d]
    if len(chrf) == len(directions):
        summary["chrf_avg"] = round(statistics.fmean(chrf), 2)
    x_en = [s for name, s in scores.items() if name.endswith("-en")]
    en_x = [s for name, s in scores.items() if name.startswith("en-")]
    if x_en:
        summary["x_en"] = round(statistics.fmean(x_en), 2)
    if en_x:
        summary["en_x"] = round(statistics.fmean(en_x), 2)
    return summary


@one_line_os_errors
def main(argv=None) -> None:
    parser = cli_parser("python -m deepnet_fairseq.recipes.evaluation.score", __doc__)
    parser.add_argument("--direction", nargs=3, action="append", required=True,
                        metavar=("SRC-TGT", "GENERATE_OUTPUT", "REFERENCE"))
    parser.add_argument("--tokenized-bleu", action="store_true")
    parser.add_argument("--compound-split", action="store_true")
    parser.add_argument("--out", required=True, help="JSON to write")
    add_force_argument(parser, "an existing --out")
    args = parser.parse_args(argv)
    read = [path for _, *pair in args.direction for path in pair]
    check_tool_output(args.out, read, args.force, "--out")
    directions = {}
    try:
        for name, generated, reference in args.direction:
            target = name.split("-")[-1]
            directions[name] = {**score_direction(generated, reference, target,
                                                  args.tokenized_bleu, args.compound_split),
                                "reference": reference}
    except (OSError, ValueError) as err:
        parser.error(str(err))
    summary = summarise(directions)
    write_record(args.out, "eval", summary, inputs=read, force=args.force)
    for name, d in directions.items():
        extra = f", tokenized BLEU {d['tok_bleu']}" if "tok_bleu" in d else ""
        print(f"{name}: sacreBLEU {d['sacrebleu']}{extra}", file=sys.stderr)
    if len(directions) > 1:
        print(f"average sacreBLEU {summary['sacrebleu_avg']}  X->En {summary.get('x_en')}  "
              f"En->X {summary.get('en_x')}", file=sys.stderr)


if __name__ == "__main__":
    main()
