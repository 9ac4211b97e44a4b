"""The tools that write files, as a table for the hostile-output tests (unit/
test_hostile_outputs.py: onto an input, onto a symlink, injected disk errors, a directory the
user may not write; integration/test_read_only_disk.py: a read-only file system, for real):
each output argument of each tool, how to call the tool with it, and which inputs it reads.
The tools themselves are found, not listed: ``programs()`` is every console script of setup.py
and every module of the package with an ``if __name__ == "__main__":`` block, and
``output_arguments`` reads each one's argparse parser."""

import argparse
import ast
import importlib
import inspect
import sys
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
# what an output argument is called (an option of a tool's parser, or of its sub-commands')
OUTPUT_OPTION = re.compile(r"^--(output-dir|output|out|out-prefix|model-prefix|save-config|plot|factors|"
                           r"export|ctranslate2|transformers)$")


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
    prefix: bool = False  # the output names files PREFIX.SOMETHING, not a file itself
    onto: Callable = str  # the argument that makes the tool write over the input file given
    directories: Callable = lambda inputs, fixtures: []  # the directories the command reads


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
        _fake_run(runs, "deepnet-6L-6L+LR=0.002")  # a second learning rate (curves --factors)
    return runs


def _generated(inputs, fixtures):
    path = inputs / "generate.out"
    path.write_text("S-0\ta b\nH-0\t-0.1\tb a\nD-0\t-0.1\tb a\n")
    return path


def _reference(inputs, fixtures):
    path = inputs / "test.tgt"
    path.write_text("b a\n")
    return path


def _evaluated_run(inputs, name):
    """A run directory as the recipes' evaluation leaves it: eval/eval.json naming its
    reference, eval/src-tgt/generate-test.txt."""
    run = inputs / name
    (run / "eval" / "src-tgt").mkdir(parents=True, exist_ok=True)
    (run / "eval" / "src-tgt" / "generate-test.txt").write_text(
        "S-0\ta b\nH-0\t-0.1\tb a\nD-0\t-0.1\tb a\n")
    (run / "eval" / "eval.json").write_text(json.dumps(
        {"directions": {"src-tgt": {"sacrebleu": 100.0, "reference": str(_reference(inputs, {}))}}}))
    return run


def _corpus(inputs, fixtures):
    """A small parallel text, corpus.src and corpus.tgt."""
    pair = inputs / "corpus.src", inputs / "corpus.tgt"
    words = "the quick brown fox jumps over a lazy dog while seven cats sleep".split()
    for path in pair:
        path.write_text("".join(" ".join(words[k:] + words[:k]) + "\n" for k in range(40)))
    return pair


def _recipe_data_file(inputs, fixtures):
    """A file of the data directory the recipes' wmt17 step would read, with --repo IN/repo
    (where the settings put it)."""
    from deepnet_fairseq.recipes.spec.paths import paths
    from deepnet_fairseq.recipes.spec.settings import resolve

    cfg = resolve("wmt17", {}, str(inputs / "repo"))
    path = os.path.join(paths(cfg).data_dir, "bin", "dict.en.txt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("a 1\n")
    return type(inputs)(path)


TABLE: List[Output] = [
    Output("deepnet-plot-monitors", "--output", "deepnet_fairseq.diagnostics.plot_monitors:main",
           lambda i, f, out: [str(_monitor_log(i, f)), "--output", out],
           lambda i, f: [_monitor_log(i, f)], name="result.png"),
    Output("curves", "--plot", "deepnet_fairseq.recipes.reporting.curves:main",
           lambda i, f, out: [str(_runs(i, f) / "deepnet-6L-6L+LR=0.001"), "--plot", out],
           lambda i, f: [_runs(i, f) / "deepnet-6L-6L+LR=0.001" / "valid_loss.csv"],
           name="result.png", directories=lambda i, f: [_runs(i, f) / "deepnet-6L-6L+LR=0.001"]),
    Output("curves", "--factors", "deepnet_fairseq.recipes.reporting.curves:main",
           lambda i, f, out: [str(_runs(i, f) / "deepnet-6L-6L+LR=0.001"),
                              str(_runs(i, f) / "deepnet-6L-6L+LR=0.002"), "--factors", out],
           lambda i, f: [_runs(i, f) / "deepnet-6L-6L+LR=0.001" / "valid_loss.csv"],
           name="result.png", directories=lambda i, f: [_runs(i, f) / "deepnet-6L-6L+LR=0.001"]),
    Output("curves", "--export", "deepnet_fairseq.recipes.reporting.curves:main",
           lambda i, f, out: [str(_runs(i, f) / "deepnet-6L-6L+LR=0.001"), "--export", out],
           directory=True, directories=lambda i, f: [_runs(i, f) / "deepnet-6L-6L+LR=0.001"]),
    Output("lr_transfer", "--out", "deepnet_fairseq.recipes.reporting.lr_transfer:main",
           lambda i, f, out: [str(_runs(i, f)), "--out", out], directory=True,
           directories=lambda i, f: [_runs(i, f), _runs(i, f) / "deepnet-6L-6L+LR=0.001"]),
    Output("depth_law", "--out", "deepnet_fairseq.recipes.reporting.depth_law:main",
           lambda i, f, out: [str(_runs(i, f)), "--out", out], directory=True,
           directories=lambda i, f: [_runs(i, f), _runs(i, f) / "deepnet-6L-6L+LR=0.001"]),
    Output("deepnet-export", "--output", "deepnet_fairseq.export:main",
           lambda i, f, out: [str(_checkpoint(i, f)), "--output", out],
           lambda i, f: [_checkpoint(i, f)], name="result.pt"),
    Output("deepnet-export", "--ctranslate2", "deepnet_fairseq.export:main",
           lambda i, f, out: [str(_checkpoint(i, f)), "--data", str(f["data"]),
                              "--ctranslate2", out], directory=True,
           directories=lambda i, f: [f["data"]]),
    Output("deepnet-export", "--transformers", "deepnet_fairseq.export:main",
           lambda i, f, out: [str(_checkpoint(i, f)), "--data", str(f["data"]),
                              "--transformers", out], directory=True,
           directories=lambda i, f: [f["data"]]),
    Output("deepnet-average-checkpoints", "--output", "deepnet_fairseq.average_checkpoints:cli_main",
           lambda i, f, out: ["--inputs", str(_checkpoint(i, f)), "--output", out],
           lambda i, f: [_checkpoint(i, f)], name="result.pt"),
    Output("deepnet-source-use", "--out", "deepnet_fairseq.diagnostics.source_use:main",
           lambda i, f, out: [str(f["data"]), "--checkpoints", str(_checkpoint(i, f)),
                              "--sentences", "4", "--out", out],
           lambda i, f: [_checkpoint(i, f)], directories=lambda i, f: [f["data"]]),
    Output("score", "--out", "deepnet_fairseq.recipes.evaluation.score:main",
           lambda i, f, out: ["--direction", "src-tgt", str(_generated(i, f)),
                              str(_reference(i, f)), "--out", out],
           lambda i, f: [_generated(i, f), _reference(i, f)], name="result.json"),
    Output("significance", "--out", "deepnet_fairseq.recipes.evaluation.significance:main",
           lambda i, f, out: [str(_evaluated_run(i, "a")), str(_evaluated_run(i, "b")),
                              "--samples", "10", "--out", out],
           lambda i, f: [_reference(i, f), _evaluated_run(i, "a") / "eval" / "eval.json"],
           name="result.json"),
    Output("runlog", "--out", "deepnet_fairseq.recipes.run.runlog:main",
           lambda i, f, out: ["--log", str(_monitor_log(i, f)), "--exit-code", "0",
                              "--vocab-size", "40", "--out", out],
           lambda i, f: [_monitor_log(i, f)], name="result.json"),
    Output("clean", "--out-prefix", "deepnet_fairseq.recipes.data.clean:main",
           lambda i, f, out: ["--src", str(_corpus(i, f)[0]), "--tgt", str(_corpus(i, f)[1]),
                              "--src-lang", "src", "--tgt-lang", "tgt", "--out-prefix", out],
           lambda i, f: [_corpus(i, f)[0]], name="result", prefix=True,  # .tgt: the same prefix
           onto=lambda victim: str(victim)[:-len(".src")]),
    Output("spm", "--model-prefix", "deepnet_fairseq.spm:main",
           lambda i, f, out: ["train", "--inputs", str(_corpus(i, f)[0]), "--model-prefix", out,
                              "--vocab-size", "32"], name="result", prefix=True),
    Output("recipes", "--save-config", "deepnet_fairseq.recipes.__main__:main",
           lambda i, f, out: ["--repo", str(i / "repo"), "wmt17", "prepare", "--dry-run",
                              "--save-config", out],
           lambda i, f: [_recipe_data_file(i, f)], name="result.toml",
           directories=lambda i, f: [_recipe_data_file(i, f).parent]),
]

# output arguments the table leaves to other tests, and why
ELSEWHERE = {
    ("report", "--out"): "a directory of its own tables, never in the runs or data it reads, "
                         "replaced only with --force (the sweep's marked results/: the runner "
                         "passes it; tests/unit/test_recipe_reports.py)",
    ("deepnet-model-update", "--output-dir"): "trains models before it writes; its directory "
                                              "is a marked one (tests/slow/test_diagnostics_end_to_end.py)",
    ("deepnet-depth-study", "--output-dir"): "a recipe's DEEPNET_WORK, refused by the recipes' "
                                             "own checks (tests/integration/test_recipe_scripts.py)",
}

# the programs that write nothing but their standard output and error
PRINT_ONLY = {"deepnet-user-dir", "deepnet-model-options", "constants", "methods", "presets",
              "settings", "corpora", "distinct",
              # `deepnet`: it writes nothing itself, it calls the programs here, each under
              # its own name in the table
              "front"}
# programs without an output argument that write, and where (each under its own tests)
WRITES_WITHOUT_OUTPUT_ARGUMENT = {
    "evaluate": "its --run-dir's eval/, a directory the recipes made and marked",
    "corpus": "its --data, a directory the recipes made and marked",
    "quickstart": "the recipes' DEEPNET_WORK (tests/unit/test_hostile_runtime.py)",
    "results_page": "README.md of its --results directory, from that directory's CSVs",
    "fairseq_train_compat": "fairseq-train's --save-dir, made and marked by the runner first",
}


def _program_name(module: str) -> str:
    parts = module.split(".")
    return parts[-2] if parts[-1] in ("__main__", "__init__") else parts[-1]


def programs() -> dict:
    """{name: "module:function"} of every program of the package: setup.py's console scripts
    (by their names) and every module with an ``if __name__ == "__main__":`` block (by the
    module's own name; the function of the module that block calls, "" if none: it prints)."""
    with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
        found = dict(re.findall(r'"(deepnet-[\w-]+)=([\w.]+:\w+)"', f.read()))
    package = os.path.join(REPO, "deepnet_fairseq")
    for root, _, names in os.walk(package):
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            tree = ast.parse(open(path, encoding="utf-8").read())
            blocks = [node for node in tree.body if isinstance(node, ast.If)
                      and "__main__" in ast.unparse(node.test)]
            if not blocks:
                continue
            module = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
            own = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                   and node.name in ("main", "cli_main")}
            called = [node.func.id for block in blocks for node in ast.walk(block)
                      if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                      and node.func.id in own]
            spec = f"{module.removesuffix('.__init__')}:{called[0]}" if called else ""
            if spec not in found.values() or not spec:
                found[_program_name(module)] = spec
    return found


class _Parsed(Exception):
    def __init__(self, parser):
        self.parser = parser


def output_arguments(spec) -> set:
    """The output arguments (``OUTPUT_OPTION``) of the program SPEC's parser and its
    sub-commands': the parser is taken from its first parse, before it reads anything."""
    def caught(parser, *args, **kwargs):
        raise _Parsed(parser)

    saved = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args, sys.argv
    argparse.ArgumentParser.parse_args = argparse.ArgumentParser.parse_known_args = caught
    sys.argv = ["program"]
    main = function(spec)
    try:
        main([]) if inspect.signature(main).parameters else main()
    except _Parsed as parsed:
        parsers = [parsed.parser]
    else:
        parsers = []
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args, \
            sys.argv = saved
    found = set()
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += list(action.choices.values())
            found |= {o for o in action.option_strings if OUTPUT_OPTION.match(o)}
    return found


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
