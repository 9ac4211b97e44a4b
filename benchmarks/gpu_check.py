"""GPU check: DeepNet trained, decoded and benchmarked on one GPU, with one report.

    bash benchmarks/gpu_check.sh                      # one GPU: about 26 min on an H200
    bash benchmarks/gpu_check.sh --device cpu --tiny  # the chain at toy size: 2 min on 2 CPU cores

What it runs, in OUT (default runs/gpu-check-DEVICE[-tiny]), through the recipes' own runtime
(deepnet_fairseq.recipes: the same settings, planning, process handling and logs as
``bash scripts/wmt17/*.sh``; the wmt17 recipe with SOURCE=multi30k at the check's size):

1. data: the recipes' prepare step on Multi30k en-de as shipped (deepnet_fairseq/corpora):
   cleaning, joint sentencepiece, fairseq-preprocess, in OUT/data;
2. train-PRECISION-DEPTHL: the recipes' train step, a DeepNet (deepnet_transformer) at base
   width (512/2048/8 heads) for each precision (fp16, bf16) and depth (18L-18L; 100L-100L
   with activation checkpointing), --updates updates (Adam, inverse_sqrt, label smoothing 0.1,
   dropout 0.1: a check, not a tuned recipe) in one process on GPU 0, every update logged, in
   OUT/runs/train-PRECISION-DEPTHL (its log copied into OUT/cases/NAME). It passes when
   training reaches the requested update, every logged loss is finite, the mean loss of the
   last 10 logged updates (a quarter of them when fewer than 40) is at least --min-loss-drop
   (a fraction) below that of the first 10, the run's status is ok and, in fp16, there is no
   overflow cascade;
3. generate-fp16-DEPTHL: the recipes' evaluate step (fairseq-generate --fp16, beam 5, of
   test_2016_flickr, scored with sacreBLEU) of each fp16 model; it passes when every test
   sentence is translated and the BLEU is a number (the BLEU of a few hundred updates is
   reported, not judged);
4. throughput-DEPTHL: benchmarks/throughput.py at the same shape: deepnet_transformer against
   fairseq's Post-LN transformer, in fp16, alternating in one process (tokens/s and step peak
   memory of each, and their ratios); it passes when both models were measured. At 100L-100L
   it holds two models with their Adam state in one process: about 30 GB of GPU memory.

Overflow cascade (fp16): fairseq stopped because the loss scale reached --min-loss-scale
("Minimum loss scale reached"), or OVERFLOW_RUN (--overflow-run, default 5) or more gradient
overflows came in a row with no completed update between them (each one halves the loss scale
and skips the update). Isolated overflows, as when the scale settles in the first updates, are
counted in the report and pass. bf16 has no loss scaling, hence no overflow check.

Figures taken from fairseq's log: loss at start and end, overflows, the last loss scale, words
per second (median over the updates after the first 10) and, on CUDA, peak memory (the GPU's
total memory minus the smallest gb_free fairseq logs; gb_free is total minus
torch.cuda.max_memory_allocated since the previous update).

On CPU (--device cpu), fp16 training runs as well, through deepnet_fairseq.fairseq_train_compat
(fairseq's own fp16 path with its two CUDA-only calls lifted: the loss scaler, its overflow
handling and the cascade verdict are computed on a real fp16 run); the fp16 model is decoded
in fp32 (generate-fp32: there is no fp16 decoding on CPU). bf16 training, scoring and the
benchmark run on CPU too, one thread per process unless OMP_NUM_THREADS is set; --tiny
(64-wide, 2L-2L and 4L-4L, 20 updates, 3,000 training pairs) is for checking the chain and the
report there.

Each check is independent: one that fails is reported and the others still run. A re-run with
the same settings reuses every check that passed (OUT/cases/NAME/result.json) and runs the
others again. Files are written under a temporary name and renamed; nothing outside OUT is
written, and nothing the check did not create is deleted.

Output: OUT/report.json and OUT/report.md (device, versions, command, date, per-check result
with figures, verdict). Exit status: 0 when no check failed (verdict "pass", or "incomplete"
when some checks were not run on this device), 1 when one failed, 2 on bad arguments or when
--device cuda finds no GPU.
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import shlex
import statistics
import sys
import time
from typing import Dict, List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from deepnet_fairseq.diagnostics.common import positive_ints  # noqa: E402
from deepnet_fairseq import fairseq_log  # noqa: E402
from deepnet_fairseq.processes import (  # noqa: E402
    FORWARDED, Interrupted, interrupted, run_forwarding, signal_of,
)
from deepnet_fairseq.recipes import write_atomically, write_json  # noqa: E402
from deepnet_fairseq.recipes import pipeline  # noqa: E402
from deepnet_fairseq.storage.records import read_status  # noqa: E402
from deepnet_fairseq.recipes.spec.paths import paths  # noqa: E402
from deepnet_fairseq.recipes.evaluation.score import hypotheses  # noqa: E402
from deepnet_fairseq.recipes.spec.settings import PREFIX, SETTINGS, Settings, resolve  # noqa: E402
from deepnet_fairseq.storage.directories import make_dirs, remove_tree  # noqa: E402
from deepnet_fairseq.storage.fileio import (create_new, move, open_no_follow,  # noqa: E402
                                            remove_stale_temporaries, temporary_prefix)

PRECISIONS = ("fp16", "bf16")
DATASET = "wmt17"  # the recipe whose runtime the check runs: SOURCE=multi30k, its own sizes
# Defaults per size; every value is a starting point chosen for a few-hundred-update check, not
# a tuned setting. lines: sentence pairs kept per split (0: all).
PRESETS = {
    "base": dict(updates=300, depths=[18, 100], checkpoint_depth=50, max_tokens=4096, lr=5e-4,
                 warmup=100, vocab=8000, lines={"train": 0, "valid": 0, "test": 0},
                 bench=["--width", "base"]),
    "tiny": dict(updates=20, depths=[2, 4], checkpoint_depth=4, max_tokens=512, lr=2e-3,
                 warmup=5, vocab=1000, lines={"train": 3000, "valid": 100, "test": 100},
                 bench=["--width", "tiny", "--sentences", "4", "--length", "6", "--rounds", "2"]),
}
WINDOW = 10  # logged updates averaged at the start and at the end of training


# ------------------------------------------------------------------ arguments


def _checked(convert, accept, what: str):
    """argparse type: CONVERT the text, refused unless ACCEPT(value) (NaN never is)."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not accept(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value
    return parse


_positive_int = _checked(int, lambda v: v > 0, "a positive integer")
_positive_float = _checked(float, lambda v: 0 < v < math.inf, "a positive number")
_fraction = _checked(float, lambda v: 0 <= v < 1, "a fraction in [0, 1)")


def _precisions(value: str) -> List[str]:
    names = [v for v in value.replace(",", " ").split() if v]
    bad = [v for v in names if v not in PRECISIONS]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated subset of {','.join(PRECISIONS)}, got {value!r}")
    return list(dict.fromkeys(names))


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bash benchmarks/gpu_check.sh", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="where to run (cuda); cuda without a visible GPU exits 2")
    parser.add_argument("--tiny", action="store_true",
                        help="toy size (64-wide, 2L/4L, 20 updates): checks the chain quickly")
    parser.add_argument("--out", help="output folder (runs/gpu-check-DEVICE[-tiny])")
    parser.add_argument("--updates", type=_positive_int, help="updates per training (300)")
    parser.add_argument("--depths", type=positive_ints, help="layers per side (18,100)")
    parser.add_argument("--checkpoint-depth", type=_positive_int,
                        help="depths from this one on train with --checkpoint-activations (50)")
    parser.add_argument("--precisions", type=_precisions, default=list(PRECISIONS),
                        help="training precisions (fp16,bf16)")
    parser.add_argument("--max-tokens", type=_positive_int, help="tokens per batch (4096)")
    parser.add_argument("--lr", type=_positive_float, help="peak learning rate (5e-4)")
    parser.add_argument("--warmup", type=_positive_int, help="warmup updates (100)")
    parser.add_argument("--min-loss-drop", type=_fraction, default=0.1,
                        help="the end loss must be this fraction below the start loss (0.1)")
    parser.add_argument("--overflow-run", type=_positive_int, default=5,
                        help="this many fp16 overflows in a row are a cascade (5)")
    return parser


def parse_args(argv=None, cuda_available=None) -> argparse.Namespace:
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.device == "cuda":
        if cuda_available is None:
            import torch
            cuda_available = torch.cuda.is_available()
        if not cuda_available:
            parser.error("--device cuda: no CUDA GPU is visible to torch (check "
                         "CUDA_VISIBLE_DEVICES and the driver); on a machine without one run "
                         "--device cpu --tiny")
    args.size = "tiny" if args.tiny else "base"
    for name, value in PRESETS[args.size].items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    if args.out is None:
        args.out = os.path.join("runs", f"gpu-check-{args.device}{'-tiny' if args.tiny else ''}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"--out {args.out} exists and is not a folder")
    return args


# ------------------------------------------------------------------ log parsing

# "... | INFO | train_inner | epoch 001: ..." (fairseq-train), "INFO:train_inner:epoch 001: ..."
# (fairseq_train_compat, where logging was configured before fairseq_cli.train set its format)
# fairseq's own lines only (deepnet_fairseq/fairseq_log.py), never the command it echoes
_TRAIN_INNER, _OVERFLOW = fairseq_log.TRAIN_INNER, fairseq_log.OVERFLOW
_MIN_SCALE = fairseq_log.MIN_LOSS_SCALE
_FIELD = re.compile(r"\b(\w+)=([^,\s]+)")
_TOTAL_MEMORY = re.compile(r"total memory = ([0-9.]+) GB ; name = (.*\S)")
_TRANSLATED = re.compile(r"Translated ([\d,]+) sentences .*?\(([0-9.]+) sentences/s")


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def parse_train_log(text: str) -> Dict:
    """fairseq-train's log (--log-format simple --log-interval 1): one entry per completed update
    (its train_inner fields as numbers), the overflows and the longest run of them with no
    completed update between, whether the minimum loss scale was reached, the GPU's memory."""
    updates, overflows, scales, run, longest = [], 0, [], 0, 0
    total_gb = gpu = None
    for line in text.splitlines():
        if _TRAIN_INNER.search(line):
            fields = line.split("train_inner", 1)[1]
            updates.append({k: _number(v) for k, v in _FIELD.findall(fields)})
            run = 0
        elif _OVERFLOW.search(line):
            overflows += 1
            scales.append(_number(_OVERFLOW.search(line).group(1)))
            run += 1
            longest = max(longest, run)
        elif _TOTAL_MEMORY.search(line) and total_gb is None:
            match = _TOTAL_MEMORY.search(line)
            total_gb, gpu = float(match.group(1)), match.group(2)
    return {"updates": updates, "overflows": overflows, "overflow_scales": scales,
            "longest_overflow_run": longest, "min_scale_reached": bool(_MIN_SCALE.search(text)),
            "total_memory_gb": total_gb, "gpu": gpu}


def overflow_cascade(parsed: Dict, overflow_run: int) -> Optional[str]:
    """Why the fp16 run had an overflow cascade (see the module's help), or None."""
    if parsed["min_scale_reached"]:
        return "the loss scale reached --min-loss-scale and fairseq stopped"
    if parsed["longest_overflow_run"] >= overflow_run:
        return (f"{parsed['longest_overflow_run']} gradient overflows in a row "
                f"(a cascade is {overflow_run} or more)")
    return None


def judge_training(parsed: Dict, status: Dict, exit_code: int, precision: str, updates: int,
                   min_loss_drop: float, overflow_run: int) -> Dict:
    """pass/fail of one training and its figures, from parse_train_log and fairseq_log.classify."""
    logged = parsed["updates"]
    losses = [u.get("loss", math.nan) for u in logged]
    done = int(max((u.get("num_updates", 0) for u in logged), default=0))
    window = min(WINDOW, max(1, len(losses) // 4))
    start = statistics.fmean(losses[:window]) if losses else None
    end = statistics.fmean(losses[-window:]) if losses else None
    wps = [u["wps"] for u in logged[WINDOW:] if "wps" in u] or [u["wps"] for u in logged
                                                                  if "wps" in u]
    free = [u["gb_free"] for u in logged if "gb_free" in u]
    scales = [u["loss_scale"] for u in logged if "loss_scale" in u]
    figures = {
        "updates": done, "loss_start": start, "loss_end": end,
        "loss_drop": None if not losses or not start else 1 - end / start,
        "last_valid_loss": status.get("last_valid_loss"),
        "words_per_s": statistics.median(wps) if wps else None,
        "peak_gb": (parsed["total_memory_gb"] - min(free)
                    if free and parsed["total_memory_gb"] is not None else None),
    }
    if precision == "fp16":
        figures.update(overflows=parsed["overflows"],
                       longest_overflow_run=parsed["longest_overflow_run"],
                       loss_scale=scales[-1] if scales else None)
    reasons = []
    if exit_code != 0 or status["status"] != "ok":
        reasons.append(f"fairseq-train exited {exit_code}, run {status['status']}"
                       + (f": {status['reason']}" if status.get("reason") else ""))
    if not losses:
        reasons.append("no training loss was logged")
    elif not all(math.isfinite(x) for x in losses):
        reasons.append("a logged training loss is not finite")
    elif not end <= start * (1 - min_loss_drop):
        reasons.append(f"the loss did not go down: {start:.3f} at the start, {end:.3f} at the "
                       f"end (needs {min_loss_drop:.0%} lower)")
    if done < updates:
        reasons.append(f"stopped at update {done} of {updates}")
    if precision == "fp16":
        cascade = overflow_cascade(parsed, overflow_run)
        if cascade:
            reasons.append(f"overflow cascade: {cascade}")
    return {"status": "fail" if reasons else "pass", "reason": "; ".join(reasons),
            "figures": figures}


def judge_generation(exit_code: int, output: str, hyps: List[str], refs: List[str]) -> Dict:
    """pass/fail of one fairseq-generate run: every sentence translated, sacreBLEU scored."""
    import sacrebleu

    figures = {"sentences": len(hyps), "references": len(refs),
               "empty": sum(1 for h in hyps if not h.strip()), "bleu": None,
               "sentences_per_s": None}
    match = _TRANSLATED.search(output)
    if match:
        figures["sentences_per_s"] = float(match.group(2))
    if exit_code != 0:
        error = [line for line in output.splitlines() if "Error" in line]
        return {"status": "fail", "figures": figures,
                "reason": f"fairseq-generate exited {exit_code}"
                          + (f": {error[-1].strip()[:300]}" if error else "")}
    if len(hyps) != len(refs):
        return {"status": "fail", "figures": figures,
                "reason": f"{len(hyps)} of {len(refs)} test sentences were translated"}
    figures["bleu"] = sacrebleu.corpus_bleu(hyps, [refs]).score
    return {"status": "pass", "reason": "", "figures": figures}


def judge_throughput(exit_code: int, rows: Optional[Dict]) -> Dict:
    row = (rows or {}).get("rows", [None])[0]
    if exit_code != 0 or not row or not row.get("tokens_per_s") or None in (
            row["step_peak_gb"].values()):
        return {"status": "fail", "figures": {},
                "reason": f"benchmarks/throughput.py exited {exit_code} without measuring "
                          "both models (see its log)"}
    tps, peak = row["tokens_per_s"], row["step_peak_gb"]
    fairseq, deepnet = "transformer", "deepnet_transformer"
    return {"status": "pass", "reason": "", "figures": {
        "fairseq_tokens_per_s": tps[fairseq], "deepnet_tokens_per_s": tps[deepnet],
        "throughput_ratio": tps[deepnet] / tps[fairseq],
        "fairseq_step_peak_gb": peak[fairseq], "deepnet_step_peak_gb": peak[deepnet],
        "memory_ratio": peak[deepnet] / peak[fairseq] if peak[fairseq] else None}}


# ------------------------------------------------------------------ the checks


def run_logged(cmd: List[str], log_path: str, env: Dict[str, str]) -> int:
    """Run CMD (through the recipes' runner: signals passed on, it dies with the check) with
    its output going to LOG_PATH, written under a temporary name and renamed at the end; the
    exit status, 127 when the program is missing."""
    # named as the layer's temporaries, so that a killed check's is removed by the next
    remove_stale_temporaries(log_path)
    tmp = os.path.join(os.path.dirname(os.path.abspath(log_path)),
                       temporary_prefix(log_path) + "log")
    with create_new(tmp) as log:
        log.write("$ " + shlex.join(cmd) + "\n")
    try:
        code, signum = run_forwarding(cmd, env, [tmp])
    except FileNotFoundError as err:
        with open_no_follow(tmp, "a") as log:
            log.write(f"{err}\n")
        code, signum = 127, None
    finally:
        move(tmp, log_path)  # what ran, however it ended
    if signum:
        raise Interrupted(signum)
    return code


def stop_if_interrupted(code: int) -> None:
    """A recipe step that passed a signal on exits 128 + its number: the check as a whole stops
    then (run it again to resume), as in run_logged, instead of failing one check and going on."""
    if signal_of(code) in FORWARDED:
        raise Interrupted(signal_of(code))


def process_env(args) -> Dict[str, str]:
    """The environment of the check's processes: the caller's without recipe settings, so that
    the check is the same wherever it runs; on CPU one thread per process unless
    OMP_NUM_THREADS says otherwise (on a shared machine torch's threads wait for each other;
    measured in docs/findings.md)."""
    env = {k: v for k, v in os.environ.items()
           if k not in SETTINGS and not k.startswith(PREFIX)}
    if args.device == "cpu":
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def check_settings(args, precision: str = "fp32", depth: int = 1) -> Settings:
    """The recipe settings of one check: the wmt17 recipe on the shipped Multi30k, in OUT, at
    the check's size (one process, Adam, inverse_sqrt, label smoothing 0.1, dropout 0.1: a
    check, not a tuned recipe), every update logged; given as a sweep's run entry is, above
    everything."""
    decoded = precision == "fp16"
    values = {
        "WORK": args.out, "SIZE": "full", "SOURCE": "multi30k", "DEVICE": args.device,
        "NPROC": "1", "NNODES": "1", "LAUNCHER": "none", "MODEL": args.size,
        "VOCAB": args.vocab, "SPM_SENTENCES": 100000, "TRAIN_LINES": args.lines["train"],
        "VALID_LINES": args.lines["valid"], "TEST_LINES": args.lines["test"],
        "METHOD": "deepnet", "LAYERS": depth, "PRECISION": precision,
        "CHECKPOINT_ACTIVATIONS": int(depth >= args.checkpoint_depth),
        "LR": args.lr, "WARMUP": args.warmup, "WARMUP_INIT_LR": "1e-7", "DROPOUT": "0.1",
        "WEIGHT_DECAY": "0.0", "MAX_TOKENS": args.max_tokens,
        "TOKENS_PER_UPDATE": args.max_tokens, "MAX_UPDATE": args.updates, "MAX_EPOCH": 0,
        "FP16_INIT_SCALE": 128, "MIN_LOSS_SCALE": "0.0001", "LOG_INTERVAL": 1,
        "SAVE_INTERVAL_UPDATES": args.updates, "AVERAGE_LAST": 1, "STOP_DIVERGED": 0,
        "RUN_NAME": f"train-{precision}-{depth}L", "BEAM": 5, "TOKENIZED_BLEU": 0,
        "COMPOUND_SPLIT": 0,
        # only the models that are decoded are saved, and without their optimizer state
        "TRAIN_ARGS": "--no-save-optimizer-state" if decoded else "--no-save"}
    return resolve(DATASET, process_env(args), REPO,
                   run={name: (str(value), "the GPU check") for name, value in values.items()})


def data_spec(args) -> Dict:
    return {"vocab": args.vocab, "lines": args.lines}


def prepare_data(args) -> Dict:
    """The recipe's prepare step (text, cleaning, sentencepiece, fairseq-preprocess) into
    OUT/data, each stage skipped when done; data prepared with other settings is refused."""
    stored = os.path.join(args.out, "data-spec.json")
    if os.path.exists(stored):
        with open(stored, encoding="utf-8") as handle:
            if json.load(handle) != data_spec(args):
                raise ValueError(f"{args.out}/data holds data prepared with other settings; "
                                 "use another --out")
    pipeline.prepare(check_settings(args), env=process_env(args))
    write_json(stored, data_spec(args))
    return data_spec(args)


def planned_command(args, precision: str, depth: int) -> List[str]:
    """The training command the recipes' planner makes for one check (the check's spec)."""
    return pipeline.planned_train_command(check_settings(args, precision, depth),
                                          process_env(args))


def throughput_command(args, depth: int, rows: str) -> List[str]:
    return [sys.executable, os.path.join(REPO, "benchmarks", "throughput.py"),
            "--depths", str(depth), "--device", args.device, *args.bench, "--checkpoint",
            "on" if depth >= args.checkpoint_depth else "off", "--json", rows]


def vocab_size(out: str) -> int:
    return fairseq_log.vocab_size(os.path.join(out, "data", "bin", "dict.en.txt"))


class Checks:
    """Runs the checks in order, each in OUT/cases/NAME, reusing those that passed before."""

    def __init__(self, args):
        self.args, self.out = args, make_dirs(args.out)
        self.results: List[Dict] = []

    def case_dir(self, name: str) -> str:
        return make_dirs(os.path.join(self.out, "cases", name))

    def record(self, name: str, kind: str, result: Dict, spec=None, seconds=None) -> Dict:
        result = {"name": name, "kind": kind, "spec": spec, "seconds": seconds, **result}
        if spec is not None:  # a check that ran: its logs are in its folder
            result["folder"] = os.path.join("cases", name)
            write_json(os.path.join(self.case_dir(name), "result.json"), result)
        self.results.append(result)
        print(f"[gpu-check] {name}: {result['status']}"
              + (f" ({result['reason']})" if result.get("reason") else ""), flush=True)
        return result

    def not_run(self, name: str, kind: str, why: str) -> Dict:
        return self.record(name, kind, {"status": "not_run", "reason": why, "figures": {}})

    def run(self, name: str, kind: str, spec: Dict, body) -> Dict:
        """BODY(case_dir) -> result; reused when it passed before with the same SPEC; an
        exception in BODY fails this check only."""
        stored = os.path.join(self.out, "cases", name, "result.json")
        if os.path.exists(stored):
            with open(stored, encoding="utf-8") as handle:
                before = json.load(handle)
            if before.get("status") == "pass" and before.get("spec") == spec:
                print(f"[gpu-check] {name}: passed before, reused", flush=True)
                self.results.append({**before, "reused": True})
                return before
        print(f"[gpu-check] {name}: running", flush=True)
        start = time.monotonic()
        try:
            result = body(self.case_dir(name))
        except Interrupted:
            raise  # stopped by a signal: the check as a whole stops (run it again to resume)
        except Exception as err:  # noqa: BLE001 - one failed check must not stop the others
            result = {"status": "fail", "reason": f"{type(err).__name__}: {err}", "figures": {}}
        return self.record(name, kind, result, spec, round(time.monotonic() - start, 1))

    def train(self, precision: str, depth: int) -> Dict:
        """The recipes' train step (pipeline.train) of one precision and depth, judged from its
        log; the run is OUT/runs/train-PRECISION-DEPTHL, its log copied into the case."""
        name = f"train-{precision}-{depth}L"

        def body(case):
            cfg = check_settings(self.args, precision, depth)
            run_dir = paths(cfg).run_dir
            remove_tree(run_dir)  # a stale attempt would be resumed, its log judged in part
            code = pipeline.train(cfg, env=process_env(self.args))
            with open(os.path.join(run_dir, "train.log"), encoding="utf-8") as handle:
                text = handle.read()
            write_atomically(os.path.join(case, "train.log"), text)
            stop_if_interrupted(code)
            status = read_status(run_dir) or {"status": "none (no status.json)"}
            return judge_training(parse_train_log(text), status, code, precision,
                                  self.args.updates, self.args.min_loss_drop,
                                  self.args.overflow_run)

        spec = {"command": planned_command(self.args, precision, depth), "min_loss_drop": self.args.min_loss_drop,
                "overflow_run": self.args.overflow_run}
        return self.run(name, "train", spec, body)

    def generate(self, trained: Dict, depth: int, precision: str) -> Dict:
        """The recipes' evaluate step (pipeline.evaluate: fairseq-generate, beam 5, sacreBLEU) of
        a trained fp16 model, judged on every test sentence."""
        name = f"generate-{precision}-{depth}L"
        if trained["status"] != "pass":
            return self.record(name, "generate", {
                "status": "fail", "figures": {},
                "reason": f"not decoded: its training {trained['name']} did not pass"})
        cfg = check_settings(self.args, "fp16", depth)

        def body(case):
            where, pair = paths(cfg), f"{cfg.text.data.src}-{cfg.text.data.tgt}"
            code = pipeline.evaluate(cfg, env=process_env(self.args))
            stop_if_interrupted(code)
            output = os.path.join(where.run_dir, "eval", pair, "generate-test.txt")
            if os.path.exists(output):
                with open(output, encoding="utf-8") as handle:
                    write_atomically(os.path.join(case, "generate.txt"), handle.read())
            # fairseq's log (its "Translated N sentences ... (S sentences/s" line, its errors)
            # is in the evaluate step's log, not in generate-test.txt
            log, text = os.path.join(where.run_dir, "evaluate.log"), ""
            if os.path.exists(log):
                with open(log, encoding="utf-8") as handle:
                    text = handle.read()
                write_atomically(os.path.join(case, "evaluate.log"), text)
            with open(os.path.join(where.raw, f"test.{pair}.{cfg.text.data.tgt}"),
                      encoding="utf-8") as handle:
                refs = handle.read().splitlines()
            return judge_generation(code, text, hypotheses(output) if code == 0 else [], refs)

        spec = {"command": pipeline.planned_evaluate_command(cfg), "trained": trained.get("spec")}
        return self.run(name, "generate", spec, body)

    def throughput(self, depth: int) -> Dict:
        def body(case):
            rows = os.path.join(case, "throughput.json")
            code = run_logged(throughput_command(self.args, depth, rows),
                              os.path.join(case, "throughput.log"), process_env(self.args))
            data = None
            if code == 0 and os.path.exists(rows):
                with open(rows, encoding="utf-8") as handle:
                    data = json.load(handle)
            return judge_throughput(code, data)

        spec = {"command": throughput_command(self.args, depth, "CASE")}
        return self.run(f"throughput-{depth}L", "throughput", spec, body)

    def all(self) -> List[Dict]:
        try:
            spec = prepare_data(self.args)
            self.record("data", "data", {"status": "pass", "reason": "", "figures": {
                "vocabulary": vocab_size(self.out), "lines": spec["lines"]}})
        except Interrupted:
            raise
        except Exception as err:  # noqa: BLE001 - reported; every check then fails
            self.record("data", "data", {"status": "fail", "figures": {},
                                         "reason": f"{type(err).__name__}: {err}"})
            return self.results
        cpu = self.args.device == "cpu"
        for depth in self.args.depths:
            for precision in self.args.precisions:
                trained = self.train(precision, depth)
                if precision == "fp16":  # on CPU the fp16 model, decoded in fp32
                    self.generate(trained, depth, "fp32" if cpu else "fp16")
        for depth in self.args.depths:
            self.throughput(depth)
        return self.results


# ------------------------------------------------------------------ the report


def verdict(results: List[Dict]) -> str:
    statuses = {r["status"] for r in results}
    if "fail" in statuses or "pass" not in statuses:
        return "fail"
    return "incomplete" if "not_run" in statuses else "pass"


def _fmt(value, spec="{:.3g}") -> str:
    return "–" if value is None else spec.format(value)


def describe(result: Dict) -> str:
    """The figures of one check in a few words, for the Markdown table."""
    f, kind = result.get("figures") or {}, result["kind"]
    if not f:
        return ""
    if kind == "train":
        text = (f"loss {_fmt(f['loss_start'], '{:.2f}')} → {_fmt(f['loss_end'], '{:.2f}')} "
                f"({_fmt(f['loss_drop'], '{:.0%}')} lower) in {f['updates']} updates, "
                f"{_fmt(f['words_per_s'], '{:,.0f}')} words/s")
        if f.get("peak_gb") is not None:
            text += f", peak {f['peak_gb']:.1f} GB"
        if "overflows" in f:
            text += (f", {f['overflows']} overflows (longest run {f['longest_overflow_run']}), "
                     f"loss scale {_fmt(f['loss_scale'], '{:g}')}")
        return text
    if kind == "generate":
        return (f"{f['sentences']}/{f['references']} sentences, {f['empty']} empty, "
                f"sacreBLEU {_fmt(f['bleu'], '{:.1f}')}, "
                f"{_fmt(f['sentences_per_s'], '{:.0f}')} sentences/s")
    if kind == "throughput":
        return (f"tokens/s DeepNet {f['deepnet_tokens_per_s']:,.0f} / fairseq Post-LN "
                f"{f['fairseq_tokens_per_s']:,.0f} = {f['throughput_ratio']:.3f}; step peak GB "
                f"{f['deepnet_step_peak_gb']:.3f} / {f['fairseq_step_peak_gb']:.3f} = "
                f"{_fmt(f['memory_ratio'], '{:.3f}')}")
    if kind == "data":
        return f"joint vocabulary {f['vocabulary']}"
    return json.dumps(f)


def build_report(args, results: List[Dict], environment: Dict, command: str,
                 started: str, seconds: float) -> Dict:
    return {"verdict": verdict(results), "command": command, "started": started,
            "seconds": round(seconds, 1), "environment": environment,
            "settings": {k: getattr(args, k) for k in (
                "device", "size", "updates", "depths", "checkpoint_depth", "precisions",
                "max_tokens", "lr", "warmup", "vocab", "min_loss_drop", "overflow_run")},
            "checks": [{k: r.get(k) for k in ("name", "kind", "status", "reason", "figures",
                                              "seconds", "reused", "folder")} for r in results]}


def markdown(report: Dict) -> str:
    env, settings = report["environment"], report["settings"]
    mark = {"pass": "pass", "fail": "**FAIL**", "not_run": "not run"}
    lines = [f"# GPU check: {report['verdict'].upper()}", "",
             f"- device: {env['device']}",
             f"- torch {env['torch']}, fairseq {env['fairseq']}, CUDA {env['cuda']}, "
             f"Python {env['python']}",
             f"- command: `{report['command']}`",
             f"- started {report['started']}, took {report['seconds'] / 60:.1f} min",
             f"- settings: {settings['size']} width, {settings['updates']} updates, "
             f"depths {', '.join(f'{d}L-{d}L' for d in settings['depths'])} "
             f"(activation checkpointing from {settings['checkpoint_depth']}L), "
             f"max tokens {settings['max_tokens']}, lr {settings['lr']:g}, "
             f"warmup {settings['warmup']}", "",
             "| check | result | figures | time | note |", "|---|---|---|---|---|"]
    for check in report["checks"]:
        note = check["reason"] or ("passed in an earlier run, reused" if check.get("reused")
                                   else "")
        lines.append(f"| {check['name']} | {mark[check['status']]} | {describe(check)} | "
                     f"{_fmt(check.get('seconds'), '{:.0f} s')} | {note.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def environment(device: str) -> Dict:
    import fairseq
    import torch

    name = f"{os.cpu_count()} x {platform.machine()}"
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            models = re.findall(r"^model name\s*:\s*(.*\S)", handle.read(), flags=re.M)
        name += f" ({models[0]})" if models else ""
    if device == "cuda":
        name = f"{torch.cuda.get_device_name(0)} (GPU 0 of {torch.cuda.device_count()} visible)"
    return {"device": f"{device}: {name}", "torch": torch.__version__,
            "fairseq": fairseq.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version()}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    start = time.monotonic()
    try:
        results = Checks(args).all()
    except Interrupted as err:
        print(f"[gpu-check] stopped by {err}; run it again: checks that passed are reused",
              flush=True)
        return interrupted(err.signum)
    report = build_report(args, results, environment(args.device),
                          shlex.join(["bash", "benchmarks/gpu_check.sh", *argv]), started,
                          time.monotonic() - start)
    write_json(os.path.join(args.out, "report.json"), report)
    write_atomically(os.path.join(args.out, "report.md"), markdown(report))
    print(f"[gpu-check] {report['verdict']}: {args.out}/report.md", flush=True)
    return 1 if report["verdict"] == "fail" else 0


if __name__ == "__main__":
    sys.exit(main())
