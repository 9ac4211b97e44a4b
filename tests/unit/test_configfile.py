"""Experiments as TOML files (recipes/spec/configfile.py): what a file may hold, each mistake a
SettingError naming the file, and any settings written by ``dumps`` read back the same by
Python's own TOML reader (tomllib), for any text (hypothesis)."""

import os
import re
import tomllib

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from deepnet_fairseq.recipes.spec import configfile
from deepnet_fairseq.recipes.spec.settings import SETTINGS, SettingError

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
    assert data["settings"] == values and data.get("description", "") == description
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
