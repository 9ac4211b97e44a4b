"""What fairseq-train's output says about a run: its verdict (ok, diverged, interrupted, failed),
its validation losses and nll, its last training loss, and whether a trained run learned more
than a model that ignores its source (stalled). Read from fairseq's own lines only, never from
the command it echoes. The recipes (``recipes/run/runlog.py``, the runner, the report, the
curves, and so the depth study, a sweep of theirs) and the GPU check classify their runs here,
so that all call the same run the same thing; ``python -m deepnet_fairseq.recipes.run.runlog``
is its command line.

The rules:

* **diverged** when fairseq stopped on non-finite numbers (``FloatingPointError``: NaN/Inf
  gradients in fp32, or the fp16 loss scale fell below ``--min-loss-scale``), when a logged
  loss is NaN/Inf, or when the last validation loss is no better than a uniform guess over
  the vocabulary (``log2(vocab size)`` bits; fairseq logs losses in base 2) after at least
  ``min_updates`` updates (the recipes pass the warmup: a model still warming up may not
  have beaten a uniform guess yet);
* **interrupted** when the launch was stopped by a signal (SIGTERM / SIGINT / SIGHUP);
* **failed** when fairseq-train exited non-zero for any other reason (out of memory, a bad
  option, a SIGKILL);
* **ok** otherwise; an ok run is **stalled** when its last validation nll is not
  ``STALLED_MARGIN`` bits below the source-blind baseline (``storage.baseline``).
"""

import math
import re
import unicodedata
from typing import Dict, Optional

# fairseq's own lines, anchored on its logger's format, never matched anywhere in a line.
# fairseq-train logs "%(asctime)s | %(levelname)s | %(name)s | %(message)s", asctime as
# 2026-11-25 10:00:00 (evaluate.py's own logging adds ",123"); under fairseq_train_compat,
# where logging is configured before fairseq_cli's basicConfig, Python's default
# "%(levelname)s:%(name)s:%(message)s"; torchrun may prefix a worker's lines with "[rank0]:".
# The progress records (--log-format simple, which the recipes set) are logged under their
# tag's name: train_inner, train, valid. The attempt header (HEADER) and fairseq's dump of its
# options (one line of the logger fairseq_cli.train, a Python repr, so a newline in a value
# stays "\n") hold the command, whose paths, run name and TRAIN_ARGS may hold any of these
# words: none of that can open a line of this shape. Every pattern is compiled MULTILINE, to
# search one line or find all in a whole log.
_RANK = r"^(?:\[\w+\]:\s*)?"


def _record(tags: str) -> str:
    """The start of a line of fairseq's logger named one of TAGS (a regex alternation)."""
    return (_RANK + r"(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)? \| [A-Z]+ \| (?:" + tags
            + r") \| |[A-Z]+:(?:" + tags + r"):)")


_PROGRESS = _record("train_inner|train|valid")
_VALID = _record("valid") + r"[^\n]*?valid on '\S+' subset \| "
# non-finite numbers: the exception line of fairseq's traceback (FloatingPointError: gradients
# are Nan/Inf, Minimum loss scale reached) and a progress record's loss
_DIVERGED = re.compile(_RANK + r"FloatingPointError\b|" + _PROGRESS
                       + r"[^\n]*\bloss[= ](?:nan|inf|-inf)\b", re.IGNORECASE | re.MULTILINE)
HEADER = "==== attempt "
"""How the runner's own lines in a training log start (never read as fairseq's output)."""


def one_line(text: str) -> str:
    """TEXT with its control characters escaped (a line end as \\n), for what the runner writes
    after HEADER: a line end in it would open a line that is not HEADER's, which the verdicts
    would read as fairseq's output. (The settings refuse control characters; the paths and
    command around them are not settings.)"""
    return "".join(repr(char)[1:-1] if unicodedata.category(char) == "Cc" else char
                   for char in text)
VALID_LOSS = re.compile(_VALID + r"loss (\S+)", re.MULTILINE)
VALID_NLL = re.compile(_VALID + r"[^\n]*?\| nll_loss (\S+)", re.MULTILINE)
# the plugin's criterion label_smoothed_cross_entropy_with_source_gain adds it to the valid line
VALID_SOURCE_GAIN = re.compile(_VALID + r"[^\n]*?\| source_gain (\S+)", re.MULTILINE)
UPDATES = re.compile(_PROGRESS + r"[^\n]*?\bnum_updates[= ](\d+)", re.MULTILINE)
_ERROR = re.compile(r"^\S*(Error|Exception)\b.*$|^error: .*$", re.MULTILINE)
TRAIN_LOSS = re.compile(_record("train_inner") + r"[^\n]*?\bloss=([^,\s]+)", re.MULTILINE)
# the GPU check's readings (benchmarks/gpu_check.py): each update's record, fp16's overflows
# (fairseq.trainer's note) and the loss scale's floor (the exception line of the traceback)
# one logged interval of training: the update it ends at and fairseq's wall seconds of its
# training steps (train_wall: validation and checkpointing not counted; reset every interval)
TRAIN_WALL = re.compile(_record("train_inner") + r"[^\n]*?\bnum_updates=(\d+)[^\n]*?"
                        r"\btrain_wall=([0-9.]+)", re.MULTILINE)
TRAIN_INNER = re.compile(_record("train_inner") + r"[^\n]*?\bnum_updates=\d+", re.MULTILINE)
OVERFLOW = re.compile(_record(r"fairseq\.trainer")
                      + r"[^\n]*?gradient overflow detected[^\n]*?loss scale to: (\S+)",
                      re.MULTILINE)
# the trainer's note on a resumed attempt: the update it starts from, before its first record
RESUMED = re.compile(_record(r"fairseq\.trainer")
                     + r"Loaded checkpoint [^\n]*? \(epoch \d+ @ (\d+) updates\)$", re.MULTILINE)
MIN_LOSS_SCALE = re.compile(_RANK + r"FloatingPointError: Minimum loss scale reached",
                            re.MULTILINE)
STALLED_MARGIN = 0.5  # bits below the source-blind baseline a trained run's nll must reach
# a source gain (bits a target token gains from its own source) below this is a model that does
# not read its source: the runs that stayed source-blind measured 0.00 to 0.03, the slowest
# one that read (DeepNet 50L-50L at 4.9e-4, results/multilingual-depth) 0.5 to 1.0 at update
# 2,600 of 8,000
SOURCE_BLIND_BITS = 0.1


def as_number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def valid_nll(line: str) -> Optional[float]:
    """The validation nll (bits) of a fairseq valid line: its ``nll_loss``, or its ``loss``
    where the criterion logs no nll_loss (cross_entropy, whose loss is the nll); None for any
    other line."""
    nll = VALID_NLL.search(line) or VALID_LOSS.search(line)
    return as_number(nll.group(1)) if nll else None


def source_gain(line: str) -> Optional[float]:
    """The source gain (bits) of a fairseq valid line of the criterion that logs it; None for
    any other line."""
    gain = VALID_SOURCE_GAIN.search(line)
    return as_number(gain.group(1)) if gain else None


def stalled(nll: float, baseline: float, margin: float = STALLED_MARGIN) -> bool:
    """A run that trained (status ok) but learned little more than a model that ignores its
    source: its validation nll not MARGIN bits below BASELINE, the cross-entropy of the
    references' unigram distribution (``storage.baseline``). The sweeps' report (and so
    ``deepnet-depth-study``) marks its runs by this rule."""
    return not nll < baseline - margin


def last_train_loss(log_text: str) -> float:
    """The loss of the last logged training update (NaN if none was logged)."""
    losses = TRAIN_LOSS.findall(log_text)
    return as_number(losses[-1]) if losses else math.nan


def valid_curve(log_text: str) -> Dict[int, float]:
    """{num_updates: validation loss (bits)} of every validation in a fairseq-train log; a
    resumed run validates some updates twice, and its later record wins."""
    curve = {}
    for line in log_text.splitlines():
        loss, updates = VALID_LOSS.search(line), UPDATES.search(line)
        if loss and updates:
            curve[int(updates.group(1))] = as_number(loss.group(1))
    return dict(sorted(curve.items()))


def valid_nll_curve(log_text: str) -> Dict[int, float]:
    """{num_updates: validation nll (bits, ``valid_nll``)} of every validation in a
    fairseq-train log, beside ``valid_curve``'s label-smoothed loss; the later record wins."""
    curve = {}
    for line in log_text.splitlines():
        nll, updates = valid_nll(line), UPDATES.search(line)
        if nll is not None and updates and VALID_LOSS.search(line):
            curve[int(updates.group(1))] = nll
    return dict(sorted(curve.items()))


def train_seconds(log_text: str) -> Dict[int, float]:
    """{num_updates: training seconds up to that update} from a fairseq-train log's
    ``train_inner`` records (fairseq's ``train_wall`` of each logged interval, summed): the
    cost of training the model once. A resumed run trains some intervals again; each interval
    counts once, its later record winning, so an interruption does not inflate the cost."""
    interval = {}
    for updates, seconds in TRAIN_WALL.findall(log_text):
        interval[int(updates)] = float(seconds)
    total, cumulative = 0.0, {}
    for updates in sorted(interval):
        total += interval[updates]
        cumulative[updates] = total
    return cumulative


def vocab_size(dictionary: str) -> int:
    """The vocabulary of a model trained on a fairseq dictionary file (``dict.LANG.txt``): its
    lines plus fairseq's four specials (<s>, <pad>, </s>, <unk>); a uniform guess over it is
    ``classify``'s divergence bound."""
    with open(dictionary, encoding="utf-8") as handle:
        return sum(1 for _ in handle) + 4


def _signal_name(number: int) -> str:
    import signal as signals  # classify's own argument is named signal

    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


def classify(log_text: str, exit_code: int, vocab_size: int, min_updates: int = 0,
             signal: Optional[str] = None) -> Dict:
    """The status of one attempt from its log; SIGNAL: the signal that stopped it, if any."""
    # fairseq's output only: the runner's header lines hold the command
    log_text = "\n".join(line for line in log_text.splitlines() if not line.startswith(HEADER))
    valid = [as_number(v) for v in VALID_LOSS.findall(log_text)]
    nll = [value for value in map(valid_nll, log_text.splitlines()) if value is not None]
    updates = [int(u) for u in UPDATES.findall(log_text)]
    last_valid: Optional[float] = valid[-1] if valid else None
    result = {"last_valid_loss": last_valid, "last_valid_nll": nll[-1] if nll else None,
              "num_updates": max(updates) if updates else 0}
    gains = [as_number(gain) for gain in VALID_SOURCE_GAIN.findall(log_text)]
    if gains:  # a run with SOURCE_GAIN=1
        result["last_source_gain"] = gains[-1]
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
        if exit_code < 0 and not errors:  # a signal no launcher of the recipes passed on
            reason = (f"training was killed by {_signal_name(-exit_code)} (the launcher did "
                      f"not send it: the out-of-memory killer, a kill by hand); the next "
                      f"launch resumes from checkpoint_last.pt")
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
