"""The tools that write files, as a table for the hostile-output tests (unit/
test_hostile_outputs.py: onto an input, onto a symlink, injected disk errors, a directory the
user may not write; integration/test_read_only_disk.py: a read-only file system, for real):
each output argument of each tool, how to call the tool with it, and which inputs it reads."""

import importlib
import io
import json
import os
import re
import shutil
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Callable, List, Tuple

from support import REPO

LOG = ("2026 | INFO | train_inner | epoch 001: loss=5, mon_grad.enc.0=0.1, mon_lnin.enc.0=1, "
       "mon_upd.enc.0=0.01, num_updates=1\n")
OUTPUT_OPTION = re.compile(r"^\s+(--(?:output-dir|output|out|plot|export|ctranslate2|"
                           r"transformers))(?=[\s,=])", re.M)


def _fake_run(runs, name="deepnet-6L-6L+LR=0.001"):
    run = runs / name
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({
        "method": "deepnet", "encoder_layers": 6, "decoder_layers": 6, "status": "ok",
        "last_valid_loss": 6.2, "label": "deepnet", "dataset": "wmt17", "seed": 1,
        "num_updates": 10}))
    (run / "config.json").write_text(json.dumps({"settings": {"LR": {"value": "0.001"},
                                                              "SEED": {"value": "1"}}}))
    (run / "valid_loss.csv").write_text("num_updates,valid_loss_bits\n10,6.2\n")
    return run


@dataclass
class Output:
    """One output argument of one tool: how to call it, writing to OUTPUT, with inputs made
    under IN; which of its inputs a file output may be pointed at."""
    tool: str
    option: str
    main: str  # module:function
    argv: Callable  # (inputs dir, fixtures, output path) -> argv
    inputs: Callable = lambda inputs, fixtures: []  # files the command reads
    directory: bool = False  # the output is a directory
    name: str = "result.csv"  # a file output's name where the tool is free to write


def _monitor_log(inputs, fixtures):
    log = inputs / "train.log"
    log.write_text(LOG)
    return log


def _checkpoint(inputs, fixtures):
    target = inputs / "checkpoint_1_5.pt"
    if not target.exists():
        shutil.copyfile(fixtures["checkpoint"], target)
    return target


def _runs(inputs, fixtures):
    runs = inputs / "runs"
    if not runs.exists():
        _fake_run(runs)
    return runs


TABLE: List[Output] = [
    Output("deepnet-plot-monitors", "--output", "deepnet_fairseq.diagnostics.plot_monitors:main",
           lambda i, f, out: [str(_monitor_log(i, f)), "--output", out],
           lambda i, f: [_monitor_log(i, f)], name="result.png"),
    Output("curves", "--plot", "deepnet_fairseq.recipes.reporting.curves:main",
           lambda i, f, out: [str(_runs(i, f) / "deepnet-6L-6L+LR=0.001"), "--plot", out],
           lambda i, f: [_runs(i, f) / "deepnet-6L-6L+LR=0.001" / "valid_loss.csv"],
           name="result.png"),
    Output("curves", "--export", "deepnet_fairseq.recipes.reporting.curves:main",
           lambda i, f, out: [str(_runs(i, f) / "deepnet-6L-6L+LR=0.001"), "--export", out],
           directory=True),
    Output("lr_transfer", "--out", "deepnet_fairseq.recipes.reporting.lr_transfer:main",
           lambda i, f, out: [str(_runs(i, f)), "--out", out], directory=True),
    Output("deepnet-export", "--output", "deepnet_fairseq.export:main",
           lambda i, f, out: [str(_checkpoint(i, f)), "--output", out],
           lambda i, f: [_checkpoint(i, f)], name="result.pt"),
    Output("deepnet-export", "--ctranslate2", "deepnet_fairseq.export:main",
           lambda i, f, out: [str(_checkpoint(i, f)), "--data", str(f["data"]),
                              "--ctranslate2", out], directory=True),
    Output("deepnet-export", "--transformers", "deepnet_fairseq.export:main",
           lambda i, f, out: [str(_checkpoint(i, f)), "--data", str(f["data"]),
                              "--transformers", out], directory=True),
    Output("deepnet-average-checkpoints", "--output", "deepnet_fairseq.average_checkpoints:cli_main",
           lambda i, f, out: ["--inputs", str(_checkpoint(i, f)), "--output", out],
           lambda i, f: [_checkpoint(i, f)], name="result.pt"),
    Output("deepnet-source-use", "--out", "deepnet_fairseq.diagnostics.source_use:main",
           lambda i, f, out: [str(f["data"]), "--checkpoints", str(_checkpoint(i, f)),
                              "--sentences", "4", "--out", out],
           lambda i, f: [_checkpoint(i, f)]),
]

# output arguments the table leaves to other tests, and why
ELSEWHERE = {
    ("report", "--out"): "a sweep's results directory, written only into a directory the "
                         "recipes created and marked (tests/unit/test_recipe_reports.py)",
    ("deepnet-model-update", "--output-dir"): "trains models before it writes; its directory "
                                              "is a marked one (tests/slow/test_diagnostics_end_to_end.py)",
    ("deepnet-depth-study", "--output-dir"): "a recipe's DEEPNET_WORK, refused by the recipes' "
                                             "own checks (tests/integration/test_recipe_scripts.py)",
}

TOOLS = {"curves": "deepnet_fairseq.recipes.reporting.curves:main",
         "lr_transfer": "deepnet_fairseq.recipes.reporting.lr_transfer:main",
         "report": "deepnet_fairseq.recipes.reporting.report:main"}


PRINT_ONLY = {"deepnet-user-dir", "deepnet-model-options"}  # they write nothing but stdout


def console_scripts():
    with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
        found = dict(re.findall(r'"(deepnet-[\w-]+)=([\w.]+:\w+)"', f.read()))
    assert PRINT_ONLY <= set(found) and len(found) > len(PRINT_ONLY)
    return {**{k: v for k, v in found.items() if k not in PRINT_ONLY}, **TOOLS}


def function(spec):
    module, function = spec.split(":")
    return getattr(importlib.import_module(module), function)


def call(spec, argv) -> Tuple[int, str]:
    """Run a tool's main in this process: (status, what it printed on stderr)."""
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        try:
            status = function(spec)(argv) or 0
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else 1
    return status, err.getvalue()
