"""Measure training memory at base width and print it beside the memory plan's estimate.

    CONFIGS="6:fp16:0 18:fp16:0 100:fp16:1" python benchmarks/memory_plan.py [--json OUT.jsonl]

Each config is LAYERS (per side):PRECISION (fp16, bf16, fp32, mefp16 = memory-efficient fp16):
CHECKPOINTING (0/1). For each, fairseq's Trainer trains a DeepNet model on a batch of SENT x
(LEN+1) target tokens (128 x 32 = 4,096 by default; vocabulary VOCAB + 4) and measures the
resident bytes after updates and the peak during them: on CUDA torch.cuda.max_memory_allocated
(fairseq's Trainer resets that counter inside train_step, so the reset is disabled here), on
CPU the process's peak RSS (VmHWM, reset through /proc/self/clear_refs; CPU runs fp32 only and
the figures include the allocator's and Python's own memory). It prints each measured peak
beside ``deepnet_fairseq.recipes.memory``'s estimate and their ratio; results/memory/
h200-fairseq-trainer-peaks.jsonl is its output on an H200, from which the plan was fitted.
"""

import argparse
import gc
import json
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import deepnet_fairseq  # noqa: E402
from deepnet_fairseq.diagnostics.common import reverse_copy_batch, write_dictionary  # noqa: E402
from deepnet_fairseq.recipes.memory import GB, estimate  # noqa: E402

CUDA = torch.cuda.is_available()


def _rss_peak() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _rss_now() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> None:
    if CUDA:
        torch.cuda.reset_peak_memory_stats()
    else:
        with open("/proc/self/clear_refs", "w") as handle:  # "5": reset VmHWM to the RSS now
            handle.write("5")


def _allocated() -> int:
    if CUDA:
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()
    return _rss_now()


def _peak() -> int:
    if CUDA:
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
    return _rss_peak()


def build_trainer(data_dir, layers, precision, checkpointing):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    argv = [data_dir, "--user-dir", deepnet_fairseq.USER_DIR, "--arch", "deepnet_transformer",
            "--encoder-layers", str(layers), "--decoder-layers", str(layers),
            "--source-lang", "src", "--target-lang", "tgt", "--share-all-embeddings",
            "--optimizer", "adam", "--lr", "1e-4", "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", "0.1", "--dropout", "0.1", "--seed", "1"]
    argv += {"fp16": ["--fp16"], "bf16": ["--bf16"], "fp32": [],
             "mefp16": ["--memory-efficient-fp16"]}[precision]
    argv += ["--checkpoint-activations"] if checkpointing else []
    argv += [] if CUDA else ["--cpu"]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    args.tpu = False  # --bf16 implies --tpu in fairseq 0.12; this is a GPU
    cfg = convert_namespace_to_omegaconf(args)
    cfg.common.tpu = False
    torch.manual_seed(1)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    return Trainer(cfg, task, model, task.build_criterion(cfg.criterion)), task, model


def measure(data_dir, layers, precision, checkpointing, sent, length):
    gc.collect()
    if CUDA:
        torch.cuda.empty_cache()
    base = _allocated()
    row = {"layers": layers, "precision": precision, "ckpt": checkpointing,
           "tokens": sent * (length + 1), "device": torch.cuda.get_device_name(0) if CUDA
           else "cpu"}
    trainer, task, model = build_trainer(data_dir, layers, precision, checkpointing)
    row["params"] = sum(p.numel() for p in model.parameters())
    batch = reverse_copy_batch(task.source_dictionary, sent, length,
                               torch.Generator().manual_seed(1))
    trainer.train_step([batch])  # the first update allocates Adam's state: resident from here
    row["resident"] = _allocated() - base
    _reset_peak()
    start = time.time()
    for _ in range(3):
        trainer.train_step([batch])
    row["step_s"] = (time.time() - start) / 3
    row["peak"] = _peak() - base
    row["resident"] = max(row["resident"], _allocated() - base)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the rows here, one JSON object per line")
    args = parser.parse_args(argv)
    sent, length = int(os.environ.get("SENT", "128")), int(os.environ.get("LEN", "31"))
    words = int(os.environ.get("VOCAB", "32000"))
    default = "6:fp16:0 18:fp16:0" if CUDA else "2:fp32:0 6:fp32:0"
    configs = [c.split(":") for c in os.environ.get("CONFIGS", default).split()]
    if CUDA:  # fairseq's Trainer resets the peak counter inside every train_step
        torch.cuda.reset_peak_memory_stats = lambda *a, **k: None
    rows = []
    with tempfile.TemporaryDirectory() as data_dir:
        write_dictionary(data_dir, words)
        print(f"{'config':<18} {'resident':>9} {'peak':>9} {'estimate':>9} {'ratio':>6}  GB")
        for layers, precision, ckpt in configs:
            row = measure(data_dir, int(layers), precision, ckpt == "1", sent, length)
            memory_efficient = precision == "mefp16"
            est = estimate(row["params"], 2 * row["layers"], 512, words + 4, row["tokens"],
                           "fp16" if memory_efficient else precision, row["ckpt"],
                           memory_efficient=memory_efficient)
            row["estimate"] = est.peak
            print(f"{layers + 'L ' + precision + (' ckpt' if row['ckpt'] else ''):<18} "
                  f"{row['resident'] / GB:9.3f} {row['peak'] / GB:9.3f} {est.peak / GB:9.3f} "
                  f"{row['peak'] / est.peak:6.3f}", flush=True)
            rows.append(row)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            out.writelines(json.dumps(row) + "\n" for row in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
