"""The recipes' records, the JSON files their steps write and their reports read, written and
read here only: each holds ``"schema": {"kind": KIND, "version": N}``, so that a reader knows
what it holds before it trusts a field.

``read_record(path, kind)`` refuses, with one line naming the file and what to do
(``RecordError``): a file that is not a JSON object, a record of another kind, and a version
this code does not know (written by a newer deepnet_fairseq). ``write_record`` reads the record
it replaces through it first: a record of a newer version, another kind or damaged is refused
in the same line, never written over (a status of a newer deepnet_fairseq, an eval.json that
cannot be read, would be lost without a word). A record without the field was
written before it existed (the runs under ``results/*/runs/``, users' work directories): it is
read as version 1 of the kind asked for, which is the format those were written in.
"""

import json
import math
import os
from typing import Callable, Dict, List, Optional

from .fileio import RecordError, read_json, write_atomically

SCHEMA = "schema"
KINDS = {
    "status": 1,           # RUN/status.json: the run's state (runner, runlog)
    "run-config": 1,       # RUN/config.json: the settings, layout and command a run trains with
    "data-config": 1,      # DATA/config.json: the settings the data was prepared with
    "evaluate-config": 1,  # RUN/evaluate.config.json: the settings of the last evaluation
    "sweep-config": 1,     # WORK/sweep.config.json: a sweep's settings and runs
    "purpose": 1,          # RUN/eval/purpose.json: the checkpoints and arguments evaluated
    "eval": 2,             # RUN/eval/eval.json: the scores; 2 adds "references" (a path)
    "significance": 1,     # a paired bootstrap of two runs (recipes.evaluation.significance)
}
# the step that writes each kind anew, once the record in the way is moved aside
WRITTEN_BY = {"status": "train.sh", "run-config": "train.sh", "data-config": "prepare.sh",
              "evaluate-config": "evaluate.sh", "sweep-config": "sweep.sh",
              "purpose": "evaluate.sh", "eval": "evaluate.sh",
              "significance": "python -m deepnet_fairseq.recipes.evaluation.significance"}


# ---- the fields the readers rely on, typed: a hand-edited record ("tok_bleu": "abc", a list
# where the settings belong) is refused in one line naming the field, not a traceback in the
# middle of a report; a field that is absent is the reader's to default, one that is present
# must be of its type. Fields not listed here are not read as anything but text.

def _text(value) -> bool:
    return isinstance(value, str)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:  # a loss may be inf or nan (a diverged run's), or none yet
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _count(value) -> bool:  # none where the log held none (a run stopped before its first)
    return value is None or _whole(value)


def _score(value) -> bool:  # a score is a finite number, or none (not decoded)
    return value is None or (_number(value) and math.isfinite(value))


def _settings(value) -> bool:  # name -> {"value": text, "from": text}
    return isinstance(value, dict) and all(
        _text(name) and isinstance(item, dict) and _text(item.get("value"))
        and _text(item.get("from", "")) for name, item in value.items())


def _directions(value) -> bool:  # "en-de" -> its scores
    return isinstance(value, dict) and all(
        _text(pair) and isinstance(scores, dict)
        and all(_score(scores.get(key)) for key in ("sacrebleu", "tok_bleu", "chrf", "distinct_share"))
        for pair, scores in value.items())


def _words(value) -> bool:
    return isinstance(value, list) and all(map(_text, value))


FIELDS: Dict[str, Dict[str, Callable[[object], bool]]] = {
    "status": {"status": _text, "reason": _text, "method": _text, "label": _text,
               "dataset": _text, "encoder_layers": _whole, "decoder_layers": _whole,
               "num_updates": _count, "attempt": _count, "seed": _whole,
               "last_valid_loss": _number, "last_valid_nll": _number},
    "run-config": {"dataset": _text, "settings": _settings, "command": _words},
    "data-config": {"dataset": _text, "settings": _settings},
    "evaluate-config": {"settings": _settings},
    "sweep-config": {"settings": _settings},
    "purpose": {},
    "significance": {"direction": _text, "samples": _whole, "seed": _whole,
                     "sentences": _whole},
    "eval": {"directions": _directions, "sacrebleu_avg": _score, "chrf_avg": _score, "en_x": _score,
             "x_en": _score},
}


def record_text(kind: str, data: dict) -> str:
    """DATA as the text of a record of KIND (for a writer that cannot rename: a full disk)."""
    return json.dumps({**data, SCHEMA: {"kind": kind, "version": KINDS[kind]}}, indent=2,
                      sort_keys=True) + "\n"


def write_record(path: str, kind: str, data: dict, inputs=(), force: bool = False) -> None:
    """DATA as a record of KIND at PATH (atomically, through the file layer; INPUTS: the files
    the command read, which PATH may not be). The record it replaces is read first: one this
    code cannot read (``read_record``'s ``RecordError``) is left as it is, and refused. FORCE:
    a tool's output its user told to replace (``--force``, ``check_tool_output``'s rule),
    whatever is there."""
    if not force:
        read_record(path, kind)
    write_atomically(path, record_text(kind, data), inputs)


def read_record(path: str, kind: str) -> Optional[dict]:
    """The record of KIND at PATH, without its schema field (fields a later version added are
    read with ``get``); None if there is no file; ``RecordError`` (one line naming PATH) if it
    is not a record of KIND that this code reads."""
    redo = f"move {path} away and run {WRITTEN_BY[kind]} again (it writes a new one)"
    try:
        data = read_json(path)
    except RecordError as err:  # the file layer's words, the advice of the kind
        raise RecordError(f"{err}; {redo}") from None
    if data is None:
        return None
    schema = data.pop(SCHEMA, {"kind": kind, "version": 1})  # older records: version 1
    if not (isinstance(schema, dict) and isinstance(schema.get("version"), int)
            and isinstance(schema.get("kind"), str)):
        raise RecordError(f"{path}: a record with a malformed schema field ({schema!r}); {redo}")
    if schema["kind"] != kind:
        raise RecordError(f"{path}: a record of kind {schema['kind']} where one of kind {kind} "
                          f"belongs; {redo}")
    if not 1 <= schema["version"] <= KINDS[kind]:
        raise RecordError(f"{path}: a {kind} record of schema version {schema['version']}, "
                          f"which this deepnet_fairseq does not read (versions 1 to "
                          f"{KINDS[kind]}): read it with the deepnet_fairseq that wrote it, or "
                          f"{redo}")
    for field, is_valid in FIELDS[kind].items():
        if field in data and not is_valid(data[field]):
            raise RecordError(f"{path}: its field {field!r} is not what a {kind} record holds "
                              f"({json.dumps(data[field])[:80]}); {redo}")
    return data


def run_names(runs_dir: str) -> List[str]:
    """The names of the runs in RUNS_DIR (``WORK/runs``, a results folder's ``runs/``), sorted:
    its directories, but the recipes' own entries there -- the marker file, locks, temporaries,
    all named with a leading dot -- and the user's stray files, which are no run. The one rule
    of what is a run, for every reader of a runs directory."""
    if not os.path.isdir(runs_dir):
        return []
    return sorted(name for name in os.listdir(runs_dir)
                  if not name.startswith(".") and os.path.isdir(os.path.join(runs_dir, name)))


def read_status(run_dir: str) -> Optional[dict]:
    """RUN_DIR's status record (``read_record``), for every reader of it: one that says
    ``running`` while no launcher holds the run's lock (``RUN/.lock``, which the kernel drops
    when the launcher and its trainer are gone, however they died) reads as ``interrupted``,
    its reason saying so; one whose lock cannot be probed from here (another host's) keeps
    ``running``, its reason saying that it cannot be told."""
    from .directories import lock_state

    status = read_record(os.path.join(run_dir, "status.json"), "status")
    if status is None or status.get("status") != "running":
        return status
    state, holder = lock_state(run_dir)
    began = status.get("reason") or "running"
    if state == "unknown":
        return {**status, "reason": f"{began}; whether it still runs cannot be told here: "
                                    f"{holder}"}
    if state == "free":
        return {**status, "status": "interrupted",
                "reason": f"{began}; its launcher ended without recording its end (killed: "
                          f"SIGKILL, out of memory, a lost node), no process holds "
                          f"{os.path.join(run_dir, '.lock')} (last: {holder}); training "
                          f"again resumes from checkpoint_last.pt"}
    return status
