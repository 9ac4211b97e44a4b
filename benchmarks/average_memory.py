"""Peak memory of averaging 5 checkpoints: the old averaging against the current one, side by
side in one run. Prints a table; it is a benchmark, not a test.

* before: ``deepnet_fairseq/average_checkpoints.py`` as it was at commit eb242ae, reproduced
  below (``average_before``): each checkpoint loaded whole (optimizer state included) while the
  previous one is still referenced, a float64 running sum, the newest checkpoint's whole state
  (Adam's moments included) kept and written out;
* after: ``deepnet_fairseq.average_checkpoints.average``: inputs memory-mapped one at a time,
  a float32 running sum, a model-only output.

Checkpoints: by default 5 real fairseq checkpoints, written by ``fairseq-train`` (Adam, fp32)
of a ``deepnet_transformer`` at base width (512, FFN 2048) with ``--layers`` layers per side on
a generated corpus of ``--vocab`` word types, one checkpoint per update (about 100M
parameters, 1.2 GB a checkpoint, 6 GB of disk; ``--small``: 2 layers of 128, seconds). Or
``--checkpoints DIR``: the last 5 update checkpoints of any run of yours.

Memory: each method runs in a fresh Python process that imports what averaging needs, then
averages and writes the result; its peak resident set size (``VmHWM`` of /proc/self/status,
which counts the pages of memory-mapped files that were read as well as allocated memory) is
reported, with the part above what the process held after its imports.

    python benchmarks/average_memory.py                    # ~100M parameters, a few minutes
    python benchmarks/average_memory.py --small            # the chain in seconds
    python benchmarks/average_memory.py --checkpoints RUN/checkpoints --json rows.json
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time
from typing import Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

COUNT = 5


def status_kb(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def average_before(paths: List[str]) -> Dict:
    """The averaging of commit eb242ae (deepnet_fairseq/average_checkpoints.py), unchanged."""
    import torch

    sums: Dict[str, torch.Tensor] = {}
    state = None
    for path in paths:
        state = torch.load(path, map_location="cpu", weights_only=True)
        model = state["model"]
        if sums and set(model) != set(sums):
            raise ValueError(f"{path} has different parameters from {paths[0]}: not one model")
        for name, tensor in model.items():
            if tensor.is_floating_point():
                sums[name] = sums.get(name, 0) + tensor.double()
            else:  # integer buffers (e.g. version counters) are copied, not averaged
                sums[name] = tensor
    state["model"] = {
        name: (total / len(paths)).to(state["model"][name].dtype)
        if state["model"][name].is_floating_point()
        else total
        for name, total in sums.items()
    }
    return state


def measure(method: str, output: str, paths: List[str]) -> Dict:
    """Run in a fresh process: average ``paths`` into ``output`` and report the peak RSS."""
    from deepnet_fairseq.average_checkpoints import average
    from deepnet_fairseq.storage.fileio import save_torch

    imported = status_kb("VmHWM")
    start = time.perf_counter()
    state = (average_before if method == "before" else average)(paths)
    save_torch(state, output)
    seconds = time.perf_counter() - start
    return {"method": method, "peak_kb": status_kb("VmHWM"), "imports_kb": imported,
            "seconds": round(seconds, 1), "output_bytes": os.path.getsize(output)}


def write_corpus(directory: str, vocab: int, lines: int, seed: int = 0) -> None:
    """Random sentences over ``vocab`` word types, every type used; the target reversed."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    order = words * (1 + lines * 10 // vocab)
    rng.shuffle(order)
    from deepnet_fairseq.storage.fileio import create_new

    with create_new(os.path.join(directory, "train.src")) as src, \
            create_new(os.path.join(directory, "train.tgt")) as tgt:
        for i in range(lines):
            sentence = order[i * 10:(i + 1) * 10] or rng.sample(words, 10)
            src.write(" ".join(sentence) + "\n")
            tgt.write(" ".join(reversed(sentence)) + "\n")


def build_checkpoints(work: str, args) -> List[str]:
    """COUNT update checkpoints of a fairseq-train run (Adam state included)."""
    import deepnet_fairseq

    layers, dim, vocab = (2, 128, 1000) if args.small else (args.layers, args.dim, args.vocab)
    write_corpus(work, vocab, lines=max(2000, vocab // 5))
    subprocess.run(["fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
                    "--trainpref", os.path.join(work, "train"), "--destdir",
                    os.path.join(work, "bin"), "--joined-dictionary", "--workers", "1"],
                   check=True, capture_output=True)
    save = os.path.join(work, "checkpoints")
    train = subprocess.run([
        "fairseq-train", os.path.join(work, "bin"), "--user-dir", deepnet_fairseq.USER_DIR,
        "--arch", "deepnet_transformer", "--encoder-layers", str(layers),
        "--decoder-layers", str(layers), "--encoder-embed-dim", str(dim),
        "--decoder-embed-dim", str(dim), "--encoder-ffn-embed-dim", str(4 * dim),
        "--decoder-ffn-embed-dim", str(4 * dim), "--encoder-attention-heads", "8",
        "--decoder-attention-heads", "8", "--share-all-embeddings", "--cpu",
        "--optimizer", "adam", "--lr", "1e-4", "--criterion", "label_smoothed_cross_entropy",
        "--max-tokens", "256", "--max-update", str(COUNT), "--save-interval-updates", "1",
        "--no-epoch-checkpoints", "--no-last-checkpoints", "--disable-validation",
        "--save-dir", save, "--log-format", "simple", "--seed", "1"],
        capture_output=True, text=True)
    if train.returncode != 0:
        raise SystemExit(f"fairseq-train failed:\n{train.stderr[-3000:]}")
    return last_update_checkpoints(save)


def last_update_checkpoints(directory: str) -> List[str]:
    from deepnet_fairseq.average_checkpoints import last_checkpoints

    return last_checkpoints(directory, COUNT, "update")


def model_parameters(path: str) -> int:
    import torch

    from deepnet_fairseq.storage import checkpoint_compat  # noqa: F401
    from deepnet_fairseq.average_checkpoints import tied

    model = torch.load(path, map_location="cpu", weights_only=True, mmap=True)["model"]
    shared = tied(model)
    return sum(t.numel() for name, t in model.items() if name not in shared)


def table(rows: List[Dict], params: int, checkpoint_bytes: int) -> str:
    mib = 2 ** 20
    lines = [f"{COUNT} checkpoints of {params / 1e6:.1f}M parameters, {checkpoint_bytes / mib:.0f} "
             f"MiB each (model + Adam state); the model alone is {4 * params / mib:.0f} MiB in "
             f"fp32", "",
             "| method | peak RSS (MiB) | above imports (MiB) | time (s) | output (MiB) |",
             "| --- | --- | --- | --- | --- |"]
    for row in rows:
        lines.append(f"| {row['method']} | {row['peak_kb'] / 1024:.0f} | "
                     f"{(row['peak_kb'] - row['imports_kb']) / 1024:.0f} | {row['seconds']} | "
                     f"{row['output_bytes'] / mib:.0f} |")
    before, after = (row["peak_kb"] for row in rows)
    above_before, above_after = (row["peak_kb"] - row["imports_kb"] for row in rows)
    lines += ["", f"before / after: peak RSS x{before / after:.2f}, "
                  f"above imports x{above_before / max(1, above_after):.2f}"]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=12, help="per side [%(default)s]")
    parser.add_argument("--dim", type=int, default=512, help="model width [%(default)s]")
    parser.add_argument("--vocab", type=int, default=8000, help="word types [%(default)s]")
    parser.add_argument("--small", action="store_true", help="2 layers of 128: seconds")
    parser.add_argument("--checkpoints", help="average the last 5 update checkpoints of DIR "
                                              "instead of building some")
    parser.add_argument("--work", help="where to build the checkpoints [a temporary directory]")
    parser.add_argument("--json", help="also write the rows as JSON")
    parser.add_argument("--measure", choices=("before", "after"), help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:  # the child process
        print(json.dumps(measure(args.measure, args.output, args.paths)))
        return

    from deepnet_fairseq.storage.fileio import remove_file, scratch_directory, write_json

    with scratch_directory(args.work) as work:
        if args.checkpoints:
            paths = last_update_checkpoints(args.checkpoints)
        else:
            print("building 5 checkpoints with fairseq-train ...", file=sys.stderr)
            paths = build_checkpoints(work, args)
        rows = []
        for method in ("before", "after"):
            output = os.path.join(work, f"averaged-{method}.pt")
            child = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure",
                                    method, "--output", output, *paths],
                                   capture_output=True, text=True)
            if child.returncode != 0:
                raise SystemExit(f"{method} failed:\n{child.stderr[-3000:]}")
            rows.append(json.loads(child.stdout.strip().splitlines()[-1]))
            remove_file(output)
        print(table(rows, model_parameters(paths[-1]), os.path.getsize(paths[-1])))
        if args.json:
            write_json(args.json, rows, inputs=paths)


if __name__ == "__main__":
    main()
