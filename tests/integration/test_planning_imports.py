"""Planning a step imports neither torch nor fairseq: every dataset's every step with --dry-run
and --help, and every experiment file's dry run, in a fresh interpreter. Those imports take
seconds (torch about 2, fairseq 3 more), which every dry run, every --help and every test of
the docs' commands would pay; what needs them imports them where it runs."""

import json
import os
import subprocess
import sys

from support import REPO

HEAVY = ("torch", "fairseq", "sacremoses", "sklearn", "matplotlib")

# One interpreter: each command's new heavy imports are recorded against it. The GPU probe is
# told there is no GPU driver (the machine CI runs on): where one is, DEVICE=auto rightly asks
# torch how many GPUs it sees.
PLAN_ALL = r"""
import contextlib, glob, io, json, os, sys
from deepnet_fairseq.recipes import __main__ as recipes
from deepnet_fairseq.recipes.base import machine
from deepnet_fairseq.recipes.datasets import DATASETS
from deepnet_fairseq.recipes.spec import configfile

machine.GPU_DRIVER_SIGNS = ()
heavy = lambda: {m for m in sys.modules if m.split(".")[0] in HEAVY}
commands = [[d, s, flag] for d in DATASETS for s in configfile.STEPS for flag in ("--dry-run", "--help")]
commands += [["run", "--dry-run", path] for path in sorted(glob.glob(os.path.join(REPO, "configs", "*.toml")))]
found, codes = {}, {}
for argv in commands:
    before = heavy()
    # the bring-your-own-text dataset needs its languages named (docs/datasets.md)
    os.environ.update({"SRC": "de", "TGT": "en"} if argv[0] == "parallel" else {})
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            codes[" ".join(argv)] = recipes.main(argv)
        except SystemExit as exit:
            codes[" ".join(argv)] = exit.code
    for name in ("SRC", "TGT"):
        os.environ.pop(name, None)
    new = sorted({m.split(".")[0] for m in heavy() - before})
    if new:
        found[" ".join(argv)] = new
print(json.dumps({"found": found, "codes": codes,
                  "at_start": sorted({m.split(".")[0] for m in heavy()})}))
"""


def test_planning_imports_no_torch_fairseq_or_their_kin(tmp_path):
    script = f"HEAVY = {HEAVY!r}\nREPO = {REPO!r}\n" + PLAN_ALL
    env = dict(os.environ, DEEPNET_WORK=str(tmp_path / "work"))
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["at_start"] == []  # importing the recipes' entry point imports none
    failed = {command: code for command, code in result["codes"].items() if code not in (0, None)}
    assert len(result["codes"]) > 20 and failed == {}
    assert result["found"] == {}, (
        "these commands imported heavy packages while only planning (import them inside the "
        f"function that runs the work): {result['found']}")


# What fairseq itself does not import, but the plugin's sharding would if imported eagerly:
# torch.distributed.optim pulls in FSDP, DTensor and sympy, about a second of every fairseq
# process that registers the plugin (nn/zero.py defines its optimizer on first use).
SHARDING_ONLY = ("torch.distributed.optim", "torch.distributed.tensor", "sympy")

REGISTER = """
import sys
import deepnet_fairseq
import fairseq_cli.train
deepnet_fairseq.register()
print(sorted(m for m in sys.modules if m in SHARDING_ONLY))
"""


def test_registering_the_plugin_imports_no_sharding_code(tmp_path):
    proc = subprocess.run([sys.executable, "-c", f"SHARDING_ONLY = {SHARDING_ONLY!r}" + REGISTER],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[-2] == "[]", proc.stdout
