"""Records written without reading what they replace (issue 43): every writer of a record reads
the one it replaces through the one reader (``records.write_record`` -> ``read_record``), so a
record of a newer version, of another kind or damaged is refused in one line naming the file
and the step that writes it anew, and left as it was; and one rule (``records.run_names``) says
what in a runs directory is a run.

The cases are generated: every kind of ``records.KINDS`` against every record it cannot read
(each other schema version, each other kind, each typed field given another type, broken JSON,
special files); the writers are found in the sources (every call of ``write_record``), and the
commands that write them are run at their doors."""

import ast
import json
import os

import pytest

from deepnet_fairseq.recipes import __main__ as recipes_cli
from deepnet_fairseq.storage import records
from deepnet_fairseq.storage.records import KINDS, WRITTEN_BY, read_record, write_record
from deepnet_fairseq.recipes.reporting import report
from deepnet_fairseq.storage import directories as workdir
from deepnet_fairseq.storage.fileio import RecordError
from deepnet_fairseq.recipes.spec.paths import paths
from support import REPO
from test_hostile_runtime import BASE, _prepare_cfg, _run_record, prepared_work
from test_records import WRONG, _calls


def _json(data):
    return lambda path: open(path, "w").write(json.dumps(data))


def _bytes(data):
    return lambda path: open(path, "wb").write(data)


def unreadable(kind):
    """(name, maker) of every record of KIND this code cannot read: generated from KINDS
    (the versions around the known ones, every other kind) and FIELDS (each typed field given
    the first value of another type it refuses), with broken files and special ones."""
    cases = [(f"version {KINDS[kind] + 1}", _json({"schema": {"kind": kind,
                                                             "version": KINDS[kind] + 1}})),
             ("version 0", _json({"schema": {"kind": kind, "version": 0}})),
             ("a schema without its version", _json({"schema": {"kind": kind}})),
             ("a schema that is no object", _json({"schema": [kind, KINDS[kind]]}))]
    cases += [(f"a {other} record", _json({"schema": {"kind": other, "version": KINDS[other]}}))
              for other in sorted(KINDS) if other != kind]
    for field, is_valid in sorted(records.FIELDS[kind].items()):
        value = next(v for v in WRONG if not is_valid(v))
        cases.append((f"{field} of another type", _json({field: value})))
    cases += [("truncated", _bytes(b'{"status": "ok"')), ("empty", _bytes(b"")),
              ("a JSON list", _bytes(b"[]")), ("not UTF-8", _bytes(b'{"status": "\xff"}')),
              ("a FIFO", os.mkfifo), ("a directory", os.mkdir)]
    return cases


UNREADABLE = [(kind, name, make) for kind in sorted(KINDS) for name, make in unreadable(kind)]


def _state(path):
    """What is at PATH: its kind and its bytes (a FIFO is not opened)."""
    if os.path.isdir(path):
        return "directory", sorted(os.listdir(path))
    if not os.path.isfile(path):
        return "special", os.stat(path).st_mode
    return "file", open(path, "rb").read()


@pytest.mark.parametrize("kind, name, make", UNREADABLE,
                         ids=[f"{k}: {n}" for k, n, _ in UNREADABLE])
def test_no_record_is_written_over_one_this_code_cannot_read(tmp_path, kind, name, make):
    """Every kind, over every record of it this code cannot read: refused in one line naming
    the file and the step that writes it anew; the file as it was, no temporary left."""
    path = str(tmp_path / "r.json")
    make(path)
    before = _state(path)
    with pytest.raises(RecordError) as error:
        write_record(path, kind, {"status": "ok"})
    message = str(error.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert message.endswith(f"move {path} away and run {WRITTEN_BY[kind]} again (it writes a "
                            f"new one)")
    assert _state(path) == before and os.listdir(tmp_path) == ["r.json"]


READABLE = [(kind, version) for kind in sorted(KINDS) for version in [None, *range(1, KINDS[kind] + 1)]]


@pytest.mark.parametrize("kind, version", READABLE)
def test_a_record_this_code_reads_is_replaced(tmp_path, kind, version):
    """Every version this code reads (and the records older than the schema field) is replaced
    by the current one."""
    path = str(tmp_path / "r.json")
    schema = {} if version is None else {"schema": {"kind": kind, "version": version}}
    open(path, "w").write(json.dumps({"status": "old", **schema}))
    write_record(path, kind, {"status": "new"})
    assert read_record(path, kind) == {"status": "new"}


def test_every_kind_is_written_through_write_record_alone():
    """The writers, found in the sources: every call of write_record names a declared kind,
    every kind has a writer (so the cases above are every writer's), and the record text made
    outside records.py (the full disk's last resort) is made in a function that reads the
    record it replaces first. Only a tool's --force replaces without reading (its user's word,
    test_hostile_outputs.py's rule)."""
    here = os.path.relpath(records.__file__, REPO)
    written = set()
    for module, _ in _calls("write_record"):
        tree = ast.parse(open(os.path.join(REPO, module), encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and "write_record" in (
                    getattr(node.func, "id", None), getattr(node.func, "attr", None)):
                kind = node.args[1]
                assert isinstance(kind, ast.Constant) and kind.value in KINDS, (module, node.lineno)
                for keyword in node.keywords:
                    assert keyword.arg != "force" or ast.unparse(keyword.value) == "args.force"
                written.add(kind.value)
    assert written == set(KINDS)
    assert set(WRITTEN_BY) == set(KINDS)
    for module in {m for m, _ in _calls("record_text")} - {here}:
        tree = ast.parse(open(os.path.join(REPO, module), encoding="utf-8").read())
        for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            called = {getattr(c.func, "id", None) for c in ast.walk(function)
                      if isinstance(c, ast.Call)}
            if "record_text" in called:  # read_status is read_record for a status
                assert called & {"read_record", "read_status"}, (module, function.name)


# ---- the writers' doors: the commands the issue found writing over what they could not read

NEWER = {"schema": {"kind": "status", "version": KINDS["status"] + 1}, "status": "ok"}


def _refused(code, err, path, step):
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith(f"error: {path}: ") and f"run {step} again" in last, err


def _newer(kind):
    return json.dumps({"schema": {"kind": kind, "version": KINDS[kind] + 1}, "status": "ok"})


DAMAGED = {"newer": _newer, "truncated": lambda kind: '{"status": "o'}


def _main(monkeypatch, capsys, env, argv):
    for name, value in {**BASE, **env}.items():
        monkeypatch.setenv(name, value)
    code = recipes_cli.main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_train_leaves_a_status_it_cannot_read(tmp_path, monkeypatch, capsys, damage):
    """train.sh over a status of a newer deepnet_fairseq (or a damaged one): refused before
    anything is written, not rewritten as "running"."""
    work = prepared_work(tmp_path)
    run_dir = workdir.make_dirs(str(work / "runs" / "deepnet-1L-1L"))
    _run_record(run_dir, _prepare_cfg(work, LAYERS="1"))
    status = os.path.join(run_dir, "status.json")
    open(status, "w").write(DAMAGED[damage]("status"))
    before = sorted(os.listdir(run_dir)), open(status).read()
    code, err = _main(monkeypatch, capsys, {"DEEPNET_WORK": str(work), "LAYERS": "1",
                                            "SOURCE": "multi30k"}, ["wmt17", "train"])
    _refused(code, err, status, "train.sh")
    assert (sorted(os.listdir(run_dir)), open(status).read()) == before


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_evaluate_neither_keeps_nor_replaces_an_eval_it_cannot_read(tmp_path, monkeypatch,
                                                                     capsys, damage):
    """evaluate.sh where eval/eval.json cannot be read: refused naming it (it said "already
    evaluated", or replaced it), eval/ as it was."""
    work = tmp_path / "work"
    cfg = _prepare_cfg(work)
    run_dir = workdir.make_dirs(paths(cfg).run_dir)
    write_record(os.path.join(run_dir, "status.json"), "status", {"status": "ok"})
    result = os.path.join(workdir.make_dirs(os.path.join(run_dir, "eval")), "eval.json")
    open(result, "w").write(DAMAGED[damage]("eval"))
    code, err = _main(monkeypatch, capsys, {"DEEPNET_WORK": str(work), "SOURCE": "multi30k"},
                      ["wmt17", "evaluate"])
    _refused(code, err, result, "evaluate.sh")
    assert "already evaluated" not in err
    assert open(result).read() == DAMAGED[damage]("eval")
    assert not os.path.exists(os.path.join(run_dir, "evaluate.config.json"))


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_evaluate_names_a_status_it_cannot_read(tmp_path, monkeypatch, capsys, damage):
    """evaluate.sh where status.json cannot be read: refused naming it and its step, not "has
    not trained successfully" (which sent the user to train a run that had trained)."""
    work = tmp_path / "work"
    cfg = _prepare_cfg(work)
    run_dir = workdir.make_dirs(paths(cfg).run_dir)
    status = os.path.join(run_dir, "status.json")
    open(status, "w").write(DAMAGED[damage]("status"))
    code, err = _main(monkeypatch, capsys, {"DEEPNET_WORK": str(work), "SOURCE": "multi30k"},
                      ["wmt17", "evaluate"])
    _refused(code, err, status, "train.sh")
    assert "has not trained" not in err and open(status).read() == DAMAGED[damage]("status")


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_prepare_names_its_own_step_for_a_data_record_it_cannot_read(tmp_path, damage):
    """prepare.sh over a damaged data/config.json, prepared or not yet: refused, advising to
    prepare again (it said "remove that run", or wrote over it when nothing was prepared)."""
    from deepnet_fairseq.recipes.data import prepare

    work = tmp_path / "work"
    data = workdir.make_dirs(str(work / "data"))
    path = os.path.join(data, "config.json")
    open(path, "w").write(DAMAGED[damage]("data-config"))
    with pytest.raises(prepare.PrepareError) as error:
        prepare.prepare(_prepare_cfg(work))
    assert str(error.value).startswith(f"{path}: ") and "run prepare.sh again" in str(error.value)
    assert "remove that run" not in str(error.value)
    assert open(path).read() == DAMAGED[damage]("data-config")


def test_the_report_reads_runs_and_nothing_else_in_a_runs_directory(tmp_path, capsys):
    """The recipes' marker file, their lock and temporaries, and the user's stray file in
    runs/ are no runs: the report lists none of them as unreadable (it listed the marker and
    advised removing it); a run whose record cannot be read still is listed."""
    runs = workdir.make_dirs(str(tmp_path / "runs"))
    for name in (workdir.LOCK, ".tmp-status.json.1.abcd", "notes.txt"):
        open(os.path.join(runs, name), "w").close()
    for name, status in (("deepnet-1L-1L", {"status": "diverged"}), ("broken", None)):
        run = workdir.make_dirs(os.path.join(runs, name))
        if status:
            write_record(os.path.join(run, "status.json"), "status",
                         {**status, "method": "deepnet", "encoder_layers": 1, "decoder_layers": 1})
        else:
            open(os.path.join(run, "status.json"), "w").write(_newer("status"))
    assert records.run_names(runs) == ["broken", "deepnet-1L-1L"]
    unreadable = []
    rows = report.collect("wmt17", runs, unreadable)
    assert [row["run"] for row in rows] == ["deepnet-1L-1L"]
    assert len(unreadable) == 1 and unreadable[0].startswith("broken: ")
    assert "remove that run" not in capsys.readouterr().err
