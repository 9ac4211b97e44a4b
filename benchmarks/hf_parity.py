"""A trained run's test set through Hugging Face transformers against the recipe's own
fairseq-generate translations: how many of them are identical, and how fast each decodes.
Prints a table; it is a benchmark, not a test (tests/unit/test_hf_export.py is the test).

The model is the run's evaluated model: its last ``--average-last`` update checkpoints
(by default as many as its evaluation averaged) averaged as the recipe averages them, exported with ``deepnet-export --transformers`` and
loaded by ``AutoModelForSeq2SeqLM`` (no code of this plugin). Its sources are the ``S-`` lines
of the run's ``eval/SRC-TGT/generate-test.txt``, its reference the ``D-`` lines; transformers
decodes in batches of ``--batch-size`` with the beam, length penalty and length limit the run's
evaluation used (its recorded command: ``--beam``, ``--lenpen``, ``--max-len-a/-b``), not the
exported generation_config.json's defaults (beam 5, up to 200 tokens), which would compare two
searches. fairseq's limit is ``a * (longest source in the batch, EOS included) + b`` tokens;
the recipe's test sets fit in one of its batches, so that is the longest test source.

    python benchmarks/hf_parity.py runs/quickstart/runs/deepnet-6L-6L \\
        --sentencepiece-model runs/quickstart/data/spm.model
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def fairseq_lines(path: str):
    """{id: (source, hypothesis)} from fairseq-generate's S- and D- lines."""
    sources, hypotheses = {}, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            match = re.match(r"^([SD])-(\d+)\t(.*)$", line.rstrip("\n"))
            if match:
                kind, index, rest = match.groups()
                if kind == "S":
                    sources[int(index)] = rest
                else:
                    hypotheses[int(index)] = rest.split("\t", 1)[1]
    return {i: (sources[i], hypotheses[i]) for i in sorted(sources)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run directory the recipes trained and evaluated")
    parser.add_argument("--sentencepiece-model", required=True)
    parser.add_argument("--direction", default="en-de")
    parser.add_argument("--average-last", type=int, default=None,
                        help="checkpoints to average (default: as the run's evaluation did)")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    with open(os.path.join(args.run_dir, "evaluate.config.json"), encoding="utf-8") as f:
        command = json.load(f)["command"]  # the run's evaluation, as recorded

    def recorded(option, kind):
        return kind(command[command.index(option) + 1])

    if args.average_last is None:
        args.average_last = recorded("--average-last", int)
    lines = fairseq_lines(os.path.join(args.run_dir, "eval", args.direction,
                                       "generate-test.txt"))
    from deepnet_fairseq.storage.fileio import scratch_directory

    with scratch_directory() as tmp:
        averaged, exported = os.path.join(tmp, "averaged.pt"), os.path.join(tmp, "hf")
        subprocess.run(["deepnet-average-checkpoints", "--inputs",
                        os.path.join(args.run_dir, "checkpoints"), "--num-update-checkpoints",
                        str(args.average_last), "--output", averaged], check=True)
        subprocess.run(["deepnet-export", averaged, "--transformers", exported,
                        "--sentencepiece-model", args.sentencepiece_model], check=True)
        tokenizer = AutoTokenizer.from_pretrained(exported)
        model = AutoModelForSeq2SeqLM.from_pretrained(exported).eval()
        ids = sorted(lines)
        longest = tokenizer([lines[i][0] for i in ids], return_tensors="pt",
                            padding=True)["input_ids"].shape[1]
        search = {"num_beams": recorded("--beam", int),
                  "length_penalty": recorded("--lenpen", float),
                  # the decoder's start token, fairseq's max_len tokens, then its EOS
                  "max_length": int(recorded("--max-len-a", float) * longest
                                    + recorded("--max-len-b", int)) + 2}
        translations, start = {}, time.perf_counter()
        for begin in range(0, len(ids), args.batch_size):
            batch_ids = ids[begin:begin + args.batch_size]
            batch = tokenizer([lines[i][0] for i in batch_ids], return_tensors="pt",
                              padding=True)
            with torch.no_grad():
                out = model.generate(**batch, **search)
            for i, text in zip(batch_ids, tokenizer.batch_decode(out, skip_special_tokens=True)):
                translations[i] = text
        seconds = time.perf_counter() - start
    same = [i for i in ids if translations[i] == lines[i][1]]
    print(f"beam {search['num_beams']}, lenpen {search['length_penalty']}, at most "
          f"{search['max_length'] - 2} tokens and EOS, as the run's evaluation")
    print(f"| sentences | identical to fairseq-generate's | transformers decoding "
          f"(batch {args.batch_size}, {torch.get_num_threads()} threads) |")
    print("|---|---|---|")
    print(f"| {len(ids)} | {len(same)} | {seconds:.1f} s |")
    for i in [i for i in ids if i not in same][:5]:
        print(f"\ndiffers, sentence {i}:\n  source       {lines[i][0]}\n  fairseq      "
              f"{lines[i][1]}\n  transformers {translations[i]}")


if __name__ == "__main__":
    main()
