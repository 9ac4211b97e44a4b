"""The recipes' records (storage/records.py): every kind carries its schema, is written and read
in one place, and a record this code cannot read is refused in one line naming it; records
written before the schema field existed are read as version 1 of their kind."""

import ast
import json
import os

import pytest

from deepnet_fairseq.storage import records
from deepnet_fairseq.storage.records import KINDS, read_record, write_record
from deepnet_fairseq.storage.fileio import RecordError
from support import REPO


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_is_read_back_as_written(tmp_path, kind):
    path = str(tmp_path / "r.json")
    write_record(path, kind, {"status": "ok", "n": 3})
    assert json.loads(open(path).read())["schema"] == {"kind": kind, "version": KINDS[kind]}
    assert read_record(path, kind) == {"status": "ok", "n": 3}
    assert read_record(str(tmp_path / "none.json"), kind) is None


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_record_without_schema_is_version_1_of_its_kind(tmp_path, kind):
    # as under results/*/runs/, written before the field existed
    (tmp_path / "r.json").write_text('{"status": "ok"}')
    assert read_record(str(tmp_path / "r.json"), kind) == {"status": "ok"}


@pytest.mark.parametrize("text,why", [
    ('{"schema": {"kind": "status", "version": 2}}', "schema version 2, which this"),
    ('{"schema": {"kind": "status", "version": 0}}', "schema version 0, which this"),
    ('{"schema": {"kind": "eval", "version": 1}}', "a record of kind eval where one of kind status"),
    ('{"schema": {"kind": "status"}}', "malformed schema field"),
    ('{"schema": [1]}', "malformed schema field"),
    ('{"status": "ok"', "unreadable record"),
    ('[]', "not a record"),
])
def test_a_record_this_code_cannot_read_is_refused_naming_it(tmp_path, text, why):
    path = tmp_path / "status.json"
    path.write_text(text)
    with pytest.raises(RecordError) as error:
        read_record(str(path), "status")
    message = str(error.value)
    assert message.startswith(f"{path}: ") and why in message and "\n" not in message


def _calls(name):
    """(module, line) of every call of NAME in the package."""
    found = []
    for directory, _, files in os.walk(os.path.join(REPO, "deepnet_fairseq")):
        for file in files:
            if file.endswith(".py"):
                path = os.path.join(directory, file)
                for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
                    if isinstance(node, ast.Call) and name in (
                            getattr(node.func, "id", None), getattr(node.func, "attr", None)):
                        found.append((os.path.relpath(path, REPO), node.lineno))
    return found


def test_records_are_read_and_written_in_one_place():
    """No JSON record is read but through records.py; none written but through it, except
    the stage timings of prepare (stages.json: figures, not a record any step decides by)."""
    here = os.path.relpath(records.__file__, REPO)
    prepare = os.path.join("deepnet_fairseq", "recipes", "data", "prepare.py")
    assert {m for m, _ in _calls("read_json")} - {here} == {prepare}
    assert len([1 for m, _ in _calls("read_json") if m == prepare]) == 1  # Stages
    writers = {m for m, _ in _calls("write_json")} - {here}
    assert writers == {prepare}
    assert len([1 for m, _ in _calls("write_json") if m in writers]) == 1  # Stages


# a value of another type for each typed field (a hand edit, another program's file)
WRONG = [None, "abc", ["x"], {"a": 1}, True, float("nan"), 1.5, -3]


@pytest.mark.parametrize("kind, field", [(k, f) for k in sorted(records.FIELDS)
                                         for f in sorted(records.FIELDS[k])])
def test_a_field_of_another_type_is_refused_naming_it(tmp_path, kind, field):
    """Every typed field of every kind, given values of other types: each that its type does
    not admit is a RecordError naming the file and the field, never a value the readers would
    then trip over ("tok_bleu": "abc" was a traceback after results.csv was written; a list
    as the settings a TypeError on the relaunch)."""
    is_valid = records.FIELDS[kind][field]
    refused = [value for value in WRONG if not is_valid(value)]
    assert refused, f"{kind}.{field} admits every wrong value"
    path = tmp_path / "r.json"
    for value in refused:
        path.write_text(json.dumps({field: value}))
        with pytest.raises(RecordError, match=f"{path}: its field '{field}'"):
            read_record(str(path), kind)


def test_a_score_is_finite_and_the_settings_are_text(tmp_path):
    path = tmp_path / "eval.json"
    for directions in ({"en-de": {"tok_bleu": float("nan")}}, {"en-de": {"tok_bleu": "abc"}},
                       [1, 2], {"en-de": [1]}):
        path.write_text(json.dumps({"directions": directions}))
        with pytest.raises(RecordError, match="'directions'"):
            read_record(str(path), "eval")
    path.write_text(json.dumps({"directions": {"en-de": {"tok_bleu": 20.5, "sacrebleu": None}}}))
    assert read_record(str(path), "eval")["directions"]["en-de"]["tok_bleu"] == 20.5
    for settings in ({"LR": [1]}, {"LR": {"value": 1}}, [["LR", "1"]]):
        path.write_text(json.dumps({"settings": settings}))
        with pytest.raises(RecordError, match="'settings'"):
            read_record(str(path), "run-config")
