"""Classify a finished training run as ok, diverged or failed, from its fairseq-train log.

    python -m deepnet_fairseq.recipes.run.runlog --log train.log --exit-code 0 \\
        --vocab-size 32008 --out status.json [--signal SIGTERM] [--meta KEY=VALUE ...]

The paper's Table 1 writes "diverged" where a model could not be trained; here a run is

* **diverged** when fairseq stopped on non-finite numbers (``FloatingPointError``: NaN/Inf
  gradients in fp32, or the fp16 loss scale fell below ``--min-loss-scale``), when a logged
  loss is NaN/Inf, or when the last validation loss is no better than a uniform guess over
  the vocabulary (``log2(vocab size)`` bits; fairseq logs losses in base 2) after at least
  ``--min-updates`` updates (the recipes pass the warmup: a model still warming up may not
  have beaten a uniform guess yet);
* **interrupted** when the launch was stopped by a signal (SIGTERM / SIGINT / SIGHUP: a
  scheduler's time limit, a preemption, Ctrl-C; ``--signal``): the next launch resumes it;
* **failed** when fairseq-train exited non-zero for any other reason (out of memory, a bad
  option, a SIGKILL): a failed run is retried by the sweep, a diverged one is not;
* **ok** otherwise.

The status JSON (written atomically) also holds the last validation loss (``last_valid_loss``:
the criterion's, label-smoothed with the recipes' ``label_smoothed_cross_entropy``), the last
validation nll (``last_valid_nll``: fairseq's ``nll_loss``, the cross-entropy of the references,
the figure docs/findings.md tables; the loss itself for a criterion that logs no ``nll_loss``)
and the update count. The progress line shows the nll.
"""

import argparse
import math
import re
import sys
import threading
import time
from typing import Dict, Optional

from .. import write_json

# fairseq's own reports of non-finite numbers, matched only where fairseq writes them: the
# exception line of its traceback (FloatingPointError: gradients are Nan/Inf, Minimum loss scale
# reached; torchrun prefixes a worker's lines with [rankN]:) and its progress records. Not
# anywhere in a line: the attempt header (HEADER) and fairseq's dump of its options hold the
# command, whose paths, run name and TRAIN_ARGS may contain any of these words.
_DIVERGED = re.compile(r"^(?:\[\w+\]:\s*)?FloatingPointError\b"
                       r"|(?:^|\| )(?:train_inner|train|valid) \|.*\bloss[= ](?:nan|inf|-inf)\b",
                       re.IGNORECASE)
PROGRESS_EVERY_S = 30  # a progress line (training: update, validation nll, ETA; decoding:
# sentences, ETA) this often
DECODING = "decoding: "
"""How the evaluation's progress lines start (``DecodeProgress``; the runner shows them)."""
HEADER = "==== attempt "
"""How the runner's own lines in a training log start (never read as fairseq's output)."""
VALID_LOSS = re.compile(r"valid on '\S+' subset \| loss (\S+)")  # fairseq's valid line, any log format
VALID_NLL = re.compile(r"valid on '\S+' subset \|.*?\| nll_loss (\S+)")
UPDATES = re.compile(r"num_updates[= ](\d+)")
_ERROR = re.compile(r"^\S*(Error|Exception)\b.*$|^error: .*$", re.MULTILINE)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def valid_nll(line: str) -> Optional[float]:
    """The validation nll (bits) of a fairseq valid line: its ``nll_loss``, or its ``loss``
    where the criterion logs no nll_loss (cross_entropy, whose loss is the nll); None for any
    other line."""
    nll = VALID_NLL.search(line) or VALID_LOSS.search(line)
    return _float(nll.group(1)) if nll else None


def valid_curve(log_text: str) -> Dict[int, float]:
    """{num_updates: validation loss (bits)} of every validation in a fairseq-train log; a
    resumed run validates some updates twice, and its later record wins."""
    curve = {}
    for line in log_text.splitlines():
        loss, updates = VALID_LOSS.search(line), UPDATES.search(line)
        if loss and updates:
            curve[int(updates.group(1))] = _float(loss.group(1))
    return dict(sorted(curve.items()))


class DivergenceWatch:
    """Watches fairseq-train's output as it comes: a run whose validation loss stays at or above
    a uniform guess (log2 of the vocabulary) for ``patience`` validations in a row after its
    warmup has diverged, and is better stopped there than trained on (a diverged 1,000-layer
    run on eight GPUs would burn days). ``feed`` returns True once that happened; ``patience``
    0 never stops."""

    def __init__(self, vocab_size: int, warmup: int, patience: int):
        self.uniform, self.warmup, self.patience = math.log2(vocab_size), warmup, patience
        self.streak = 0
        self.stopped: Optional[Dict] = None

    def feed(self, line: str) -> bool:
        loss, updates = VALID_LOSS.search(line), UPDATES.search(line)
        if not (loss and updates) or self.patience <= 0 or self.stopped:
            return bool(self.stopped)
        value, update = _float(loss.group(1)), int(updates.group(1))
        if update > self.warmup and not (value < self.uniform):
            self.streak += 1
        else:
            self.streak = 0
        if self.streak >= self.patience:
            self.stopped = {
                "status": "diverged", "num_updates": update, "last_valid_loss": value,
                "last_valid_nll": valid_nll(line),
                "reason": f"stopped at update {update}: validation loss >= log2(vocab) = "
                          f"{self.uniform:.2f} (no better than a uniform guess) at "
                          f"{self.patience} validations in a row after the warmup "
                          f"(STOP_DIVERGED={self.patience}; 0 trains on)"}
        return bool(self.stopped)


def minutes(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s"


def eta(done: float, total: float, first: Optional[tuple], now: float) -> str:
    """", ETA ..." from the rate since ``first`` (count, time), or "" without a rate yet."""
    if not (total and first and done > first[0]):
        return ""
    rate = (done - first[0]) / max(now - first[1], 1e-9)
    return f", ETA {minutes(max(total - done, 0) / rate)}"


class Progress:
    """Reads fairseq-train's output as it comes and makes one line of where the run is:
    update (of ``total``; 0 when an epoch limit decides), last validation nll (``valid_nll``),
    elapsed time and an ETA from this attempt's own rate (a resumed attempt starts at its
    checkpoint)."""

    def __init__(self, total: int):
        self.total = total
        self.start = time.time()
        self.first: Optional[tuple] = None  # (update, time) of this attempt's first record
        self.update = 0
        self.valid: Optional[tuple] = None  # (update, nll in bits)
        self.lock = threading.Lock()

    def feed(self, line: str) -> None:
        updates, nll = UPDATES.search(line), valid_nll(line)
        if not updates:
            return
        with self.lock:
            self.update = int(updates.group(1))
            if self.first is None:
                self.first = (self.update, time.time())
            if nll is not None:
                self.valid = (self.update, nll)

    def line(self) -> str:
        with self.lock:
            now, update = time.time(), self.update
            text = (f"update {update}/{self.total} ({update / self.total:.0%})" if self.total
                    else f"update {update}")
            text += (f", validation nll {self.valid[1]:.2f} bits at update {self.valid[0]}"
                     if self.valid else ", no validation yet")
            return (text + f", {minutes(now - self.start)} elapsed"
                    + eta(update, self.total, self.first, now))


class DecodeProgress:
    """Where an evaluation's decoding is, as one line in the manner of ``Progress``: sentences
    decoded of ``total`` (every direction's test set), the direction being decoded, elapsed
    time and an ETA from the rate since the first batch was decoded (so that reading and
    averaging the checkpoints do not count)."""

    def __init__(self, total: int, directions: int = 1):
        self.total, self.directions = total, directions
        self.start = time.time()
        self.first: Optional[tuple] = None  # (sentences, time) at the first decoded batch
        self.done = 0
        self.direction: Optional[tuple] = None  # (number from 1, name)
        self.lock = threading.Lock()

    def begin(self, number: int, name: str) -> None:
        with self.lock:
            self.direction = (number, name)

    def decoding(self) -> None:
        """The first batch is being decoded: the rate counts from here."""
        with self.lock:
            if self.first is None:
                self.first = (self.done, time.time())

    def add(self, sentences: int) -> None:
        """A batch of SENTENCES is decoded."""
        with self.lock:
            self.done += sentences

    def line(self) -> str:
        with self.lock:
            now, done = time.time(), self.done
            text = (f"decoded {done:,}/{self.total:,} sentences ({done / self.total:.0%})"
                    if self.total else f"decoded {done:,} sentences")
            if self.direction and self.directions > 1:
                text += f", direction {self.direction[0]}/{self.directions} {self.direction[1]}"
            return (text + f", {minutes(now - self.start)} elapsed"
                    + eta(done, self.total, self.first, now))


def classify(log_text: str, exit_code: int, vocab_size: int, min_updates: int = 0,
             signal: Optional[str] = None) -> Dict:
    """The status of one attempt from its log; SIGNAL: the signal that stopped it, if any."""
    # fairseq's output only: the runner's header lines hold the command
    log_text = "\n".join(line for line in log_text.splitlines() if not line.startswith(HEADER))
    valid = [_float(v) for v in VALID_LOSS.findall(log_text)]
    nll = [value for value in map(valid_nll, log_text.splitlines()) if value is not None]
    updates = [int(u) for u in UPDATES.findall(log_text)]
    last_valid: Optional[float] = valid[-1] if valid else None
    result = {"last_valid_loss": last_valid, "last_valid_nll": nll[-1] if nll else None,
              "num_updates": max(updates) if updates else 0}
    uniform = math.log2(vocab_size)
    diverged = next((line.strip() for line in log_text.splitlines()
                     if _DIVERGED.search(line)), None)
    if diverged:
        result.update(status="diverged", reason=f"fairseq reported: {diverged[:300]}")
    elif signal:
        result.update(status="interrupted",
                      reason=f"stopped by {signal} at update {result['num_updates']}; the next "
                             "launch resumes from checkpoint_last.pt")
    elif exit_code != 0:
        errors = [m.group(0) for m in _ERROR.finditer(log_text)]
        reason = errors[-1].strip() if errors else f"fairseq-train exited {exit_code}"
        result.update(status="failed", reason=reason[:300])
    elif last_valid is not None and not (last_valid < uniform) and (
            math.isnan(last_valid) or result["num_updates"] >= min_updates):
        result.update(status="diverged",
                      reason=f"last validation loss {last_valid} >= log2(vocab) = {uniform:.2f} "
                             "(no better than a uniform guess)")
    elif last_valid is None:
        result.update(status="failed", reason="no validation loss in the log")
    else:
        result.update(status="ok", reason="")
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepnet_fairseq.recipes.run.runlog",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", required=True, help="fairseq-train output")
    parser.add_argument("--exit-code", type=int, required=True, help="fairseq-train's exit status")
    parser.add_argument("--vocab-size", type=int, required=True, help="target dictionary size")
    parser.add_argument("--min-updates", type=int, default=0,
                        help="updates before the uniform-guess test applies (default: 0)")
    parser.add_argument("--signal", help="the signal that stopped the run (SIGTERM, ...)")
    parser.add_argument("--out", required=True, help="status JSON to write")
    parser.add_argument("--meta", nargs="*", default=[], metavar="KEY=VALUE",
                        help="extra fields stored as they are (method, layers, ...)")
    args = parser.parse_args(argv)
    with open(args.log, encoding="utf-8", errors="replace") as handle:
        result = classify(handle.read(), args.exit_code, args.vocab_size, args.min_updates,
                          args.signal)
    for item in args.meta:
        key, _, value = item.partition("=")
        result[key] = int(value) if value.isdigit() else value
    write_json(args.out, result)
    print(f"{result['status']}" + (f": {result['reason']}" if result["reason"] else ""),
          file=sys.stderr)


if __name__ == "__main__":
    main()
