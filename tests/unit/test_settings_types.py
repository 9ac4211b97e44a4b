"""The resolved settings are read as the types their declarations give them: each typed
accessor (``int``, ``float``, ``flag``, ``words``, ``ints``) reads only settings declared with
its kind, every call in the package and the benchmarks names a setting of that kind (checked
in the source, so that a call on a path no test takes is checked too), and no module converts a
resolved setting's string itself (``int(cfg["X"])``, ``cfg["X"] == "1"``, ``cfg["X"].split()``).
The declarations (``datasets/``, ``presets.py``) hold the values' text before it is resolved,
and are not scanned for conversions."""

import ast
import os

import pytest

from deepnet_fairseq.recipes.spec.settings import SETTINGS, resolve
from support import REPO

ACCESSORS = {"int": "int", "float": "float", "flag": "0|1", "words": "words", "ints": "ints",
             "int_or_auto": "int|auto"}
TYPED_KINDS = set(ACCESSORS.values())


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
    """X of an expression ``something["X"]`` where X is a declared setting of a typed kind."""
    if isinstance(node, ast.Subscript):
        name = setting_name(node.slice)
        if name and SETTINGS[name].kind in TYPED_KINDS:
            return name
    return None


def typed_reads_and_conversions(tree):
    """(accessor, setting) of every typed read, and a description of every conversion of a
    setting's string outside the accessors."""
    reads, conversions = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ACCESSORS and len(node.args) == 1 and setting_name(node.args[0]):
                reads.append((node.func.attr, setting_name(node.args[0])))
            if node.func.attr == "split" and subscripted_setting(node.func.value):
                conversions.append(f'["{subscripted_setting(node.func.value)}"].split()')
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("int", "float") and node.args
                and subscripted_setting(node.args[0])):
            conversions.append(f'{node.func.id}(["{subscripted_setting(node.args[0])}"])')
        if isinstance(node, ast.Compare) and subscripted_setting(node.left) and any(
                isinstance(c, ast.Constant) and c.value in ("0", "1") for c in node.comparators):
            conversions.append(f'["{subscripted_setting(node.left)}"] == "0"/"1"')
    return reads, conversions


def test_every_typed_read_in_the_source_matches_the_declaration():
    reads, wrong, conversions = 0, [], []
    for path, tree in sources():
        found, converted = typed_reads_and_conversions(tree)
        reads += len(found)
        wrong += [f"{path}: .{accessor}(\"{name}\") of a setting declared "
                  f"{SETTINGS[name].kind!r}" for accessor, name in found
                  if SETTINGS[name].kind != ACCESSORS[accessor]]
        if not path.startswith(DECLARATIONS):
            conversions += [f"{path}: {text}" for text in converted]
    assert reads > 30  # the scan sees the package's reads
    assert not wrong, "\n".join(wrong)
    assert not conversions, "convert through the typed accessors:\n" + "\n".join(conversions)


def test_the_scan_sees_a_mismatch_and_a_conversion():
    tree = ast.parse('cfg.int("LR")\nint(cfg["LAYERS"])\ncfg["RETRY"] == "1"\n'
                     'cfg["METHODS"].split()\ncfg.float("LR")\n')
    reads, conversions = typed_reads_and_conversions(tree)
    assert ("int", "LR") in reads and SETTINGS["LR"].kind != "int"
    assert len(conversions) == 3


@pytest.fixture(scope="module")
def cfg():
    env = {"DEEPNET_SIZE": "smoke", "DEEPNET_WORK": "/nonexistent/work",
           "DEEPNET_METHODS": "deepnet post_ln", "DEEPNET_DEPTHS": "2 06", "DEEPNET_RETRY": "1"}
    return resolve("wmt17", env, REPO)


def test_accessors_give_the_declared_types(cfg):
    assert cfg.words("METHODS") == ("deepnet", "post_ln")
    assert cfg.ints("DEPTHS") == (2, 6)
    assert cfg.flag("RETRY") is True
    assert isinstance(cfg.int("MAX_UPDATE"), int) and isinstance(cfg.float("LR"), float)


@pytest.mark.parametrize("accessor,name", [("int", "LR"), ("float", "MAX_UPDATE"),
                                           ("flag", "SEED"), ("words", "DEPTHS"),
                                           ("ints", "METHODS")])
def test_an_accessor_refuses_a_setting_of_another_kind(cfg, accessor, name):
    with pytest.raises(TypeError, match=f"{name} is declared"):
        getattr(cfg, accessor)(name)


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
