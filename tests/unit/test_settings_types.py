"""The resolved settings are read as the types their declarations give them: as
``cfg.SECTION.name``, every such read in the package and the benchmarks naming a setting of that
section (checked in the source, so that a read on a path no test takes is checked too), and no
module converts a resolved setting's string itself (``int(cfg["X"])``, ``cfg["X"] == "1"``,
``cfg["X"].split()``).
The declarations (``datasets/``, ``presets.py``) hold the values' text before it is resolved,
and are not scanned for conversions."""

import ast
import os

import pytest

from deepnet_fairseq.recipes.spec.settings import (GROUPS, SECTIONS, SETTINGS,
                                                    SettingError, resolve)
from support import REPO, setting_reads

TYPED_KINDS = {"int", "float", "0|1", "words", "ints", "int|auto"}


DECLARATIONS = (os.path.join("deepnet_fairseq", "recipes", "datasets"),
                os.path.join("deepnet_fairseq", "recipes", "spec", "presets.py"))


def sources():
    for top in ("deepnet_fairseq", "benchmarks"):
        for root, _, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    with open(path, encoding="utf-8") as handle:
                        yield os.path.relpath(path, REPO), ast.parse(handle.read(), path)


def setting_name(node):
    """The setting a node names as a string constant, if it is a declared one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in SETTINGS:
        return node.value
    return None


def subscripted_setting(node):
    """X of an expression ``something["X"]`` or ``something.text.SECTION.x`` (its text) where
    X is a declared setting of a typed kind."""
    name = None
    if isinstance(node, ast.Subscript):
        name = setting_name(node.slice)
    elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
          and isinstance(node.value.value, ast.Attribute) and node.value.value.attr == "text"):
        name = node.attr.upper() if node.attr.upper() in SETTINGS else None
    if name and SETTINGS[name].kind in TYPED_KINDS:
        return name
    return None


def conversions_of(tree):
    """A description of every conversion of a setting's string (its text) by hand."""
    conversions = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "split" and subscripted_setting(node.func.value):
                conversions.append(f'["{subscripted_setting(node.func.value)}"].split()')
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("int", "float") and node.args
                and subscripted_setting(node.args[0])):
            conversions.append(f'{node.func.id}(["{subscripted_setting(node.args[0])}"])')
        if isinstance(node, ast.Compare) and subscripted_setting(node.left) and any(
                isinstance(c, ast.Constant) and c.value in ("0", "1") for c in node.comparators):
            conversions.append(f'["{subscripted_setting(node.left)}"] == "0"/"1"')
    return conversions


def test_no_module_converts_a_settings_text_by_hand():
    conversions = [f"{path}: {text}" for path, tree in sources()
                   if not path.startswith(DECLARATIONS) for text in conversions_of(tree)]
    assert not conversions, "read the typed cfg.SECTION.name:\n" + "\n".join(conversions)


def test_the_scan_sees_each_conversion():
    tree = ast.parse('int(cfg["LAYERS"])\ncfg["RETRY"] == "1"\ncfg["METHODS"].split()\n'
                     'int(cfg.text.run.seed)\ncfg.text.sweep.methods.split()\n'
                     'cfg.text.run.retry == "0"\ncfg.optim.lr\ncfg.text.optim.lr\n')
    assert len(conversions_of(tree)) == 6


@pytest.fixture(scope="module")
def cfg():
    env = {"DEEPNET_SIZE": "smoke", "DEEPNET_WORK": "/nonexistent/work",
           "DEEPNET_METHODS": "deepnet post_ln", "DEEPNET_DEPTHS": "2 06", "DEEPNET_RETRY": "1"}
    return resolve("wmt17", env, REPO)


def test_sections_give_the_declared_types(cfg):
    assert cfg.sweep.methods == ("deepnet", "post_ln")
    assert cfg.sweep.depths == (2, 6)
    assert cfg.run.retry is True
    assert isinstance(cfg.optim.max_update, int) and isinstance(cfg.optim.lr, float)


ENVIRONMENTS = {"environ", "env"}  # what the package calls the environment it is given


def environment_reads(tree):
    """Every read of a setting straight from an environment (``os.environ.get("SIZE")``,
    ``env["DEEPNET_SIZE"]``): each is a second reader that can disagree with the resolver,
    which prefers DEEPNET_<NAME> to <NAME> (settings.from_env)."""
    names = set(SETTINGS) | {"DEEPNET_" + name for name in SETTINGS}

    def is_environment(node):
        return (isinstance(node, ast.Name) and node.id in ENVIRONMENTS) or \
            (isinstance(node, ast.Attribute) and node.attr in ENVIRONMENTS)

    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "pop") and is_environment(node.func.value)
                and node.args and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in names):
            found.append(node.args[0].value)
        if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                and is_environment(node.value) and isinstance(node.slice, ast.Constant)
                and node.slice.value in names):
            found.append(node.slice.value)
    return found


def test_no_module_reads_a_setting_from_the_environment_but_the_resolver():
    """The quickstart once read SIZE from the environment while the resolver took
    DEEPNET_SIZE first (DEEPNET_SIZE=full passed its size check): every reader of a setting
    goes through settings.from_env, the resolver's own."""
    found = [f"{path}: {name}" for path, tree in sources() for name in environment_reads(tree)]
    assert not found, "read it with settings.from_env:\n" + "\n".join(found)


def test_the_environment_scan_sees_a_direct_read():
    tree = ast.parse('os.environ.get("SIZE", "x")\nenv["DEEPNET_VOCAB"]\nenv.get("HOME")\n')
    assert environment_reads(tree) == ["SIZE", "DEEPNET_VOCAB"]


# ---- the typed sections: cfg.optim.lr, cfg.text.optim.lr, cfg.optional.sweep.runs ----------

def section_reads(tree):
    """(section, attribute) of every typed read, and the text of every read by a constant
    string key (support.setting_reads)."""
    sections, keyed = setting_reads(tree)
    return sections, [text for text, _, _ in keyed]


def test_every_section_read_names_a_setting_of_that_section():
    """A misspelt or moved name (``cfg.optim.lrr``, ``cfg.run.lr``) fails here, also on a path
    no test takes, not at run time."""
    reads, wrong = 0, []
    for path, tree in sources():
        found, _ = section_reads(tree)
        reads += len(found)
        wrong += [f"{path}: {section}.{attr}" for section, attr in found
                  if attr.upper() not in SECTIONS[section]]
    assert reads > 150  # the scan sees the package's reads
    assert not wrong, "reads of no setting of their section:\n" + "\n".join(wrong)


def test_settings_are_read_by_attribute_outside_their_declaring_module():
    """Outside ``spec/settings.py`` no resolved setting is read by a constant string key: the
    ones read by a name computed in a loop (each split's LOCAL_* and *_LINES, the settings a
    config file saves) are the only string-keyed reads left."""
    keyed = []
    for path, tree in sources():
        if not path.endswith(os.path.join("spec", "settings.py")):
            keyed += [f"{path}: {read}" for read in section_reads(tree)[1]]
    assert not keyed, "read as cfg.SECTION.name instead:\n" + "\n".join(keyed)


def test_the_section_scan_sees_a_wrong_name_and_a_keyed_read():
    reads, keyed = section_reads(ast.parse(
        'cfg.optim.lrr\ncfg.text.run.lr\nrun_cfg.optional.sweep.runs\ncfg["LR"]\n'
        'self.cfg.int("SEED")\ncfg.get("RUNS")\ncfg[name]\n'))
    assert sorted(reads) == [("optim", "lrr"), ("run", "lr"), ("sweep", "runs")]
    assert sorted(keyed) == sorted(['["LR"]', '.int("SEED")', '.get("RUNS")'])


# the Python type a value of each kind reads as, written out here (not taken from ``typed``)
TYPE_OF_KIND = {"int": int, "float": float, "0|1": bool, "words": tuple, "ints": tuple,
                "text": str, "path": str, "betas": str}


def test_the_sections_cut_every_setting_once_in_the_help_order():
    names = [name for section in SECTIONS.values() for name in section]
    assert names == list(SETTINGS)
    assert list(SECTIONS) == [section for _, section, _ in GROUPS]
    assert SECTIONS["optim"][0] == "LR" and SECTIONS["sweep"] == ("METHODS", "DEPTHS", "RUNS")


def test_each_attribute_reads_as_its_kind_and_its_text_as_resolved(cfg):
    for section, names in SECTIONS.items():
        typed_view, text_view = getattr(cfg, section), getattr(cfg.text, section)
        for name in names:
            if name not in cfg:
                with pytest.raises(SettingError, match=name):
                    getattr(typed_view, name.lower())
                assert getattr(getattr(cfg.optional, section), name.lower()) is None
                continue
            value, text = getattr(typed_view, name.lower()), getattr(text_view, name.lower())
            assert text == cfg.values[name]
            kind = SETTINGS[name].kind
            expected = TYPE_OF_KIND.get(kind, int if text != "auto" and kind == "int|auto"
                                        else str)
            assert isinstance(value, expected), (name, kind, value)
    assert cfg.optim.lr == float(cfg.values["LR"]) and cfg.sweep.depths == (2, 6)
    assert cfg.text.sweep.depths == "2 06"  # the text as given


def test_sections_are_read_only_and_say_what_they_hold(cfg):
    with pytest.raises(AttributeError, match="read-only"):
        cfg.optim.lr = 1.0
    with pytest.raises(AttributeError):
        cfg.optim.lrr
    with pytest.raises(AttributeError, match="no section"):
        cfg.text.optimisation
    assert "lr" in dir(cfg.optim) and "warmup_init_lr" in dir(cfg.text.optim)


def test_the_python_example_of_docs_running_md_runs_as_it_says(tmp_path, monkeypatch, capsys):
    """docs/running.md's example of the API and the typed settings, run as written (its dry
    run prints the training command), its values as its comments say."""
    import re

    with open(os.path.join(REPO, "docs", "running.md"), encoding="utf-8") as handle:
        text = handle.read()
    block = re.search(r"```python\n(import os\nfrom deepnet_fairseq.recipes import pipeline\n"
                      r".*?)```", text, re.S).group(1)
    monkeypatch.setenv("DEEPNET_WORK", str(tmp_path / "work"))
    for name in ("DEEPNET_SIZE", "SIZE", "TRAIN_ARGS", "DEEPNET_TRAIN_ARGS", "LR", "DEEPNET_LR"):
        monkeypatch.delenv(name, raising=False)
    namespace = {}
    exec(compile(block, "docs/running.md", "exec"), namespace)
    cfg = namespace["cfg"]
    assert (cfg.optim.lr, cfg.run.enc_layers, cfg.sweep.depths) == (0.002, 6, (1, 2))
    assert cfg.text.optim.warmup_init_lr == "1e-7" and cfg.optional.optim.train_args is None
    assert "fairseq-train" in capsys.readouterr().out
