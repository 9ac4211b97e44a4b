"""Train and apply a joint sentencepiece model (the subword step of every recipe).

    python -m deepnet_fairseq.spm train --inputs train.en train.de --model-prefix spm --vocab-size 8000
    python -m deepnet_fairseq.spm encode --model spm.model < raw.txt > pieces.txt

Outputs are written to a temporary name and renamed when complete.
"""

import argparse
import os
import re
import sys

import sentencepiece

from .storage.fileio import (add_force_argument, check_output, check_regular, check_tool_output,
                             is_disk_error, move, one_line_os_errors, temporary_beside)


# entries of a fairseq dictionary that no sentencepiece model holds: fairseq's four specials,
# the language tokens of a multilingual task (__de__), the fillers of --padding-factor
_NOT_A_PIECE = re.compile(r"^(<s>|<pad>|</s>|<unk>|__[\w-]+__|madeupword\d+)$")


def load(model: str) -> "sentencepiece.SentencePieceProcessor":
    """The sentencepiece model at MODEL, a FIFO, device, socket or directory refused first
    (``NotRegularFile``): sentencepiece opens it by name and would block on a FIFO."""
    check_regular(model)
    return sentencepiece.SentencePieceProcessor(model_file=model)


def mismatch(model: str, tokens) -> "str | None":
    """Why the sentencepiece MODEL is not the one a dictionary of TOKENS was made with, or None:
    it cannot be read, or one of the tokens (fairseq's own entries aside) is not one of its
    pieces, as it is whenever the dictionary was made from its output. Every door that pairs a
    sentencepiece model with a model's dictionary asks this (the Python API, both exports):
    text cut by another model's pieces would be binarised into other tokens, silently."""
    try:
        processor = load(model)
    except (OSError, RuntimeError) as err:
        return (f"{model} is not a sentencepiece model "
                f"({str(err).splitlines()[0] if str(err) else type(err).__name__})")
    pieces = {processor.id_to_piece(i) for i in range(processor.get_piece_size())}
    for token in tokens:
        if not _NOT_A_PIECE.match(token) and token not in pieces:
            return (f"the dictionary holds {token!r}, which is not a piece of {model}: text "
                    "would be cut into other pieces than the model was trained on")
    return None


class TrainingError(RuntimeError):
    """Sentencepiece cannot train on these inputs (the message says what to change)."""


# sentencepiece (0.1.9x to 0.2.x) states the bounds in its errors, e.g. "Vocabulary size too
# high (4000). Please set it to a value <= 1234." after building all the pieces the text
# supports (so the bound is exact), and "Vocabulary size is smaller than required_chars. 3 vs
# 13." when the text has more distinct characters (plus the special pieces) than the vocabulary.
_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_TOO_LOW = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def _explain(err: RuntimeError, inputs, vocab_size: int) -> TrainingError:
    """sentencepiece's error (an "INTERNAL" check failure with a source location) as one line
    that says what to change."""
    text, message = ", ".join(inputs), str(err)
    if match := _TOO_HIGH.search(message):
        most = match.group(2)
        return TrainingError(f"vocabulary size {vocab_size} is too large for the training text "
                             f"({text}): it supports at most {most}; set the vocabulary to "
                             f"{most} or less, or train on more text")
    if match := _TOO_LOW.search(message):
        least = match.group(2)
        return TrainingError(f"vocabulary size {vocab_size} is too small for the training text "
                             f"({text}): its characters alone need {least}; set the vocabulary "
                             f"to at least {least}, or lower character_coverage")
    if "sentences_.empty()" in message:
        return TrainingError(f"no training text for sentencepiece in {text}")
    return TrainingError(f"sentencepiece training on {text} failed: {message}")


# sentencepiece's normalisation: Unicode NFKC only. Its default, nmt_nfkc, also maps the
# zero-width non-joiner (U+200C) to a space, which splits Persian, Urdu, Kurdish and Indic words
# ("می‌خواهم", "I want", became "می خواهم"); cleaning keeps it (docs/evaluation.md).
NORMALIZATION = "nfkc"


def train(inputs, model_prefix: str, vocab_size: int, character_coverage: float = 1.0,
          max_sentences: int = 10_000_000, normalization: str = NORMALIZATION) -> None:
    """Write MODEL_PREFIX.model and .vocab, or raise ``TrainingError`` leaving neither (nor any
    temporary) when the text cannot support ``vocab_size`` pieces. ``normalization``:
    sentencepiece's normalization_rule_name (``NORMALIZATION``)."""
    for path in inputs:  # sentencepiece opens them by name: a FIFO would block it
        check_regular(path)
    missing = [path for path in inputs if not os.path.isfile(path)]
    if missing:
        raise FileNotFoundError(f"sentencepiece training input(s) not found: {', '.join(missing)}")
    outputs = {ext: f"{model_prefix}.{ext}" for ext in ("model", "vocab")}
    check_output(outputs["vocab"], inputs)
    # sentencepiece writes its files itself: into a temporary directory of the layer, named
    # for the output, so a killed run's is found and removed by the next
    with temporary_beside(outputs["model"], inputs) as tmp:
        try:
            sentencepiece.SentencePieceTrainer.train(
                input=",".join(inputs),
                model_prefix=os.path.join(tmp, "spm"),
                vocab_size=vocab_size,
                character_coverage=character_coverage,
                model_type="unigram",
                input_sentence_size=max_sentences,
                shuffle_input_sentence=True,
                normalization_rule_name=normalization,
                # fairseq adds its own <s>, <pad>, </s>, <unk>; keep ids compatible with its
                # dictionary
                bos_id=-1, eos_id=-1, unk_id=0,
                minloglevel=2,
            )
        except RuntimeError as err:
            raise _explain(err, inputs, vocab_size) from None
        for ext, path in outputs.items():
            move(os.path.join(tmp, f"spm.{ext}"), path)


def encode(model, src=sys.stdin, dst=sys.stdout) -> None:
    """Every line of SRC as pieces into DST; MODEL: a .model path or a loaded processor."""
    processor = (model if isinstance(model, sentencepiece.SentencePieceProcessor)
                 else load(model))
    for line in src:
        dst.write(" ".join(processor.encode(line.rstrip("\n"), out_type=str)) + "\n")


@one_line_os_errors
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepnet_fairseq.spm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="train a joint model on raw text files")
    p_train.add_argument("--inputs", nargs="+", required=True, help="raw text, one sentence a line")
    p_train.add_argument("--model-prefix", required=True, help="writes PREFIX.model, PREFIX.vocab")
    p_train.add_argument("--vocab-size", type=int, default=8000, help="default: %(default)s")
    p_train.add_argument("--character-coverage", type=float, default=1.0,
                         help="default: %(default)s (all characters)")
    add_force_argument(p_train, "an existing PREFIX.model and PREFIX.vocab")
    p_enc = sub.add_parser("encode", help="split stdin into pieces, written to stdout")
    p_enc.add_argument("--model", required=True, help="a .model written by 'train'")
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            for ext in ("model", "vocab"):
                check_tool_output(f"{args.model_prefix}.{ext}", args.inputs, args.force,
                                  "--model-prefix")
            train(args.inputs, args.model_prefix, args.vocab_size, args.character_coverage)
        else:
            encode(args.model)
    except (OSError, RuntimeError) as err:
        if is_disk_error(err):
            raise
        parser.error(str(err))


if __name__ == "__main__":
    main()
