"""Train and apply a joint sentencepiece model (the subword step of every recipe).

    python -m deepnet_fairseq.spm train --inputs train.en train.de --model-prefix spm --vocab-size 8000
    python -m deepnet_fairseq.spm encode --model spm.model < raw.txt > pieces.txt

Outputs are written to a temporary name and renamed when complete.
"""

import argparse
import os
import sys

import sentencepiece


def train(inputs, model_prefix: str, vocab_size: int, character_coverage: float = 1.0,
          max_sentences: int = 10_000_000) -> None:
    missing = [path for path in inputs if not os.path.isfile(path)]
    if missing:
        raise FileNotFoundError(f"sentencepiece training input(s) not found: {', '.join(missing)}")
    tmp_prefix = f"{model_prefix}.tmp{os.getpid()}"
    sentencepiece.SentencePieceTrainer.train(
        input=",".join(inputs),
        model_prefix=tmp_prefix,
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        model_type="unigram",
        input_sentence_size=max_sentences,
        shuffle_input_sentence=True,
        # fairseq adds its own <s>, <pad>, </s>, <unk>; keep ids compatible with its dictionary
        bos_id=-1, eos_id=-1, unk_id=0,
        minloglevel=2,
    )
    for ext in ("model", "vocab"):
        os.replace(f"{tmp_prefix}.{ext}", f"{model_prefix}.{ext}")


def encode(model: str, src=sys.stdin, dst=sys.stdout) -> None:
    processor = sentencepiece.SentencePieceProcessor(model_file=model)
    for line in src:
        dst.write(" ".join(processor.encode(line.rstrip("\n"), out_type=str)) + "\n")


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
    p_enc = sub.add_parser("encode", help="split stdin into pieces, written to stdout")
    p_enc.add_argument("--model", required=True, help="a .model written by 'train'")
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            train(args.inputs, args.model_prefix, args.vocab_size, args.character_coverage)
        else:
            encode(args.model)
    except (FileNotFoundError, OSError, RuntimeError) as err:
        parser.error(str(err))


if __name__ == "__main__":
    main()
