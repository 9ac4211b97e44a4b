"""The recipes' records, the JSON files their steps write and their reports read, written and
read here only: each holds ``"schema": {"kind": KIND, "version": N}``, so that a reader knows
what it holds before it trusts a field.

``read_record(path, kind)`` refuses, with one line naming the file and what to do
(``RecordError``): a file that is not a JSON object, a record of another kind, and a version
this code does not know (written by a newer deepnet_fairseq). A record without the field was
written before it existed (the runs under ``results/*/runs/``, users' work directories): it is
read as version 1 of the kind asked for, which is the format those were written in.
"""

import json
from typing import Optional

from ..storage.fileio import RecordError, read_json, write_atomically

SCHEMA = "schema"
KINDS = {
    "status": 1,           # RUN/status.json: the run's state (runner, runlog)
    "run-config": 1,       # RUN/config.json: the settings, layout and command a run trains with
    "data-config": 1,      # DATA/config.json: the settings the data was prepared with
    "evaluate-config": 1,  # RUN/evaluate.config.json: the settings of the last evaluation
    "sweep-config": 1,     # WORK/sweep.config.json: a sweep's settings and runs
    "purpose": 1,          # RUN/eval/purpose.json: the checkpoints and arguments evaluated
    "eval": 2,             # RUN/eval/eval.json: the scores; 2 adds "references" (a path)
}


def record_text(kind: str, data: dict) -> str:
    """DATA as the text of a record of KIND (for a writer that cannot rename: a full disk)."""
    return json.dumps({**data, SCHEMA: {"kind": kind, "version": KINDS[kind]}}, indent=2,
                      sort_keys=True) + "\n"


def write_record(path: str, kind: str, data: dict, inputs=()) -> None:
    """DATA as a record of KIND at PATH (atomically, through the file layer; INPUTS: the files
    the command read, which PATH may not be)."""
    write_atomically(path, record_text(kind, data), inputs)


def read_record(path: str, kind: str) -> Optional[dict]:
    """The record of KIND at PATH, without its schema field (fields a later version added are
    read with ``get``); None if there is no file; ``RecordError`` (one line naming PATH) if it
    is not a record of KIND that this code reads."""
    data = read_json(path)
    if data is None:
        return None
    schema = data.pop(SCHEMA, {"kind": kind, "version": 1})  # older records: version 1
    redo = f"move {path} away and run the step that writes it again"
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
    return data
