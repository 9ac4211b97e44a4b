"""Classify a finished training run as ok, diverged or failed, from its fairseq-train log.

    python -m deepnet_fairseq.recipes.run.runlog --log train.log --exit-code 0 \\
        --vocab-size 32008 --out status.json [--signal SIGTERM] [--meta KEY=VALUE ...]

The paper's Table 1 writes "diverged" where a model could not be trained; the rules that say
diverged, interrupted (``--signal``: the next launch resumes it), failed (retried by a sweep,
where a diverged run is not) or ok are ``deepnet_fairseq/fairseq_log.py``'s, which the depth
study shares. This module adds what the recipes show while a run goes on: the progress lines of
training and decoding, and the watches that stop a run early: a diverged one (``STOP_DIVERGED``)
and one that does not read its source (``STOP_SOURCE_BLIND``).

The status JSON (written atomically) also holds the last validation loss (``last_valid_loss``:
the criterion's, label-smoothed with the recipes' ``label_smoothed_cross_entropy``), the last
validation nll (``last_valid_nll``: fairseq's ``nll_loss``, the cross-entropy of the references,
the figure docs/findings.md tables; the loss itself for a criterion that logs no ``nll_loss``)
and the update count. The progress line shows the nll.
"""

import math
import re
import sys
import threading
import time
from typing import Dict, Optional

from .. import cli_parser
from ...storage.records import write_record
from ...storage.fileio import add_force_argument, check_tool_output, one_line_os_errors
from ...fairseq_log import (RESUMED, SOURCE_BLIND_BITS, UPDATES, VALID_LOSS, as_number,
                            classify, source_gain, valid_nll)

PROGRESS_EVERY_S = 30  # a progress line (training: update, validation nll, ETA; decoding:
# sentences, ETA) this often
DECODING = "decoding: "
"""How the evaluation's progress lines start (``DecodeProgress``; the runner shows them)."""


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
        value, update = as_number(loss.group(1)), int(updates.group(1))
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


class SourceBlindWatch:
    """Watches fairseq-train's output for the source gain that ``SOURCE_GAIN=1`` logs: from
    update ``after`` on, a validation whose gain is below ``SOURCE_BLIND_BITS`` (or not a
    number) is a model that does not read its source. Its loss falls on and its end looks
    "ok", so nothing else stops it: in the multilingual study such runs took hours before
    their translations gave them away. ``feed`` returns True once that happened; ``after`` 0
    never stops. Every validation from ``after`` on is judged by itself, so that a resumed
    attempt judges as the first would have."""

    def __init__(self, after: int):
        self.after = after
        self.stopped: Optional[Dict] = None

    def feed(self, line: str) -> bool:
        gain, updates = source_gain(line), UPDATES.search(line)
        if gain is None or not updates or self.after <= 0 or self.stopped:
            return bool(self.stopped)
        update = int(updates.group(1))
        if update >= self.after and not gain >= SOURCE_BLIND_BITS:
            loss = VALID_LOSS.search(line)
            self.stopped = {
                "status": "source-blind", "num_updates": update,
                "last_valid_loss": as_number(loss.group(1)) if loss else None,
                "last_valid_nll": valid_nll(line), "last_source_gain": gain,
                "reason": f"stopped at update {update}: source gain {gain:.3f} bits < "
                          f"{SOURCE_BLIND_BITS:g} (the model does not read its source; "
                          f"STOP_SOURCE_BLIND={self.after}, 0 trains on)"}
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
    update (of ``total``; 0 when an epoch limit decides), last validation nll (``valid_nll``)
    and source gain (``SOURCE_GAIN=1``), elapsed time and an ETA from this attempt's own rate
    (a resumed attempt starts at its checkpoint's update, from fairseq's note that it loaded
    it: its first record may be many minutes away at depth). ``earlier``, the run's log before
    this attempt, gives a resumed attempt the last validation at or before its checkpoint
    until it validates itself: at depth that is an hour or more away, and "no validation yet"
    would say what is not so."""

    def __init__(self, total: int, earlier: str = ""):
        self.total = total
        self.start = time.time()
        self.first: Optional[tuple] = None  # (update, time) of this attempt's first record
        self.update = 0
        self.valid: Optional[tuple] = None  # (update, nll, source gain or None; bits)
        self.earlier = [(int(updates.group(1)), nll, source_gain(line))
                        for line in earlier.splitlines()
                        if (nll := valid_nll(line)) is not None
                        and (updates := UPDATES.search(line))]
        self.lock = threading.Lock()

    def feed(self, line: str) -> None:
        updates, nll = UPDATES.search(line) or RESUMED.search(line), valid_nll(line)
        if not updates:
            return
        with self.lock:
            self.update = int(updates.group(1))
            if self.first is None:
                self.first = (self.update, time.time())
            if nll is not None:
                self.valid = (self.update, nll, source_gain(line))

    def line(self) -> str:
        with self.lock:
            now, update = time.time(), self.update
            text = (f"update {update}/{self.total} ({update / self.total:.0%})" if self.total
                    else f"update {update}")
            # an earlier attempt's validation past this one's checkpoint was of weights that
            # this attempt does not continue from; of two at one update, the later in the log
            valid = self.valid or max((item for item in reversed(self.earlier)
                                       if item[0] <= update),
                                      default=None, key=lambda item: item[0])
            gain = f", source gain {valid[2]:.2f} bits" if valid and valid[2] is not None else ""
            text += (f", validation nll {valid[1]:.2f} bits{gain} at update {valid[0]}"
                     if valid else ", no validation yet")
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


@one_line_os_errors
def main(argv=None) -> None:
    parser = cli_parser("python -m deepnet_fairseq.recipes.run.runlog", __doc__)
    parser.add_argument("--log", required=True, help="fairseq-train output")
    parser.add_argument("--exit-code", type=int, required=True, help="fairseq-train's exit status")
    parser.add_argument("--vocab-size", type=int, required=True, help="target dictionary size")
    parser.add_argument("--min-updates", type=int, default=0,
                        help="updates before the uniform-guess test applies (default: 0)")
    parser.add_argument("--signal", help="the signal that stopped the run (SIGTERM, ...)")
    parser.add_argument("--out", required=True, help="status JSON to write")
    parser.add_argument("--meta", nargs="*", default=[], metavar="KEY=VALUE",
                        help="extra fields stored as they are (method, layers, ...)")
    add_force_argument(parser, "an existing --out")
    args = parser.parse_args(argv)
    check_tool_output(args.out, [args.log], args.force, "--out")
    with open(args.log, encoding="utf-8", errors="replace") as handle:
        result = classify(handle.read(), args.exit_code, args.vocab_size, args.min_updates,
                          args.signal)
    for item in args.meta:
        key, _, value = item.partition("=")
        result[key] = int(value) if re.fullmatch(r"[0-9]+", value) else value  # not "²"
    write_record(args.out, "status", result, inputs=[args.log], force=args.force)
    print(f"{result['status']}" + (f": {result['reason']}" if result["reason"] else ""),
          file=sys.stderr)


if __name__ == "__main__":
    main()
