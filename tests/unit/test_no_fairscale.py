"""fairscale (unmaintained) is not part of the install, and the package does not import it:
fairseq imports it (in ``try`` blocks) whenever it is installed, so leaving it out of the install
is what keeps it off the plugin's and the recipes' paths. That their runs import none:
tests/slow/test_zero.py (every rank of every run records it); the comparisons with fairscale's
OSS get a copy of their own (tests/reference_fairscale.py)."""

import ast
import os
import re

from support import REPO


def read(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as handle:
        return handle.read()


def test_the_install_installs_no_fairscale():
    script = re.sub(r"\\\n\s*", " ", read("scripts/install.sh"))  # continuations joined
    pip_calls = [line for line in script.splitlines() if '"${pip_install[@]}"' in line]
    assert len(pip_calls) >= 4 and not [line for line in pip_calls if "fairscale" in line]
    for pins in ("constraints.txt", "requirements.txt"):
        lines = [line.split("#")[0] for line in read(pins).splitlines()]
        assert not [line for line in lines if "fairscale" in line.lower()], pins
    setup = ast.parse(read("setup.py"))
    assert not [node.value for node in ast.walk(setup) if isinstance(node, ast.Constant)
                and isinstance(node.value, str) and "fairscale" in node.value.lower()]


def test_no_module_of_the_package_imports_fairscale():
    imports = []
    for root, _, names in os.walk(os.path.join(REPO, "deepnet_fairseq")):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as handle:
                    tree = ast.parse(handle.read(), path)
                for node in ast.walk(tree):
                    modules = ([alias.name for alias in node.names]
                               if isinstance(node, ast.Import) else
                               [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                    imports += [f"{path}: {m}" for m in modules if m.split(".")[0] == "fairscale"]
    assert not imports
