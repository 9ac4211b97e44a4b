"""Experiments as TOML files (recipes/spec/configfile.py): what a file may hold, each mistake a
SettingError naming the file, and any settings written by ``dumps`` read back the same by
Python's own TOML reader (tomllib), for any text (hypothesis)."""

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
