"""Experiments as TOML files (recipes/spec/configfile.py): what a file may hold (settings in
the sections of --help, runs as tables; the earlier flat [settings] form), each mistake a
SettingError naming the file, and any settings written by ``dumps`` read back the same, for
any text (hypothesis)."""

import os
import re
import tomllib

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from deepnet_fairseq.recipes.spec import configfile
from deepnet_fairseq.recipes.spec.settings import SECTION_OF, SETTINGS, SettingError

GOOD = """description = "two runs"
dataset = "wmt17"
steps = ["prepare", "sweep"]

[settings]
SIZE = "mini"
LR = 0.004
MAX_UPDATE = 1000
RUNS = "deepnet:6:6:LR=0.004 deepnet:18:18"
"""


def test_a_file_gives_its_dataset_steps_and_settings_as_strings(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text(GOOD)
    config = configfile.load(str(path))
    assert (config.dataset, config.steps, config.description) == (
        "wmt17", ("prepare", "sweep"), "two runs")
    assert dict(config.settings) == {"SIZE": "mini", "LR": "0.004", "MAX_UPDATE": "1000",
                                     "RUNS": "deepnet:6:6:LR=0.004 deepnet:18:18"}


@pytest.mark.parametrize("text,message", [
    ("dataset = \"wmt17\"\nsteps = [\"train\"]\nSIZE = \"mini\"\n", "unknown key(s) SIZE"),
    ("dataset = \"wmt18\"\nsteps = [\"train\"]\n", "dataset = 'wmt18': one of"),
    ("dataset = \"wmt17\"\n", "steps = None: a list of"),
    ("dataset = \"wmt17\"\nsteps = [\"train\", \"deploy\"]\n", "a list of prepare"),
    ("dataset = \"wmt17\"\nsteps = []\n", "a list of"),
    ("dataset = \"wmt17\"\nsteps = [\"train\"]\n[settings]\nSIZ = \"mini\"\n",
     "SIZ is not a recipe setting"),
    ("dataset = \"wmt17\"\nsteps = [\"train\"]\n[settings]\nWORK = \"/tmp\"\n",
     "set DEEPNET_WORK in the environment"),
    ("dataset = \"wmt17\"\nsteps = [\"train\"]\n[settings]\nRETRY = true\n",
     "flags are \"0\" or \"1\""),
    ("dataset = \"wmt17\"\nsteps = [\"train\"]\n[settings]\nDEPTHS = [6, 18]\n",
     "a string or a number"),
    ("dataset = \"wmt17\"\nsteps = [\"train\"\n", "is not a TOML file"),
    (b"dataset = \"wmt17\xff\"\n", "is not a TOML file"),
])
def test_every_mistake_is_one_error_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(SettingError, match=re.escape(message)) as refused:
        configfile.load(str(path))
    assert str(path) in str(refused.value)


def test_a_missing_file_is_named():
    with pytest.raises(SettingError, match="no such config file: nowhere.toml"):
        configfile.load("nowhere.toml")


NAMES = sorted(name for name, setting in SETTINGS.items() if not setting.prefix_only)
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)


@hypothesis_settings(max_examples=200, deadline=None)
@given(values=st.dictionaries(st.sampled_from(NAMES), TEXT, max_size=6), description=TEXT)
def test_what_dumps_writes_tomllib_reads_back_the_same(values, description):
    text = configfile.dumps("wmt17", ["prepare", "train"], values, description)
    data = tomllib.loads(text)
    # each value in its section, by its lower-case name (read here without the module)
    assert {name: data[SECTION_OF[name]][name.lower()] for name in values} == values
    config = configfile.from_data("x.toml", data)
    assert dict(config.settings) == values and config.description == description
    assert data["dataset"] == "wmt17" and data["steps"] == ["prepare", "train"]


def test_save_then_load_is_the_same_experiment(tmp_path):
    path = tmp_path / "saved.toml"
    configfile.save(str(path), "iwslt14", ["train", "evaluate"], {"LR": "5e-4", "SEED": "3"},
                    "a note")
    config = configfile.load(str(path))
    assert (config.dataset, config.steps, dict(config.settings), config.description) == (
        "iwslt14", ("train", "evaluate"), {"LR": "5e-4", "SEED": "3"}, "a note")


# ---- any TOML value at any key, and files that are not regular --------------------------

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT,
                    st.dates(), st.datetimes(), st.sampled_from(["wmt17", "train", "LR"]))
TOML_VALUES = st.recursive(SCALARS.filter(lambda v: v is not None), lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(NAMES + ["x"]), inner,
                                                 max_size=3)), max_leaves=6)


@hypothesis_settings(max_examples=300, deadline=None)
@given(data=st.dictionaries(st.sampled_from(sorted(configfile.KEYS) + ["other"]), TOML_VALUES,
                            max_size=5))
def test_any_toml_value_at_any_key_is_read_or_refused_naming_the_file(data):
    """`dataset = ["wmt17"]` once ended in a TypeError (a list is unhashable): whatever TOML
    holds at each key (lists, tables, dates, booleans, numbers), the file is read or refused
    with one SettingError naming it."""
    try:
        config = configfile.from_data("exp.toml", data)
    except SettingError as err:
        assert "exp.toml" in str(err)
    else:
        assert config.dataset in configfile.DATASETS and config.steps
        assert all(isinstance(v, str) for v in config.settings.values())


def _special(kind, path):
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        os.mkdir(path)
    elif kind == "link to a fifo":
        os.mkfifo(str(path) + ".fifo")
        os.symlink(str(path) + ".fifo", path)
    elif kind == "socket":
        import socket

        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        return server


@pytest.mark.parametrize("kind,what", [("fifo", "a FIFO"), ("directory", "a directory"),
                                       ("link to a fifo", "a FIFO"), ("socket", "a socket"),
                                       ("character device", "a character device")])
def test_a_config_file_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind,
                                                                                what):
    """A FIFO as the config file blocked the command until someone wrote to it (forever); a
    device never ends. Each special file is refused at once, naming it and what it is."""
    path = str(tmp_path / "exp.toml") if kind != "character device" else "/dev/zero"
    held = _special(kind, path)
    try:
        with pytest.raises(SettingError, match=re.escape(f"config file {path} is {what}, not a "
                                                         "regular file")):
            configfile.load(path)
    finally:
        if held:
            held.close()


def test_save_config_writes_only_once_the_step_accepts_the_command(tmp_path, monkeypatch,
                                                                    capsys):
    """--save-config once wrote its file before the step refused the command: a file that
    would only be refused again. Refused (by the step's own plan, after the settings
    resolved): no file; accepted: the file, which runs."""
    from deepnet_fairseq.recipes import __main__ as recipes

    saved = tmp_path / "saved.toml"
    monkeypatch.setenv("DEEPNET_WORK", str(tmp_path / "work"))
    monkeypatch.setenv("DEVICE", "cpu")
    monkeypatch.setenv("SIZE", "smoke")
    monkeypatch.setenv("TRAIN_ARGS", "--save-dir /tmp/elsewhere")
    argv = ["wmt17", "train", "--dry-run", "--save-config", str(saved)]
    assert recipes.main(argv) == 2
    assert "--save-dir is set by the recipe" in capsys.readouterr().err
    assert not saved.exists() and not os.path.exists(tmp_path / "work")
    monkeypatch.setenv("TRAIN_ARGS", "--no-save-optimizer-state")
    assert recipes.main(argv) == 0
    assert configfile.load(str(saved)).settings["TRAIN_ARGS"] == "--no-save-optimizer-state"


# ---- the sectioned form and runs as tables ---------------------------------------------------

SECTIONED = """description = "two runs"
dataset = "wmt17"
steps = ["prepare", "sweep"]
runs = [
    { method = "deepnet", layers = 6, set = { lr = 0.004 } },
    { method = "deepnet", layers = [18, 12] },
    { method = "admin", layers = 6, set = { tokens_per_update = 4096, lr = 5e-4, seed = 2 } },
]

[where]
size = "mini"

[optim]
lr = 0.004
max_update = 1000
"""


def test_a_sectioned_file_gives_the_settings_and_runs_of_the_flat_form(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text(SECTIONED)
    config = configfile.load(str(path))
    assert dict(config.settings) == {
        "SIZE": "mini", "LR": "0.004", "MAX_UPDATE": "1000",
        # a run's own settings in the order written: they name its directory
        "RUNS": "deepnet:6:6:LR=0.004 deepnet:18:12 "
                "admin:6:6:TOKENS_PER_UPDATE=4096:LR=0.0005:SEED=2"}
    one_by_one = SECTIONED.replace('runs = [\n    { method = "deepnet", layers = 6, set = { lr = '
                                   '0.004 } },\n', '').replace(
        '    { method = "deepnet", layers = [18, 12] },\n    { method = "admin", layers = 6, '
        'set = { tokens_per_update = 4096, lr = 5e-4, seed = 2 } },\n]\n', '')
    one_by_one += ('[[runs]]\nmethod = "deepnet"\nlayers = 6\nset = { lr = 0.004 }\n'
                   '[[runs]]\nmethod = "deepnet"\nlayers = [18, 12]\n'
                   '[[runs]]\nmethod = "admin"\nlayers = 6\n'
                   '[runs.set]\ntokens_per_update = 4096\nlr = 5e-4\nseed = 2\n')
    path.write_text(one_by_one)
    assert configfile.load(str(path)).settings == config.settings


HEAD = 'dataset = "wmt17"\nsteps = ["sweep"]\n'


@pytest.mark.parametrize("text,message", [
    ("[optim]\nsize = \"mini\"\n", "[optim] size is a setting of [where]"),
    ("[optim]\nLR = 0.1\n", "[optim] LR is not a recipe setting (names in lower case"),
    ("[optim]\nlrr = 0.1\n", "[optim] lrr is not a recipe setting"),
    ("[where]\nwork = \"/tmp\"\n", "set DEEPNET_WORK in the environment"),
    ("[run]\nretry = true\n", "flags are \"0\" or \"1\""),
    ("optim = 3\n", "optim must be a table ([optim])"),
    ("[settings]\nLR = \"0.1\"\n[optim]\nlr = 0.2\n", "LR is set twice"),
    ("runs = [{ method = \"deepnet\", layers = 6 }]\n[sweep]\nruns = \"deepnet:6:6\"\n",
     "the runs are given twice"),
    ("runs = \"deepnet:6:6\"\n", "runs must be tables, one per run"),
    ("runs = []\n", "runs must be tables, one per run"),
    ("runs = [{ method = \"deepnet\", layers = 6, lr = 0.1 }]\n",
     "run 1: unknown key(s) lr; a run has method, layers and set"),
    ("runs = [{ layers = 6 }]\n", "run 1: method = None: a method's name"),
    ("runs = [{ method = \"deepnet\", layers = true }]\n", "run 1: layers = True: a number"),
    ("runs = [{ method = \"deepnet\", layers = [6] }]\n", "layers = [6]: a number of layers"),
    ("runs = [{ method = \"deepnet\", layers = 6, set = 1 }]\n",
     "run 1: set must be a table of settings"),
    ("runs = [{ method = \"deepnet\", layers = 6, set = { SEED = 1 } }]\n",
     "run 1: set.SEED is not a recipe setting"),
    ("runs = [{ method = \"deepnet\", layers = 6, set = { train_args = \"--a b\" } }]\n",
     "a run's own value has no spaces or ':'"),
    ("runs = [{ method = \"deepnet\", layers = 6, set = { run_label = \"a:b\" } }]\n",
     "a run's own value has no spaces or ':'"),
])
def test_every_mistake_of_the_sectioned_form_is_one_error_naming_the_file(tmp_path, text,
                                                                          message):
    path = tmp_path / "bad.toml"
    path.write_text(HEAD + text)
    with pytest.raises(SettingError, match=re.escape(message)) as refused:
        configfile.load(str(path))
    assert str(path) in str(refused.value)


RUN_VALUES = st.one_of(st.integers(-5, 10 ** 6), st.floats(1e-6, 10.0), TEXT, st.booleans(),
                       st.lists(st.integers(), max_size=2))
RUNS = st.lists(st.fixed_dictionaries(
    {"method": st.sampled_from(["deepnet", "post_ln"]),
     "layers": st.one_of(st.integers(1, 100), st.lists(st.integers(-1, 100), min_size=1,
                                                       max_size=3))},
    optional={"set": st.dictionaries(st.sampled_from([n.lower() for n in NAMES] + ["LR"]),
                                     RUN_VALUES, max_size=3)}), min_size=1, max_size=3)


@hypothesis_settings(max_examples=300, deadline=None)
@given(runs=RUNS)
def test_any_runs_are_read_as_entries_the_sweep_splits_back_or_refused(runs):
    """Whatever a file's runs hold, each becomes one sweep entry whose fields are the run's
    (no value can split it into two entries or shift its fields), or the file is refused
    naming it."""
    try:
        config = configfile.from_data("exp.toml", {"dataset": "wmt17", "steps": ["sweep"],
                                                   "runs": runs})
    except SettingError as err:
        assert "exp.toml" in str(err)
        return
    entries = config.settings["RUNS"].split()
    assert len(entries) == len(runs)
    for entry, run in zip(entries, runs):
        method, enc, dec, *own = entry.split(":")
        layers = run["layers"] if isinstance(run["layers"], list) else [run["layers"]] * 2
        assert (method, [int(enc), int(dec)]) == (run["method"], layers)
        assert [kv.partition("=")[0] for kv in own] == [k.upper() for k in run.get("set", {})]


def test_the_committed_configs_are_in_the_sectioned_form():
    """configs/ shows the form the docs teach: no flat [settings] table, no compact RUNS."""
    import glob

    from support import REPO

    for path in sorted(glob.glob(os.path.join(REPO, "configs", "*.toml"))):
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
        assert "settings" not in data and "runs" not in data.get("sweep", {}), path


def test_the_toml_example_of_docs_running_md_reads_as_it_says():
    from support import REPO

    with open(os.path.join(REPO, "docs", "running.md"), encoding="utf-8") as handle:
        block = re.search(r"```toml\n(.*?)```", handle.read(), re.S).group(1)
    config = configfile.from_data("docs/running.md", tomllib.loads(block))
    assert dict(config.settings) == {"SIZE": "mini", "RUNS": "deepnet:6:6:LR=0.004 "
                                                             "deepnet:18:18:LR=0.002:SEED=2"}
