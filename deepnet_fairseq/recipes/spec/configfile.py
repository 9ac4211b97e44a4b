"""Experiments as files: a TOML file names a dataset, the steps to run and the settings that
make the experiment, so that what ``results/`` reports can be run again as it is::

    # configs/depth-transfer.toml
    description = "the peak learning rate across depth, Multi30k, SIZE=mini"
    dataset = "wmt17"
    steps = ["prepare", "sweep"]

    [settings]
    SIZE = "mini"
    SOURCE = "multi30k"
    RUNS = "deepnet:6:6:LR=0.004 deepnet:18:18:LR=0.002"

``python -m deepnet_fairseq.recipes run FILE`` runs it; ``python -m deepnet_fairseq.recipes
DATASET STEP --save-config FILE`` writes the settings a command was given as such a file.

The file holds the experiment, the machine says where it runs: the settings are the ones of
``settings.SETTINGS`` (values as strings, or numbers), except where to write and which Python
(``WORK``, ``PYTHON``: the environment's ``DEEPNET_WORK`` / ``DEEPNET_PYTHON``). A setting
also given in the environment (``SIZE=smoke`` for a quick try, ``NPROC``, ``DEVICE``) wins, and
the resolved settings say where each value came from, so a run records what it ran.
"""

import tomllib
from dataclasses import dataclass, field
from typing import Dict, Mapping, Sequence, Tuple

from ...storage.fileio import NotRegularFile, open_regular, write_atomically
from ..datasets import DATASETS
from .settings import SETTINGS, SettingError

STEPS = ("prepare", "train", "evaluate", "sweep")
KEYS = {"description", "dataset", "steps", "settings"}


@dataclass(frozen=True)
class ConfigFile:
    path: str
    dataset: str
    steps: Tuple[str, ...]
    settings: Mapping[str, str] = field(default_factory=dict)
    description: str = ""


def _value(path: str, name: str, value) -> str:
    # bool first: TOML's true is a Python bool, which is also an int
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SettingError(f"{path}: {name} = {value!r}: a setting is a string or a number "
                           "(flags are \"0\" or \"1\")")
    return value if isinstance(value, str) else repr(value)


def load(path: str) -> ConfigFile:
    """The experiment of a TOML file; any problem is a SettingError naming the file and what
    to change. Values are checked later, by resolve(), as any setting's are. The file is read
    through the file layer's regular-file check: a FIFO would block here, a device never end."""
    try:
        with open_regular(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise SettingError(f"no such config file: {path}") from None
    except NotRegularFile as err:
        raise SettingError(f"config file {err}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise SettingError(f"{path} is not a TOML file: {err}") from None
    return from_data(path, data)


def from_data(path: str, data: dict) -> ConfigFile:
    """The experiment of a TOML file's parsed DATA (any values TOML can hold), or a SettingError
    naming PATH: every key is checked for its type before it is used, so that no value (a
    list, a table, a date) reaches a comparison that would raise something else."""
    unknown = sorted(set(data) - KEYS)
    if unknown:
        raise SettingError(f"{path}: unknown key(s) {', '.join(unknown)}; a config file has "
                           f"{', '.join(sorted(KEYS))} (settings go under [settings])")
    dataset = data.get("dataset")
    if not isinstance(dataset, str) or dataset not in DATASETS:  # a list is unhashable
        raise SettingError(f"{path}: dataset = {dataset!r}: one of {', '.join(DATASETS)}")
    steps = data.get("steps")
    if (not isinstance(steps, list) or not steps
            or any(not isinstance(step, str) or step not in STEPS for step in steps)):
        raise SettingError(f"{path}: steps = {steps!r}: a list of {', '.join(STEPS)}, run in "
                           "the order given")
    table = data.get("settings", {})
    if not isinstance(table, dict):
        raise SettingError(f"{path}: settings must be a table ([settings])")
    values: Dict[str, str] = {}
    for name, value in table.items():
        if name not in SETTINGS:
            raise SettingError(f"{path}: {name} is not a recipe setting (python -m "
                               "deepnet_fairseq.recipes --help lists them)")
        if SETTINGS[name].prefix_only:
            raise SettingError(f"{path}: {name} says where this machine writes or which Python "
                               f"it runs, not what the experiment is: set DEEPNET_{name} in "
                               "the environment instead")
        values[name] = _value(path, name, value)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise SettingError(f"{path}: description must be a string")
    return ConfigFile(path, dataset, tuple(steps), values, description)


def toml_string(text: str) -> str:
    """TEXT as a TOML basic string: quote, backslash and the control characters TOML forbids
    raw (U+0000-U+001F, U+007F) escaped, everything else as it is."""
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04X}")
        elif 0xD800 <= ord(char) <= 0xDFFF:  # undecodable bytes of the environment
            raise SettingError(f"{text!r} is not valid Unicode; it cannot go into a TOML file")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def dumps(dataset: str, steps: Sequence[str], settings: Mapping[str, str],
          description: str = "") -> str:
    """The TOML text of an experiment."""
    lines = [f"description = {toml_string(description)}"] if description else []
    lines += [f"dataset = {toml_string(dataset)}",
              f"steps = [{', '.join(map(toml_string, steps))}]", "", "[settings]"]
    lines += [f"{name} = {toml_string(settings[name])}" for name in sorted(settings)]
    return "\n".join(lines) + "\n"


def save(path: str, dataset: str, steps: Sequence[str], settings: Mapping[str, str],
         description: str = "") -> None:
    write_atomically(path, dumps(dataset, steps, settings, description))
