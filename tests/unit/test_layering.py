"""The package imports only downward: the plugin (what fairseq loads with --user-dir) never
imports the tools, the diagnostics or the recipes, and no import goes in a circle. Read from
the source (every import statement, also inside functions), so a lazy import counts too."""

import ast
import os

from support import REPO


PACKAGE = "deepnet_fairseq"

# Layers, lowest first: a module may import its own layer and the ones below it. The package
# root (USER_DIR, register) is importable from everywhere.
LAYERS = [
    ("core", ["constants", "methods"]),
    ("storage", ["storage", "corpora"]),
    ("nn", ["nn", "data_threads"]),  # the training hooks register() installs
    ("models", ["models"]),
    ("tasks", ["tasks", "criterions"]),  # what fairseq-train is given by name
    ("tools", ["export", "hf_export", "hf_card", "hub", "average_checkpoints", "spm", "cli",
               "fairseq_train_compat", "processes", "plotting", "fairseq_log", "translate"]),
    ("diagnostics", ["diagnostics"]),
    ("recipes", ["recipes"]),
    ("front", ["front", "__main__"]),  # `deepnet`: every tool by name, the recipes included
]
# the two applications on top stay apart: neither imports the other
APART = {"diagnostics", "recipes"}


def modules():
    """{dotted name: path} of every module of the package."""
    found = {}
    for directory, _, names in os.walk(os.path.join(REPO, PACKAGE)):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                dotted = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                found[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = path
    return found


def imports(name, path, known):
    """The package's modules that ``name`` imports, anywhere in its source."""
    package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
    targets = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            # `from X import name`: the module X.name, or (a function, a constant) X itself
            candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                          for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known and "." in candidate:
                candidate = candidate.rsplit(".", 1)[0]
            if candidate in known and candidate != name:
                targets.add(candidate)
    return targets


def layer_of(name):
    parts = name.split(".")
    if len(parts) == 1:
        return None  # the package root
    for rank, (layer, members) in enumerate(LAYERS):
        if parts[1] in members:
            return rank, layer
    raise AssertionError(f"{name} belongs to no layer: add it to LAYERS in {__file__}")


KNOWN = modules()
GRAPH = {name: imports(name, path, KNOWN) for name, path in KNOWN.items()}


def test_every_import_goes_downward():
    upward = []
    for name, targets in sorted(GRAPH.items()):
        here = layer_of(name)
        for target in sorted(targets):
            there = layer_of(target)
            if here is None or there is None:
                continue
            if there[0] > here[0] or (there[1] != here[1] and {here[1], there[1]} <= APART):
                upward.append(f"{name} ({here[1]}) imports {target} ({there[1]})")
    assert not upward, "imports that go upward:\n" + "\n".join(upward)


def test_no_import_cycle():
    """Depth-first search for a cycle among the package's modules. Importing the package
    root (USER_DIR, register) is always allowed: Python has initialised it before any
    submodule runs, so it cannot close a cycle; what register() imports is checked."""
    state, stack = {}, []

    def visit(name):
        state[name] = "open"
        stack.append(name)
        for target in sorted(GRAPH[name] - {PACKAGE}):
            if state.get(target) == "open":
                cycle = stack[stack.index(target):] + [target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        stack.pop()
        state[name] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)


def test_the_check_catches_an_upward_import_and_a_cycle(tmp_path):
    known = {"deepnet_fairseq.methods": "", "deepnet_fairseq.recipes.run.runner": ""}
    source = tmp_path / "methods.py"
    source.write_text("def f():\n    from .recipes.run import runner\n")
    assert imports("deepnet_fairseq.methods", str(source), known) == {
        "deepnet_fairseq.recipes.run.runner"}
    assert (layer_of("deepnet_fairseq.methods")[0]
            < layer_of("deepnet_fairseq.recipes.run.runner")[0])
