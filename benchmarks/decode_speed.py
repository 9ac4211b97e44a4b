"""Decoding speed of a DeepNet: fairseq-generate with the plugin against the model exported by
deepnet-export, decoded by stock fairseq-generate and by CTranslate2 (fp32, int8). One run each,
beam 5, the same CPU threads; prints sentences/s, the ratios to fairseq and sacreBLEU.

    python benchmarks/decode_speed.py --run-dir runs/quickstart/runs/deepnet-6L-6L --threads 2

--run-dir is a recipe run directory (``WORK/runs/NAME``, the quickstart's included), whose
data are in ``WORK/data`` (the benchmark's inputs, each can be given alone instead):
``checkpoints/checkpoint_last.pt`` of the run; from the data: ``bin/`` (fairseq-preprocess
output; its ``test`` split is the set decoded, Multi30k test_2016_flickr en->de for the
quickstart), ``spm.model`` (sentencepiece), ``spm/test.SRC-TGT.SRC`` (the test sources as
sentencepiece pieces: what CTranslate2 reads, the text ``bin/`` was binarised from) and
``raw/test.SRC-TGT.TGT`` (references). Outputs go to ``--out`` (default RUN_DIR/decode_speed):
the exported checkpoint and CTranslate2 models, each system's hypotheses in fairseq-generate's
format, and ``decode_speed.json`` with the table.

Timing: decoding only, model loading excluded: fairseq-generate's own "Translated N sentences
in T s" (its generation loop, batching included), and CTranslate2's ``translate_batch`` on the
whole test set. Both get ``--threads`` intra-op threads (OMP_NUM_THREADS / MKL_NUM_THREADS for
torch; ``intra_threads`` for CTranslate2, one translator) and batches of ``--batch-size``
sentences. It also measures the largest |difference| of the fp32 decoder outputs (logits,
teacher-forced on the test set) between the DeepNet and its export.
"""

import argparse
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from deepnet_fairseq import USER_DIR  # noqa: E402
from deepnet_fairseq.recipes import write_json  # noqa: E402
from deepnet_fairseq.storage.fileio import atomic_open, ensure_directory, write_atomically  # noqa: E402
from deepnet_fairseq.recipes.evaluation.score import hypotheses, score_direction  # noqa: E402

BEAM = 5


def log(message: str) -> None:
    print(f"[decode_speed] {message}", file=sys.stderr, flush=True)


def run(command, env=None) -> str:
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(command)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr


def fairseq_generate(args, checkpoint: str, plugin: bool, output: str) -> float:
    """Decode the test set, write fairseq-generate's output to ``output``; sentences/s."""
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    command = [sys.executable, "-m", "fairseq_cli.generate", args.data, "--path", checkpoint,
               "--gen-subset", "test", "--cpu", "--beam", str(BEAM), "--lenpen", "1.0",
               "--max-len-a", "0", "--max-len-b", str(args.max_len),
               "--batch-size", str(args.batch_size), "--required-batch-size-multiple", "1",
               "--bpe", "sentencepiece", "--sentencepiece-model", args.spm]
    if plugin:
        command += ["--user-dir", USER_DIR]
    text = run(command, env)
    write_atomically(output, text, inputs=[checkpoint, args.data, args.spm])
    match = re.search(r"Translated ([\d,]+) sentences .* in ([\d.]+)s", text)
    if not match:
        sys.exit(f"error: no 'Translated N sentences' line in {output}")
    return int(match.group(1).replace(",", "")) / float(match.group(2))


def ctranslate2_generate(args, model_dir: str, output: str) -> float:
    """Decode the test set pieces with CTranslate2, write D- lines as fairseq-generate would
    (pieces joined as fairseq's sentencepiece decoding does); sentences/s."""
    import ctranslate2

    with open(args.source_pieces, encoding="utf-8") as handle:
        sources = [line.split() for line in handle]
    translator = ctranslate2.Translator(model_dir, device="cpu", inter_threads=1,
                                        intra_threads=args.threads)
    start = time.perf_counter()
    results = translator.translate_batch(sources, beam_size=BEAM, max_batch_size=args.batch_size,
                                         max_decoding_length=args.max_len, min_decoding_length=1)
    seconds = time.perf_counter() - start
    with atomic_open(output, inputs=[args.source_pieces]) as out:
        for i, result in enumerate(results):
            text = "".join(result.hypotheses[0]).replace("\u2581", " ").strip()
            out.write(f"D-{i}\t0\t{text}\n")
    return len(sources) / seconds


def max_output_difference(original: str, exported: str, data: str) -> float:
    """Largest |logit difference|, teacher-forced on the test set, fp32."""
    import torch
    from fairseq import checkpoint_utils

    import deepnet_fairseq

    deepnet_fairseq.register()  # the DeepNet is loaded in this process: the plugin must be known
    overrides = {"data": data}
    [deepnet], _, task = checkpoint_utils.load_model_ensemble_and_task([original], overrides)
    [plain], _, _ = checkpoint_utils.load_model_ensemble_and_task([exported], overrides)
    task.load_dataset("test")
    batches = task.get_batch_iterator(task.dataset("test"), max_sentences=64).next_epoch_itr(
        shuffle=False)
    largest = 0.0
    with torch.no_grad():
        for model in (deepnet, plain):
            model.eval()
        for batch in batches:
            a = deepnet(**batch["net_input"])[0]
            b = plain(**batch["net_input"])[0]
            largest = max(largest, (a - b).abs().max().item())
    return largest


def machine() -> str:
    with open("/proc/cpuinfo") as handle:
        names = re.findall(r"^model name\s*:\s*(.*)$", handle.read(), flags=re.M)
    return f"{names[0] if names else 'unknown CPU'}, {os.cpu_count()} cores"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/decode_speed.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", help="a recipe run directory, WORK/runs/NAME")
    parser.add_argument("--checkpoint", help="the DeepNet (default RUN_DIR/checkpoints/"
                                             "checkpoint_last.pt)")
    parser.add_argument("--data", help="fairseq binarised data with a test split (WORK/data/bin)")
    parser.add_argument("--spm", help="sentencepiece model (WORK/data/spm.model)")
    parser.add_argument("--source-pieces",
                        help="test sources as pieces (WORK/data/spm/test.SRC-TGT.SRC)")
    parser.add_argument("--reference", help="raw test references (WORK/data/raw/test.SRC-TGT.TGT)")
    parser.add_argument("--source-lang", default="en", help="source language (en)")
    parser.add_argument("--target-lang", default="de", help="reference language (de)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="CPU threads of each decoder (default: all cores, %(default)s)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences a batch (64)")
    parser.add_argument("--max-len", type=int, default=200,
                        help="at most this many tokens a translation, in every decoder (200, "
                             "fairseq-generate's default; a short limit for a quick try on an "
                             "untrained model, whose translations never stop by themselves)")
    parser.add_argument("--out", help="output directory (RUN_DIR/decode_speed)")
    args = parser.parse_args(argv)
    pair = f"{args.source_lang}-{args.target_lang}"
    data = os.path.join("..", "..", "data")  # WORK/data beside WORK/runs/NAME
    defaults = {"checkpoint": "checkpoints/checkpoint_last.pt", "data": f"{data}/bin",
                "spm": f"{data}/spm.model",
                "source_pieces": f"{data}/spm/test.{pair}.{args.source_lang}",
                "reference": f"{data}/raw/test.{pair}.{args.target_lang}", "out": "decode_speed"}
    for name, relative in defaults.items():
        if getattr(args, name) is None:
            if args.run_dir is None:
                parser.error(f"give --run-dir or --{name.replace('_', '-')}")
            setattr(args, name, os.path.normpath(os.path.join(args.run_dir, relative)))
        if name != "out" and not os.path.exists(getattr(args, name)):
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)} does not exist")
    ensure_directory(args.out)
    exported = os.path.join(args.out, "exported.pt")
    models = {"fp32": os.path.join(args.out, "ctranslate2-fp32"),
              "int8": os.path.join(args.out, "ctranslate2-int8")}

    log(f"1/6 deepnet-export {args.checkpoint} -> {exported}, {', '.join(models.values())}")
    export = [sys.executable, "-m", "deepnet_fairseq.export", args.checkpoint,
              "--data", args.data, "--sentencepiece-model", args.spm]
    run(export + ["--output", exported])
    for quantization, directory in models.items():
        if not os.path.isdir(directory):
            run(export + ["--ctranslate2", directory]
                + ([] if quantization == "fp32" else ["--quantization", quantization]))

    systems = [("fairseq-generate, plugin", "plugin"), ("fairseq-generate, exported, no plugin",
                                                       "stock"),
               ("CTranslate2 fp32", "fp32"), ("CTranslate2 int8", "int8")]
    rows = []
    for step, (name, key) in enumerate(systems, start=2):
        log(f"{step}/6 {name}: beam {BEAM}, {args.threads} threads, batches of {args.batch_size}")
        output = os.path.join(args.out, f"generate-{key}.txt")
        if key in ("plugin", "stock"):
            speed = fairseq_generate(args, args.checkpoint if key == "plugin" else exported,
                                     key == "plugin", output)
        else:
            speed = ctranslate2_generate(args, models[key], output)
        rows.append({"system": name, "output": output, "sentences_per_s": round(speed, 2),
                     **score_direction(output, args.reference, args.target_lang, False, False)})
    log("6/6 decoder outputs of the DeepNet and its export (fp32, teacher-forced)")
    difference = max_output_difference(args.checkpoint, exported, args.data)

    base = rows[0]
    reference_hyps = hypotheses(base["output"])
    for row in rows:
        row["speedup"] = round(row["sentences_per_s"] / base["sentences_per_s"], 2)
        row["same_as_plugin"] = sum(a == b for a, b in zip(hypotheses(row["output"]),
                                                            reference_hyps))
    result = {"machine": machine(), "threads": args.threads, "beam": BEAM, "max_len": args.max_len,
              "batch_size": args.batch_size, "checkpoint": args.checkpoint,
              "sentences": base["sentences"], "load_average": os.getloadavg(),
              "max_decoder_output_difference": difference, "rows": rows}
    write_json(os.path.join(args.out, "decode_speed.json"), result)

    print(f"{result['machine']}; {args.threads} threads, beam {BEAM}, batches of "
          f"{args.batch_size}; {base['sentences']} sentences; load average "
          f"{' '.join(f'{x:.2f}' for x in result['load_average'])}")
    print("| decoder | sentences/s | x fairseq | sacreBLEU | same hypothesis as plugin |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['system']} | {row['sentences_per_s']:.1f} | {row['speedup']:.2f} | "
              f"{row['sacrebleu']:.2f} | {row['same_as_plugin']}/{row['sentences']} |")
    print(f"max |decoder output difference|, DeepNet vs export (fp32 logits): {difference:.2e}")


if __name__ == "__main__":
    main()
