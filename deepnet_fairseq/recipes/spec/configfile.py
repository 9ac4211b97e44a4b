"""Experiments as files: a TOML file names a dataset, the steps to run and the settings that
make the experiment, in the sections of the resolved settings (``settings.SECTIONS``: the
headings of ``--help``), names in lower case, and its runs as tables (``runs``, a list of
them, or ``[[runs]]`` one by one), so that what ``results/`` reports can be run again as it
is::

    # configs/depth-transfer.toml
    description = "the peak learning rate across depth, Multi30k, SIZE=mini"
    dataset = "wmt17"
    steps = ["prepare", "sweep"]
    runs = [  # layers: per side, or [encoder, decoder]; set: the run's own settings
        { method = "deepnet", layers = 6, set = { lr = 0.004 } },
        { method = "deepnet", layers = [18, 18], set = { lr = 0.002 } },
    ]

    [where]
    size = "mini"

    [data]
    source = "multi30k"

``python -m deepnet_fairseq.recipes run FILE`` runs it; ``python -m deepnet_fairseq.recipes
DATASET STEP --save-config FILE`` writes the settings a command was given as such a file.
The runs may also be the sweep's compact shorthand (``[sweep] runs = "deepnet:6:6:LR=0.004
deepnet:18:18:LR=0.002"``, as ``RUNS`` on the command line), and a file of the earlier flat
form (one ``[settings]`` table, upper-case names) still reads.

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
from .settings import SECTION_OF, SECTIONS, SETTINGS, SettingError

STEPS = ("prepare", "train", "evaluate", "sweep")
KEYS = {"description", "dataset", "steps", "runs", *SECTIONS,
        "settings"}  # settings: the earlier flat form


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
    values = _flat_settings(path, data.get("settings", {}))
    for section in SECTIONS:
        for name, value in _section(path, section, data.get(section, {})).items():
            if name in values:
                raise SettingError(f"{path}: {name} is set twice ([settings] and [{section}])")
            values[name] = value
    if "runs" in data:
        if "RUNS" in values:
            raise SettingError(f"{path}: the runs are given twice ([[runs]] and runs = "
                               "\"...\" in [sweep]); keep one")
        values["RUNS"] = " ".join(_run_entry(path, number, run) for number, run in
                                  enumerate(_tables(path, "runs", data["runs"]), 1))
    description = data.get("description", "")
    if not isinstance(description, str):
        raise SettingError(f"{path}: description must be a string")
    return ConfigFile(path, dataset, tuple(steps), values, description)


def _setting(path: str, name: str, value, where: str) -> str:
    """The text of setting NAME given in the file at WHERE; refused: an unknown name, one that
    says where this machine writes, a value that is no string or number."""
    if name not in SETTINGS:
        raise SettingError(f"{path}: {where}: {name} is not a recipe setting (python -m "
                           "deepnet_fairseq.recipes --help lists them)")
    if SETTINGS[name].prefix_only:
        raise SettingError(f"{path}: {name} says where this machine writes or which Python "
                           f"it runs, not what the experiment is: set DEEPNET_{name} in "
                           "the environment instead")
    return _value(path, name, value)


def _flat_settings(path: str, table) -> Dict[str, str]:
    """The earlier form: one [settings] table of upper-case names."""
    if not isinstance(table, dict):
        raise SettingError(f"{path}: settings must be a table ([settings])")
    return {name: _setting(path, name, value, "[settings]") for name, value in table.items()}


def _named(path: str, key: str, shown: str) -> str:
    """The setting a file's lower-case KEY names (``lr``: LR), or a SettingError showing it as
    SHOWN; an upper-case key is the flat form's, refused in a section or a run."""
    name = key.upper() if key == key.lower() else None  # TOML keys are strings
    if name not in SETTINGS:
        raise SettingError(f"{path}: {shown} is not a recipe setting (names in lower case: "
                           "python -m deepnet_fairseq.recipes --help lists them)")
    return name


def _section(path: str, section: str, table) -> Dict[str, str]:
    """{NAME: text} of the [SECTION] table: lower-case names of that section's settings."""
    if not isinstance(table, dict):
        raise SettingError(f"{path}: {section} must be a table ([{section}])")
    values = {}
    for key, value in table.items():
        name = _named(path, key, f"[{section}] {key}")
        if SECTION_OF[name] != section:
            raise SettingError(f"{path}: [{section}] {key} is a setting of [{SECTION_OF[name]}]")
        values[name] = _setting(path, name, value, f"[{section}]")
    return values


def _tables(path: str, key: str, value) -> list:
    if not isinstance(value, list) or not value or \
            not all(isinstance(item, dict) for item in value):
        raise SettingError(f"{path}: {key} must be tables, one per run (runs = [{{ method = "
                           "..., layers = ... }}, ...] or [[runs]])")
    return value


RUN_KEYS = ("method", "layers", "set")


def _run_entry(path: str, number: int, run: dict) -> str:
    """One [[runs]] table as the sweep's entry METHOD:ENC:DEC:KEY=VALUE..., which the sweep
    checks as any RUNS entry (a known method, depths of at least 1, settings a run may set)."""
    where = f"run {number}"
    unknown = sorted(map(str, set(run) - set(RUN_KEYS)))
    if unknown:
        raise SettingError(f"{path}: {where}: unknown key(s) {', '.join(unknown)}; a run has "
                           "method, layers and set (its own settings)")
    method, layers = run.get("method"), run.get("layers")
    if not isinstance(method, str):
        raise SettingError(f"{path}: {where}: method = {method!r}: a method's name")
    if isinstance(layers, int) and not isinstance(layers, bool):
        layers = [layers, layers]
    if not (isinstance(layers, list) and len(layers) == 2 and all(
            isinstance(n, int) and not isinstance(n, bool) for n in layers)):
        raise SettingError(f"{path}: {where}: layers = {run.get('layers')!r}: a number of "
                           "layers per side, or [encoder, decoder]")
    own = run.get("set", {})
    if not isinstance(own, dict):
        raise SettingError(f"{path}: {where}: set must be a table of settings")
    # one table in the order written, not one per section: the order names the run
    # (deepnet-6L-6L+LR=0.004+MAX_TOKENS=4096), so that a file says which directory it is
    fields = [method, str(layers[0]), str(layers[1])]
    for key, value in own.items():
        name = _named(path, key, f"{where}: set.{key}")
        text = _setting(path, name, value, where)
        if any(char.isspace() or char == ":" for char in text):
            raise SettingError(f"{path}: {where}: {key} = {text!r}: a run's own value has no "
                               "spaces or ':' (they separate a sweep's entries)")
        fields.append(f"{name}={text}")
    return ":".join(fields)


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
    """The TOML text of an experiment, its settings in their sections."""
    lines = [f"description = {toml_string(description)}"] if description else []
    lines += [f"dataset = {toml_string(dataset)}",
              f"steps = [{', '.join(map(toml_string, steps))}]"]
    for section, names in SECTIONS.items():
        given = [name for name in names if name in settings]
        if given:
            lines += ["", f"[{section}]"]
            lines += [f"{name.lower()} = {toml_string(settings[name])}" for name in given]
    return "\n".join(lines) + "\n"


def save(path: str, dataset: str, steps: Sequence[str], settings: Mapping[str, str],
         description: str = "") -> None:
    write_atomically(path, dumps(dataset, steps, settings, description))
