"""The recipes' settings as a class of inputs (issue: recipes safe by construction): random
values thrown at every declared setting, and at every field of a sweep's RUNS, are either
accepted or refused with a SettingError naming the setting, and nothing is created on disk
before the refusal. Generated from the declarations (settings.SETTINGS), so a new setting is
covered without a new test."""

import os
import re

import pytest
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from deepnet_fairseq.recipes.pipeline.sweeps import sweep_specs
from deepnet_fairseq.recipes.spec import settings
from deepnet_fairseq.recipes.spec.settings import SETTINGS, SettingError
from deepnet_fairseq.recipes.pipeline.sweeps import sweep as run_sweep
from deepnet_fairseq.recipes.run.commands import method_args, task_args, train_command
from deepnet_fairseq.recipes.run.layout import plan_layout
from support import REPO

# names a test environment cannot set meaningfully here: where to write (checked by the tests
# of the file layer) and which interpreter to start
SKIP = {"WORK", "PYTHON"}
NAMES = sorted(set(SETTINGS) - SKIP)

# values near every kind's edges: other scripts' digits, signs, huge and tiny numbers, paths,
# quotes, control characters, empty, whitespace
EDGES = st.sampled_from(["", " ", "0", "-1", "1e-300", "1e308", "nan", "inf", "\u0663",
                         "12345678901234567890", "0x10", "1_000", "../../x", "/etc/passwd",
                         "'", '"', "a b", "\x00", "\t", "(0.9, 0.98)", "auto", "cpu"])
VALUES = st.one_of(EDGES, st.text(max_size=12), st.integers(-10**25, 10**25).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr))


def _resolve_and_plan(env, work):
    cfg = settings.resolve("wmt17", {**env, "DEEPNET_WORK": str(work), "DEVICE": "cpu"}, REPO,
                           lambda: 0)
    layout = plan_layout(cfg, env, lambda: 0)
    train_command(cfg, layout, method_args(cfg),
                         task_args(cfg, dry_run=True), python="PY")
    return cfg


@hypothesis_settings(max_examples=300, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(NAMES), value=VALUES)
def test_any_value_of_any_setting_is_accepted_or_refused_by_name_creating_nothing(
        tmp_path, name, value):
    work = tmp_path / "work"
    try:
        cfg = _resolve_and_plan({f"DEEPNET_{name}": value}, work)
    except SettingError as err:
        assert name in str(err) or "DEEPNET_" in str(err) or "RUNS" in str(err), str(err)
    else:
        if name in cfg and SETTINGS[name].kind in ("int", "int|auto", "float", "ints"):
            assert cfg[name].isascii()  # what fairseq and the shell scripts will read
        if name in cfg and SETTINGS[name].pattern:
            assert all(re.fullmatch(SETTINGS[name].pattern[0], w) for w in cfg[name].split())
    assert not work.exists(), "something was written before the refusal"


FIELDS = st.one_of(st.sampled_from(["deepnet", "post_ln", "nosuch", "6", "0", "\u0663",
                                    "SEED=x/../../victim", "LR=1e-3", "SEED=2", "LR=", "=3",
                                    "RUN_NAME=a/b", "TRAIN_ARGS=--arch", "..", "", "LAYERS=-1"]),
                   st.text(max_size=8))


@hypothesis_settings(max_examples=300, deadline=None)
@given(fields=st.lists(FIELDS, min_size=0, max_size=5))
def test_every_field_of_a_runs_entry_is_checked_as_the_setting_it_names(fields):
    entry = ":".join(fields)
    if not entry or any(ch.isspace() for ch in entry):
        return  # RUNS is split on whitespace: an entry has none
    try:
        method, enc, dec, overrides = settings.check_run_entry(entry)
    except SettingError:
        return
    name = settings.run_name(method, enc, dec, overrides)
    assert "/" not in name and not name.startswith(".") and name.isprintable()
    assert enc.isascii() and enc.isdigit() and int(enc) >= 1
    for override in overrides:
        key, _, value = override.partition("=")
        settings._check(key, value, "test")  # each value is one its setting accepts


@pytest.mark.parametrize("runs,message", [
    ("deepnet:1:1:SEED=x/../../../victim", "SEED='x/../../../victim'.*expected a whole number"),
    ("deepnet:\u0663:1", "ENC_LAYERS=.*expected ASCII digits"),
    ("deepnet:1:1:TRAIN_ARGS=--patience=../x", "run name"),
    ("deepnet:1:1:RUN_NAME=../x", "RUN_NAME cannot differ between runs"),
    ("nosuch:1:1", "unknown method 'nosuch'"),
])
def test_a_bad_runs_field_stops_the_sweep_before_it_writes(tmp_path, runs, message):
    work = tmp_path / "work"
    cfg = settings.resolve("wmt17", {"DEEPNET_WORK": str(work), "DEVICE": "cpu", "RUNS": runs},
                           REPO, lambda: 0)
    with pytest.raises(SettingError, match=message):
        sweep_specs(cfg)
    assert not work.exists() and not os.path.exists(tmp_path / "victim")


@pytest.mark.parametrize("inputs,message", [
    ({"METHODS": "deepnet nosuch", "DEPTHS": "1"}, r"METHODS .* nosuch x 1: unknown method"),
    ({"METHODS": "deepnet", "DEPTHS": "2 0"}, "deepnet x 0: ENC_LAYERS must be at least 1"),
    ({"METHODS": "deepnet", "DEPTHS": "1", "TRAIN_ARGS": "--save-dir /tmp/x"},
     "deepnet-1L-1L: TRAIN_ARGS: --save-dir is set by the recipe"),
    ({"RUNS": "deepnet:1:1 deepnet:2:2:TRAIN_ARGS=--arch=transformer"},
     r"deepnet-2L-2L\+TRAIN_ARGS=--arch=transformer: TRAIN_ARGS: --arch is set by the recipe"),
])
def test_a_sweep_checks_every_run_and_its_command_before_it_writes(tmp_path, inputs, message):
    """METHODS x DEPTHS are checked as RUNS entries are, and every run's settings and training
    command are built before the first run trains: a mistake in any run (here in the second)
    stops the sweep, dry run or not, with nothing written."""
    work = tmp_path / "work"
    env = {"DEEPNET_WORK": str(work), "DEVICE": "cpu", **inputs}
    cfg = settings.resolve("wmt17", env, REPO, lambda: 0)
    for dry_run in (True, False):
        with pytest.raises(SettingError, match=message):
            run_sweep(cfg, env, dry_run=dry_run)
    assert not work.exists()


def _edges(name):
    """(value, accepted) at both ends of NAME's declared range (settings.RANGES): the bound
    itself, just inside and just outside."""
    lowest, highest, inclusive = settings.RANGES[name]
    integer = SETTINGS[name].kind in ("int", "int|auto", "ints")
    step = 1 if integer else 1e-6 * max(1.0, abs(lowest or highest or 1.0))
    cases = []
    if lowest is not None:
        cases += [(lowest, inclusive), (lowest - step, False), (lowest + step, True)]
    if highest is not None:
        cases += [(highest, False), (highest - step, True)]
    return [(int(v) if integer else v, ok) for v, ok in cases]


EDGE_CASES = [(name, value, ok) for name in sorted(settings.RANGES) for value, ok in _edges(name)]


@pytest.mark.parametrize("name,value,accepted", EDGE_CASES,
                         ids=[f"{n}={v}" for n, v, _ in EDGE_CASES])
def test_every_bound_of_every_setting_is_where_it_is_declared(tmp_path, name, value, accepted):
    """Generated from settings.RANGES: each bound, and a step either side of it, accepted or
    refused (naming the setting) exactly as declared, before anything is written."""
    work = tmp_path / "work"
    text = str(value) if isinstance(value, int) else repr(float(value))
    env = {f"DEEPNET_{name}": text}
    if name == "NNODES":  # several nodes need their rendezvous
        env.update(DEEPNET_NODE_RANK="0", DEEPNET_MASTER_ADDR="127.0.0.1", DEEPNET_NPROC="1")
    try:
        _resolve_and_plan(env, work)
        refused = None
    except SettingError as err:
        refused = str(err)
    out_of_range = f"{name}=" in (refused or "") and ">" in (refused or "")  # its bound named
    if accepted:  # (it may still break a rule between settings: EMBED_DIM a multiple of HEADS)
        assert not out_of_range, refused
    else:
        assert out_of_range, f"{name}={text}: {refused or 'accepted'}"
    assert not work.exists()


# ---- classes of values, generated from the declarations ------------------------------------

NUMBERS = sorted(name for name, s in SETTINGS.items() if s.kind in ("int", "int|auto"))


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "1\u00b3", "\uff11", "\u0967"])
@pytest.mark.parametrize("name", NUMBERS)
def test_every_whole_number_setting_takes_ascii_digits_only(name, value):
    """"²".isdigit() is true and int("٣") is 3: no whole-number setting takes other scripts'
    digits (NPROC included), in ASCII digits only as fairseq and the shell scripts read them."""
    with pytest.raises(SettingError, match=f"{name}=.*ASCII digits"):
        settings._check(name, value, "test")


PATTERNED = sorted(name for name, s in SETTINGS.items() if s.pattern)


@pytest.mark.parametrize("value", ["en-gb", "de.x", "1de", "d e/..", "\u00fc", "_x", "x" * 33])
@pytest.mark.parametrize("name", PATTERNED)
def test_a_language_code_that_would_split_a_file_name_is_refused(tmp_path, name, value):
    """SRC=en-gb once ended in a traceback at prepare's pair.split("-"): every setting declared
    with a pattern (the language codes) is checked against it when resolved, every word of it,
    in one line naming the setting and what it expects, before anything is written."""
    work = tmp_path / "work"
    dataset = "opus100" if name == "LANGS" else "parallel"
    with pytest.raises(SettingError, match=f"{name}=.*expected a language code"):
        settings.resolve(dataset, {"DEEPNET_WORK": str(work), "DEVICE": "cpu", name: value},
                         REPO, lambda: 0)
    assert not work.exists()


def test_the_language_codes_are_declared_with_their_pattern():
    assert {"SRC", "TGT", "LANGS"} <= set(PATTERNED)
    for value in ("de", "en", "pt_br", "zh", "all", "src"):
        settings._check("SRC", value, "test")
    settings._check("LANGS", "de fr cs", "test")


SCOPES = sorted((name, s.scope) for name, s in SETTINGS.items())


@pytest.mark.parametrize("name,scope", SCOPES, ids=[n for n, _ in SCOPES])
def test_a_runs_entry_sets_only_what_may_differ_between_runs(tmp_path, name, scope):
    """A RUNS entry's KEY=VALUE once lost to the sweep's own values (deepnet:6:6:ENC_LAYERS=50
    trained 6 layers in a directory named for 50) or recorded what the shared data does not
    have (VOCAB=8000): every setting not of scope "run" (the entry's own fields, the sweep's,
    the data's, prepare's, the machine's) is refused there, saying why, with nothing written."""
    entry = f"deepnet:2:2:{name}=1"
    if scope == "run":
        try:
            settings.check_run_entry(entry)
        except SettingError as err:  # its value may be wrong for it, but the key is allowed
            assert "cannot differ between runs" not in str(err)
        return
    with pytest.raises(SettingError, match=f"{name} cannot differ between runs: "
                                           f"{re.escape(settings.NOT_PER_RUN[scope])}"):
        settings.check_run_entry(entry)
    work = tmp_path / "work"
    cfg = settings.resolve("wmt17", {"DEEPNET_WORK": str(work), "DEVICE": "cpu",
                                     "RUNS": f"deepnet:1:1 {entry}"}, REPO, lambda: 0)
    with pytest.raises(SettingError, match="cannot differ between runs"):
        run_sweep(cfg, {}, dry_run=True)
    assert not work.exists()


def test_the_scopes_are_the_declared_ones():
    DATA_SETTINGS = settings.affecting(settings.DATA)

    assert {s.scope for s in SETTINGS.values()} == {"run", *settings.NOT_PER_RUN}
    assert {"METHOD", "LAYERS", "ENC_LAYERS", "DEC_LAYERS", "RUN_NAME"} <= {
        n for n, s in SETTINGS.items() if s.scope == "entry"}
    assert {"WORK", "PYTHON", "DEVICE", "NPROC"} <= {
        n for n, s in SETTINGS.items() if s.scope == "machine"}
    # what prepare records and compares (affects DATA) is the data scope, declared once
    assert set(DATA_SETTINGS) == {n for n, s in SETTINGS.items() if s.scope == "data"}
    assert {"VOCAB", "SRC", "TGT", "LANGS", "SOURCE", "TRAIN_LINES", "LOCAL_TRAIN",
            "OPUS_URL"} <= set(DATA_SETTINGS)


def test_processes_per_machine_have_an_upper_bound():
    """WORKERS=100000 once became fairseq-preprocess --workers 100000: every setting that
    counts processes on one machine is bounded (WORKERS by 4 x this machine's cores, where
    prepare runs; the others, which may plan another machine, by a generous constant)."""
    for name in ("WORKERS", "NUM_WORKERS", "NPROC"):
        assert settings.RANGES[name][1] is not None, name
    assert settings.RANGES["WORKERS"][1] == 4 * (os.cpu_count() or 1) + 1
    with pytest.raises(SettingError, match="WORKERS=100000 .*must be >= 1 and <"):
        settings.resolve("wmt17", {"WORKERS": "100000", "DEVICE": "cpu"}, REPO, lambda: 0)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("char", ["\x00", "\n", "\r", "\x1b", "\x7f"])
def test_no_setting_takes_a_control_character(name, char):
    """A line end in RUN_NAME was echoed by the attempt header as a line of its own, which the
    verdict read as fairseq's ("FloatingPointError": a healthy run recorded diverged); a value
    goes into file names, fairseq's command line and one-line records. A list (RUNS,
    TRAIN_ARGS, METHODS, DEPTHS, LANGS) may put its items on several lines, nothing more."""
    value = f"1{char}2"
    listed = SETTINGS[name].kind in ("words", "ints") or name in settings.LIST_SETTINGS
    if listed and char in "\n\r":
        try:
            settings._check(name, value, "a test")
        except SettingError as error:
            assert "control character" not in str(error)  # refused as its kind, if at all
        return
    with pytest.raises(SettingError, match="control character"):
        settings._check(name, value, "a test")


@pytest.mark.parametrize("name", [n for n in NAMES if SETTINGS[n].kind == "float"])
@pytest.mark.parametrize("value", ["1_0", "1_0e-7", "0x1p-3", "١.٠", "1e5_0"])
def test_a_number_is_written_as_fairseq_reads_it(name, value):
    """Python's float() takes "1_0" (and the environment's 1_0e-7), which fairseq would be
    handed as --lr 1_0; only plain decimal and exponent notation is a number here."""
    with pytest.raises(SettingError, match=re.escape(name)):
        settings._check(name, value, "a test")


@pytest.mark.parametrize("encoding, ok", [("utf-8", True), ("latin-1", True), ("cp1252", True),
                                          ("rot13", False), ("base64", False),
                                          ("hex", False), ("zlib", False)])
def test_the_encoding_is_a_text_encoding(encoding, ok, tmp_path):
    """codecs knows bytes-to-bytes codecs too: ENCODING=rot13 passed, and prepare failed after
    creating its directories with "unknown encoding"."""
    env = {"DEVICE": "cpu", "SIZE": "smoke", "ENCODING": encoding,
           "DEEPNET_WORK": str(tmp_path / "w")}
    if ok:
        assert settings.resolve("wmt17", env, REPO, lambda: 0)["ENCODING"] == encoding
    else:
        with pytest.raises(SettingError, match="ENCODING.*not a text encoding"):
            settings.resolve("wmt17", env, REPO, lambda: 0)
    assert not (tmp_path / "w").exists()
