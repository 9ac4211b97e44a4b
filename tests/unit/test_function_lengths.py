"""Functions short enough to read whole: the plugin core (the model: constants, methods, nn,
models, tasks) at most 35 lines each, the recipes at most 60 (issue 41). A longer one is cut
into the decisions it makes, not allowed here."""

import ast
import os

import pytest

from support import REPO

LIMITS = {("deepnet_fairseq/constants.py", "deepnet_fairseq/methods.py", "deepnet_fairseq/nn",
           "deepnet_fairseq/models", "deepnet_fairseq/tasks"): 35,
          ("deepnet_fairseq/recipes",): 60}


def too_long(source: str, limit: int):
    """(name, lines) of every function in SOURCE longer than LIMIT lines, decorators aside."""
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > limit]


def python_files(place: str):
    path = os.path.join(REPO, place)
    if path.endswith(".py"):
        return [path]
    return [os.path.join(root, name) for root, _, names in os.walk(path)
            for name in names if name.endswith(".py")]


@pytest.mark.parametrize("places,limit", list(LIMITS.items()), ids=["core", "recipes"])
def test_no_function_is_longer_than_its_part_allows(places, limit):
    found = []
    for place in places:
        for path in python_files(place):
            with open(path, encoding="utf-8") as handle:
                found += [f"{os.path.relpath(path, REPO)}: {name} ({lines} lines)"
                          for name, lines in too_long(handle.read(), limit)]
    assert not found, f"over {limit} lines:\n" + "\n".join(found)


def test_the_scan_counts_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(40))
    assert too_long(f"def f():\n{body}\n\ndef g():\n    pass\n", 35) == [("f", 41)]
