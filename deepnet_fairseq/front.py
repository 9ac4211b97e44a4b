"""``deepnet``: one command for what the plugin's users do, each subcommand the tool that was
there before (the recipes, ``deepnet-export``, ``deepnet-average-checkpoints``, the
diagnostics), which keep working under their old names.

    deepnet quickstart                      # the README's first command
    SIZE=smoke deepnet sweep wmt17          # a recipe step: prepare, train, evaluate, sweep
    deepnet run configs/depth-transfer.toml # an experiment file
    deepnet translate RUN_DIR < in.txt > out.txt
    deepnet export CHECKPOINT --transformers DIR

This module imports nothing heavy: the help of ``deepnet`` lists the commands without torch or
fairseq, and a command's own module is imported only to run it (its ``--help`` is that
module's). A command that starts work (an experiment, a sweep) prints its help when it is
given no arguments, rather than starting with its defaults."""

import sys
from typing import Callable, Dict, List, NamedTuple, Optional

STEPS = ("prepare", "train", "evaluate", "sweep")


class Command(NamedTuple):
    target: str  # "module:function", called with the arguments after the command's name
    summary: str
    bare_is_help: bool  # no arguments: print its help, start nothing


COMMANDS: Dict[str, Command] = {
    "quickstart": Command("deepnet_fairseq.recipes.quickstart:main",
                          "data, a 6L-6L DeepNet trained on the shipped Multi30k, its BLEU "
                          "(the README's first command)", False),
    **{step: Command("deepnet_fairseq.recipes.__main__:main",
                     f"the recipes' {step} step: deepnet {step} DATASET [--dry-run] (settings "
                     "as environment variables)", True) for step in STEPS},
    "run": Command("deepnet_fairseq.recipes.__main__:main",
                   "an experiment file: deepnet run CONFIG.toml [--dry-run]", True),
    "translate": Command("deepnet_fairseq.translate:main",
                         "translate a text file or standard input to standard output", True),
    "export": Command("deepnet_fairseq.export:main",
                      "a checkpoint for stock fairseq, CTranslate2 or transformers "
                      "(deepnet-export)", True),
    "average": Command("deepnet_fairseq.average_checkpoints:cli_main",
                       "average checkpoints into one (deepnet-average-checkpoints)", True),
    "depth-study": Command("deepnet_fairseq.recipes.depth_study:main",
                           "a depth sweep with its table and plot (deepnet-depth-study)", True),
    "model-update": Command("deepnet_fairseq.diagnostics.model_update:main",
                            "Figure 5's model update at initialisation (deepnet-model-update)",
                            True),
    "plot-monitors": Command("deepnet_fairseq.diagnostics.plot_monitors:main",
                             "plot the monitored run's gradients and updates "
                             "(deepnet-plot-monitors)", True),
    "source-use": Command("deepnet_fairseq.diagnostics.source_use:main",
                          "how much a model reads its source (deepnet-source-use)", True),
    "model-options": Command("deepnet_fairseq.cli:print_model_options",
                             "an architecture's model options (deepnet-model-options)", False),
    "user-dir": Command("deepnet_fairseq.cli:print_user_dir",
                        "the path to give fairseq's --user-dir (deepnet-user-dir)", False),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items())
    return (f"usage: deepnet COMMAND [ARGUMENTS]   (deepnet COMMAND --help: its own options)\n\n"
            f"DeepNet (DeepNorm) Transformers for fairseq: one command for the recipes, the\n"
            f"exports and the diagnostics.\n\ncommands:\n{rows}\n")


def resolve(target: str) -> Callable:
    import importlib

    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage(), end="")
        return 0
    name, rest = argv[0], argv[1:]
    command = COMMANDS.get(name)
    if command is None:
        print(f"deepnet: no command {name!r}; one of {', '.join(COMMANDS)}\n\n{usage()}",
              file=sys.stderr, end="")
        return 2
    if command.bare_is_help and not rest:
        rest = ["--help"]
    if name in STEPS and not rest[0].startswith("-"):  # deepnet train wmt17 ...: the recipes'
        rest = [rest[0], name, *rest[1:]]  # DATASET STEP order (their --help: as given)
    elif name == "run":
        rest = ["run", *rest]
    code = resolve(command.target)(rest)
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
