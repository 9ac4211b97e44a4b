"""Measure training memory at base width and print it beside the memory plan's estimate.

    CONFIGS="6:fp16:0 18:fp16:0 100:fp16:1" python benchmarks/memory_plan.py [--json OUT.jsonl]

Each config is LAYERS (per side):MODE:CHECKPOINTING (0/1)[:SENT], MODE one of fp16, bf16, fp32,
mefp16 (memory-efficient fp16), and in 2 processes (CPU only, gloo, each process with the whole
batch, reported per process: the one with the higher peak) zero and zero-bf16 (fp32 or bf16 with
ZeRO-1: --ddp-backend legacy_ddp --zero-sharding os, bf16 with --fp16-no-flatten-grads), fsdp
and fsdp-bf16 (full sharding: --ddp-backend fully_sharded, torch's FSDP2 through the plugin,
bf16 with --fp16-no-flatten-grads; estimated with full_shard=True, world=2), and ddp and
ddp-bf16 (the same 2 processes unsharded, --ddp-backend legacy_ddp: the reference for the other
two). The benchmark measures training updates only, never validation: the estimate printed and
written ("estimate") is a training update's peak, without full sharding's validation transient
(the whole weights gathered in eval mode), which the plan's own peak includes
("estimate_with_validation" in the JSON). For each,
fairseq's Trainer trains a DeepNet model on a batch of SENT x (LEN+1) target tokens (SENT from
the config or the environment: 128 x 32 = 4,096 by default on CUDA, 32 x 32 = 1,024 on CPU;
vocabulary VOCAB + 4) and measures the resident bytes after the first update and the peak
during the next, per process, against ``deepnet_fairseq.recipes.run.memory``'s estimate for that
device, and prints them with their ratio.

* CUDA: torch.cuda.memory_allocated / max_memory_allocated (fairseq's Trainer resets that
  counter inside train_step, so the reset is disabled here); results/memory/
  h200-fairseq-trainer-peaks.jsonl is this on an H200, from which the CUDA plan was fitted.
* CPU: torch's own CPU allocations, which is what the estimate counts. torch has no CPU peak
  counter, so the allocator's events are recorded (torch.profiler, profile_memory=True: every
  allocation and free of torch's CPU allocator, with its size and time) and summed in time
  order: resident = their sum over building the trainer and the first update, peak = resident
  + the highest running sum during the second update. The process's RSS is not used: it also
  counts Python's and the libraries' own memory, and glibc keeps freed blocks mapped (or not)
  depending on their size, so a process's RSS can be far above what torch holds; run the zero
  modes with MALLOC_MMAP_THRESHOLD_=131072 so that glibc returns large freed blocks at once and
  two processes fit a small machine. fp16 on CPU lifts fairseq's two CUDA-only calls
  (deepnet_fairseq.fairseq_train_compat); its half-precision kernels are much slower than fp32,
  hence fewer tokens for it. The measured figures: docs/reproducing.md, "The memory model on CPU".
"""
import argparse
import gc
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import deepnet_fairseq  # noqa: E402
from deepnet_fairseq.diagnostics.common import reverse_copy_batch, write_dictionary  # noqa: E402
from deepnet_fairseq.recipes.run.memory import (  # noqa: E402
    GB, TRANSIENT, estimate, layer_parameters)
from deepnet_fairseq.recipes.spec.settings import from_env  # noqa: E402
from deepnet_fairseq.storage.fileio import (  # noqa: E402
    scratch_directory, write_atomically, write_json)

CUDA = torch.cuda.is_available()


def _reset_peak() -> None:
    torch.cuda.reset_peak_memory_stats()


def _allocated() -> int:
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def _peak() -> int:
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def cpu_allocations(fn):
    """(net, peak) bytes of torch's CPU allocations while ``fn()`` runs, both relative to its
    start: the sum of the allocator's events and the highest running sum (module docstring)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == DeviceType.CPU)
    total = peak = 0
    for _, nbytes in events:  # a free is a negative event
        total += nbytes
        peak = max(peak, total)
    return total, peak


def build_trainer(data_dir, layers, precision, checkpointing, distributed=()):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    deepnet_fairseq.register()  # the plugin's archs, which the options name
    argv = [data_dir, "--user-dir", deepnet_fairseq.USER_DIR, "--arch", "deepnet_transformer",
            "--encoder-layers", str(layers), "--decoder-layers", str(layers),
            "--source-lang", "src", "--target-lang", "tgt", "--share-all-embeddings",
            "--optimizer", "adam", "--lr", "1e-4", "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", "0.1", "--dropout", "0.1", "--seed", "1"]
    argv += {"fp16": ["--fp16"], "bf16": ["--bf16"], "fp32": [],
             "mefp16": ["--memory-efficient-fp16"]}[precision]
    argv += ["--checkpoint-activations"] if checkpointing else []
    argv += [] if CUDA else ["--cpu"]
    argv += list(distributed)
    if not CUDA and precision in ("fp16", "mefp16"):
        from deepnet_fairseq import fairseq_train_compat
        fairseq_train_compat.lift_cuda_calls_of_fp16()
        # a loss summed over the batch's tokens times fairseq's initial scale (128) overflows
        # fp16 in the first steps, each a whole slow CPU step skipped: start unscaled
        argv += ["--fp16-init-scale", "1"]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    args.tpu = False  # --bf16 implies --tpu in fairseq 0.12; this is a GPU or a CPU
    cfg = convert_namespace_to_omegaconf(args)
    cfg.common.tpu = False
    torch.manual_seed(1)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    return Trainer(cfg, task, model, task.build_criterion(cfg.criterion)), task, model


def update(trainer, batch, tries=20) -> None:
    """One update, through fp16's overflowed (skipped) steps: a skipped step never runs the
    optimizer, so neither allocates Adam's state nor reaches the step's peak."""
    done = trainer.get_num_updates()
    for _ in range(tries):
        trainer.train_step([batch])
        if trainer.get_num_updates() > done:
            return
    raise RuntimeError(f"no update in {tries} steps (every one overflowed)")


def measure(data_dir, layers, precision, checkpointing, sent, length, distributed=()):
    row = {"layers": layers, "precision": precision, "ckpt": checkpointing,
           "tokens": sent * (length + 1), "device": torch.cuda.get_device_name(0) if CUDA
           else "cpu"}
    state = {}

    def build_and_first_update():
        trainer, task, model = build_trainer(data_dir, layers, precision, checkpointing,
                                             distributed)
        batch = reverse_copy_batch(task.source_dictionary, sent, length,
                                   torch.Generator().manual_seed(1))
        update(trainer, batch)  # the first update allocates Adam's state: resident from here
        state.update(trainer=trainer, model=model, batch=batch)

    if CUDA:
        gc.collect()
        torch.cuda.empty_cache()
        base = _allocated()
        build_and_first_update()
        row["resident"] = _allocated() - base
        _reset_peak()
        start = time.time()
        for _ in range(3):
            update(state["trainer"], state["batch"])
        row["step_s"] = (time.time() - start) / 3
        row["peak"] = _peak() - base
        row["resident"] = max(row["resident"], _allocated() - base)
    else:
        # the previous config's trainer holds reference cycles: collected now, its frees would
        # count against this one's allocations
        gc.collect()
        row["resident"], _ = cpu_allocations(build_and_first_update)
        start = time.time()
        _, above = cpu_allocations(lambda: update(state["trainer"], state["batch"]))
        row["step_s"] = time.time() - start
        row["peak"] = row["resident"] + above
    row["params"] = sum(p.numel() for p in state["model"].parameters())
    return row


# 2-process modes (CPU only, gloo, each process with the whole batch): fairseq's flags and the
# precision; the estimate's layout follows from the name (zero*: ZeRO-1, fsdp*: full sharding,
# ddp*: neither, the unsharded reference of the other two)
TWO_PROCESS = {
    "zero": (["--ddp-backend", "legacy_ddp", "--zero-sharding", "os"], "fp32"),
    # fairseq refuses ZeRO (and the plugin full sharding) with FP16Optimizer's one flat copy
    "zero-bf16": (["--ddp-backend", "legacy_ddp", "--zero-sharding", "os",
                   "--fp16-no-flatten-grads"], "bf16"),
    "fsdp": (["--ddp-backend", "fully_sharded"], "fp32"),
    "fsdp-bf16": (["--ddp-backend", "fully_sharded", "--fp16-no-flatten-grads"], "bf16"),
    "ddp": (["--ddp-backend", "legacy_ddp"], "fp32"),
    "ddp-bf16": (["--ddp-backend", "legacy_ddp"], "bf16"),
}


def _two_process_rank(rank, port, mode, data_dir, layers, sent, length, out):
    """One of the 2 processes of a 2-process config: its row, written to OUT.rank<r>.json."""
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                         rank=rank, world_size=2)
    flags, precision = TWO_PROCESS[mode]
    distributed = ["--distributed-world-size", "2", "--distributed-rank", str(rank),
                   "--distributed-backend", "gloo", *flags]
    row = measure(data_dir, layers, precision, False, sent, length, distributed)
    row.update(rank=rank, precision=mode)
    write_json(f"{out}.rank{rank}.json", row)


def measure_two_processes(mode, data_dir, layers, sent, length):
    """The process with the higher peak of a 2-process run (module docstring)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = os.path.join(data_dir, f"{mode}-{layers}")
    mp.spawn(_two_process_rank, args=(port, mode, data_dir, layers, sent, length, out),
             nprocs=2)
    rows = []
    for rank in (0, 1):
        with open(f"{out}.rank{rank}.json") as handle:
            rows.append(json.load(handle))
    row = max(rows, key=lambda r: r["peak"])
    row["peaks"] = [r["peak"] for r in rows]
    row["residents"] = [r["resident"] for r in rows]
    return row


def estimate_row(row, vocab):
    """The plan's estimate for a measured row."""
    mode = row["precision"]
    memory_efficient, zero = mode == "mefp16", mode.startswith("zero")
    full_shard = mode.startswith("fsdp")
    precision = TWO_PROCESS[mode][1] if mode in TWO_PROCESS else {"mefp16": "fp16"}.get(mode, mode)
    return estimate(row["params"], 2 * row["layers"], 512, vocab, row["tokens"], precision,
                    row["ckpt"], zero=zero, memory_efficient=memory_efficient,
                    world=2 if mode in TWO_PROCESS else 1, device="cuda" if CUDA else "cpu",
                    full_shard=full_shard,
                    layer_params=layer_parameters(512, 2048) if full_shard else 0)


def training_peak(est):
    """The estimate's peak of a training update, without validation's transient (the whole
    weights FSDP2 gathers in eval mode): the benchmark never validates."""
    parts = est.components
    resident = sum(v for k, v in parts.items() if k not in TRANSIENT)
    return resident + max(parts["activations"] - parts["gradients"],
                          parts["optimizer-step temporaries"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the rows here, one JSON object per line")
    args = parser.parse_args(argv)
    sent = int(os.environ.get("SENT", "128" if CUDA else "32"))
    length = int(os.environ.get("LEN", "31"))
    # the recipes' setting, read as they read it (DEEPNET_VOCAB first)
    words = int((from_env(os.environ, "VOCAB") or ("32000",))[0])
    default = "6:fp16:0 18:fp16:0" if CUDA else "2:fp32:0 6:fp32:0"
    configs = [c.split(":") for c in os.environ.get("CONFIGS", default).split()]
    if CUDA:  # fairseq's Trainer resets the peak counter inside every train_step
        torch.cuda.reset_peak_memory_stats = lambda *a, **k: None
    rows = []
    with scratch_directory() as data_dir:
        write_dictionary(data_dir, words)
        print(f"{'mode':<9} {'depth':<9} {'tokens':>6} {'resident':>9} {'(est.)':>9} "
              f"{'estimate':>9} {'measured':>9} {'ratio':>6}  (GB = 1e9 bytes; resident: "
              "measured and estimated; estimate and measured: a training update's peak)")
        for layers, precision, ckpt, *rest in configs:
            n = int(rest[0]) if rest else sent
            if precision in TWO_PROCESS:
                if CUDA:
                    raise SystemExit(f"{precision}: CPU only here (2 gloo processes)")
                row = measure_two_processes(precision, data_dir, int(layers), n, length)
            else:
                row = measure(data_dir, int(layers), precision, ckpt == "1", n, length)
            est = estimate_row(row, words + 4)
            # the peak measured is a training update's: compared without validation's transient
            row["estimate"] = training_peak(est)
            row["estimate_resident"] = sum(v for k, v in est.components.items()
                                           if k not in TRANSIENT)
            if "validation: whole weights" in est.components:
                row["estimate_with_validation"] = est.peak
            row["vocab"] = words + 4
            mode = precision + (" ckpt" if row["ckpt"] else "")
            print(f"{mode:<9} {layers + 'L-' + layers + 'L':<9} {row['tokens']:>6} "
                  f"{row['resident'] / GB:9.3f} {row['estimate_resident'] / GB:9.3f} "
                  f"{row['estimate'] / GB:9.3f} "
                  f"{row['peak'] / GB:9.3f} {row['peak'] / row['estimate']:6.3f}", flush=True)
            rows.append(row)
            if args.json:  # as it goes: a long run keeps what it measured
                write_atomically(args.json, "".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
