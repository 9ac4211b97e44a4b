"""Training throughput and peak memory: deepnet_transformer against fairseq's own transformer of
identical shape (Post-LN), side by side in one run, at several depths, with and without
--checkpoint-activations. Prints a table; it is a benchmark, not a test.

Both models are built through fairseq's parser and task (``--arch deepnet_transformer`` and
``--arch transformer`` with the same depth and width options) and trained by fairseq's Trainer
(forward, backward, Adam step) on the same fixed batch. Throughput: target tokens per second
of full training steps, the median over --rounds rounds, the two models alternating inside each
round so that load changes hit both alike. Memory: each configuration runs in a fresh process
that builds the model, then measures the peak of its first two training steps above what is
resident before them (activations, gradients, Adam state, transient buffers: on CUDA
torch.cuda.max_memory_allocated, on CPU the peak resident set size VmHWM, reset through
/proc/self/clear_refs); "resident GB" is the process's resident set before those steps (Python,
torch, fairseq, the model), printed for deepnet_transformer; their sum is what the run needs.

    python benchmarks/throughput.py                              # tiny width, 6..100 layers
    python benchmarks/throughput.py --depths 500 --only-memory --checkpoint both
    python benchmarks/throughput.py --max-depth --budget-gb 24   # largest depth in 24 GB
    python benchmarks/throughput.py --depths 18 --json rows.json # the table's rows as JSON too
"""

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
import warnings

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from deepnet_fairseq.diagnostics.common import (  # noqa: E402
    positive_ints, reverse_copy_batch, tiny_width_args, write_dictionary)
from deepnet_fairseq.recipes import write_json  # noqa: E402
from deepnet_fairseq.storage.fileio import scratch_directory  # noqa: E402

ARCHS = ("transformer", "deepnet_transformer")  # fairseq's Post-LN, then ours


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def build_trainer(data_dir, arch, layers, args, checkpoint):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    import deepnet_fairseq

    deepnet_fairseq.register()  # the plugin's archs, which the options name
    width = tiny_width_args() if args.width == "tiny" else []
    argv = [data_dir, "--user-dir", deepnet_fairseq.USER_DIR, "--arch", arch,
            "--encoder-layers", str(layers), "--decoder-layers", str(layers), *width,
            "--source-lang", "src", "--target-lang", "tgt", "--share-all-embeddings",
            "--optimizer", "adam", "--lr", "1e-4", "--criterion", "cross_entropy",
            "--dropout", "0.1", "--seed", "1"]
    argv += ["--cpu"] if args.device == "cpu" else ["--fp16"]
    if checkpoint:
        argv.append("--checkpoint-activations")
    cfg = convert_namespace_to_omegaconf(
        options.parse_args_and_arch(options.get_training_parser(), argv))
    torch.manual_seed(1)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    generator = torch.Generator().manual_seed(1)
    batch = reverse_copy_batch(task.source_dictionary, args.sentences, args.length, generator)
    return trainer, batch


def step_seconds(trainer, batch) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    trainer.train_step([batch])
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def throughput(data_dir, layers, checkpoint, args):
    """tokens/s of each arch, measured alternately in the same process."""
    pairs = [build_trainer(data_dir, arch, layers, args, checkpoint) for arch in ARCHS]
    for trainer, batch in pairs:  # warm-up: allocations, optimizer state
        step_seconds(trainer, batch)
    times = {arch: [] for arch in ARCHS}
    for _ in range(args.rounds):
        for arch, (trainer, batch) in zip(ARCHS, pairs):
            times[arch].append(step_seconds(trainer, batch))
    tokens = pairs[0][1]["ntokens"]
    return {arch: tokens / statistics.median(t) for arch, t in times.items()}


def peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def memory_child(data_dir, arch, layers, checkpoint, args) -> None:
    """Run in a fresh process: print JSON with the peak memory of the first two training steps
    above what is resident once the model is built (a CPU process keeps freed memory resident,
    so later steps would not show their activations)."""
    trainer, batch = build_trainer(data_dir, arch, layers, args, checkpoint)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # Linux: reset the peak resident set size (VmHWM) to the current one
        base = rss_bytes()
    for _ in range(2):
        step_seconds(trainer, batch)
    if torch.cuda.is_available():
        peak = torch.cuda.max_memory_allocated() - base
        resident = base
    else:
        peak = peak_rss_bytes() - base
        resident = base
    print(json.dumps({"peak_bytes": peak, "resident_bytes": resident}))


def memory(data_dir, arch, layers, checkpoint, args):
    """(step peak, resident before the steps) in GB of ``arch`` in a fresh process; None if the
    process failed (e.g. out of memory)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", arch, str(layers),
           str(int(checkpoint)), "--data-dir", data_dir, "--width", args.width,
           "--device", args.device, "--sentences", str(args.sentences),
           "--length", str(args.length)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return None
    result = json.loads(lines[-1])
    return result["peak_bytes"] / 1e9, result["resident_bytes"] / 1e9


def get_parser():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depths", type=positive_ints, default=[6, 18, 50, 100],
                        help="layers per side (6,18,50,100)")
    parser.add_argument("--width", choices=("tiny", "base"), default="tiny",
                        help="tiny = 64-128-2, base = 512-2048-8 (tiny)")
    parser.add_argument("--checkpoint", choices=("off", "on", "both"), default="both",
                        help="--checkpoint-activations (both)")
    parser.add_argument("--sentences", type=int, default=32, help="sentences per batch (32)")
    parser.add_argument("--length", type=int, default=31, help="words per sentence (31)")
    parser.add_argument("--rounds", type=int, default=5, help="timed steps per model (5)")
    parser.add_argument("--device", choices=("cpu", "cuda"),
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only-memory", action="store_true", help="skip the throughput")
    parser.add_argument("--max-depth", action="store_true",
                        help="find the largest depth (doubling from --depths' first) that "
                             "trains within --budget-gb, for each checkpoint setting")
    parser.add_argument("--budget-gb", type=float, default=24.0, help="memory budget (24)")
    parser.add_argument("--limit-depth", type=int, default=1000,
                        help="stop the --max-depth search at this depth per side (1000)")
    parser.add_argument("--json", metavar="PATH",
                        help="also write the table's rows to PATH as JSON (tokens/s and step "
                             "peak GB per arch, None where a measurement failed)")
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    return parser


def main(argv=None) -> None:
    args = get_parser().parse_args(argv)
    logging.getLogger("fairseq").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")
    if args.memory_child:
        arch, layers, checkpoint = args.memory_child
        memory_child(args.data_dir, arch, int(layers), bool(int(checkpoint)), args)
        return
    settings = {"off": [False], "on": [True], "both": [False, True]}[args.checkpoint]
    load = os.getloadavg()
    print(f"# {args.device}, torch {torch.__version__}, {os.cpu_count()} cpus, "
          f"threads {torch.get_num_threads()}, load average {load[0]:.2f} {load[1]:.2f} "
          f"at start; width {args.width}, batch {args.sentences} x {args.length + 1} tokens")
    with scratch_directory() as data_dir:
        write_dictionary(data_dir, 1000)
        args.data_dir = data_dir
        if args.max_depth:
            for checkpoint in settings:
                depth, best = args.depths[0], None
                while depth <= args.limit_depth:
                    result = memory(data_dir, "deepnet_transformer", depth, checkpoint, args)
                    gb = None if result is None else sum(result)
                    fits = gb is not None and gb <= args.budget_gb
                    print(f"ckpt {'on ' if checkpoint else 'off'} {depth}L-{depth}L: "
                          f"{'failed' if gb is None else f'{gb:.2f} GB'} "
                          f"{'fits' if fits else 'does not fit'} in {args.budget_gb:g} GB",
                          flush=True)
                    if not fits:
                        break
                    best, depth = depth, depth * 2
                print(f"largest depth within {args.budget_gb:g} GB, checkpointing "
                      f"{'on' if checkpoint else 'off'}: {best}L-{best}L (searched up to "
                      f"{min(depth, args.limit_depth)})", flush=True)
            return
        header = f"{'layers':>9} {'ckpt':>4} "
        if not args.only_memory:
            header += f"{'fairseq tok/s':>13} {'deepnet tok/s':>13} {'overhead':>8} "
        header += f"{'fairseq GB':>10} {'deepnet GB':>10} {'resident GB':>11}"
        print(header, flush=True)
        rows = []
        for layers in args.depths:
            for checkpoint in settings:
                line = f"{f'{layers}L-{layers}L':>9} {'on' if checkpoint else 'off':>4} "
                tps = None
                if not args.only_memory:
                    tps = throughput(data_dir, layers, checkpoint, args)
                    overhead = 1 - tps["deepnet_transformer"] / tps["transformer"]
                    line += (f"{tps['transformer']:>13.0f} {tps['deepnet_transformer']:>13.0f} "
                             f"{overhead:>8.1%} ")
                results = [memory(data_dir, arch, layers, checkpoint, args) for arch in ARCHS]
                line += " ".join(f"{'failed' if r is None else f'{r[0]:.3f}':>10}" for r in results)
                line += f" {'' if results[1] is None else f'{results[1][1]:.3f}':>11}"
                print(line, flush=True)
                rows.append({"layers": layers, "checkpoint_activations": checkpoint,
                             "tokens_per_s": tps,
                             "step_peak_gb": {arch: None if r is None else r[0]
                                              for arch, r in zip(ARCHS, results)},
                             "resident_gb": None if results[1] is None else results[1][1]})
    if args.json:
        write_json(args.json, {"device": args.device, "width": args.width,
                               "sentences": args.sentences, "length": args.length,
                               "rounds": args.rounds, "rows": rows})
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
