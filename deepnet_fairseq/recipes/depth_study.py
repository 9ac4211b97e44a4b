"""Depth study: the paper's Table 1 pattern at tiny scale, in minutes a run on a CPU. Tiny
(64-128-2) models of each method at several depths, identical settings, a fixed number of
updates; for each method and depth, its last validation loss against the source-blind baseline
and whether it trained, stalled or diverged.

    deepnet-depth-study --depths 6,18 --updates 50 --output-dir /tmp/ds    # a quick look
    deepnet-depth-study                          # post_ln, pre_ln, deepnet; 6L-6L .. 500L-500L
    SOURCE=multi30k deepnet-depth-study --dataset wmt17 --output-dir runs/depth-study-multi30k

It is a sweep of the recipes, nothing of its own: by default of the ``reverse_copy`` dataset
(``datasets/reverse_copy.py``: a generated task, and the study's settings), through the same
prepare (sentencepiece, fairseq-preprocess), train, evaluate and report as every dataset, so a
run here and a run of a sweep are the same thing and are judged by the same rule
(``deepnet_fairseq/fairseq_log.py``, from fairseq's own output):

  diverged  fairseq reported non-finite numbers, or the validation loss stayed no better than
            a uniform guess over the vocabulary after the warmup
  stalled   trained, but its last validation loss is not 0.5 bits below the source-blind
            baseline (the entropy of the validation targets' unigram distribution: the loss of
            a model that ignores its source)
  trained   otherwise

The options below set the recipe's settings (METHODS, DEPTHS, MAX_UPDATE, LR, WARMUP,
TOKENS_PER_UPDATE and MAX_TOKENS, SEED, TRAIN_ARGS, RETRY); every other setting comes from the
environment as for any recipe (``python -m deepnet_fairseq.recipes --help``), and a setting in
the environment wins over an option (the settings printed first say where each value came from).
A run that fails (a bad option, out of memory) is marked failed and the study goes on. Results
in OUTPUT/results: ``valid_loss.md`` and ``loss_vs_depth.png`` (the study's table and plot),
the sweep's ``table.md`` and ``results.csv`` (BLEU of each run). Launched again, it skips
finished runs and resumes an interrupted one.
"""

import argparse
import os
import sys

from . import cli_parser
from .datasets import DATASETS
from .datasets.reverse_copy import DATASET as TASK  # the study's own task and settings
from .spec.settings import home
from ..storage.fileio import one_line_os_errors


def comma_list(text: str) -> str:
    """A comma-separated option as the setting's space-separated words."""
    return " ".join(part.strip() for part in text.split(",") if part.strip())


# option -> the settings it sets
OPTIONS = {
    "methods": ("METHODS",), "depths": ("DEPTHS",), "updates": ("MAX_UPDATE",), "lr": ("LR",),
    "warmup": ("WARMUP",), "max_tokens": ("TOKENS_PER_UPDATE", "MAX_TOKENS"), "seed": ("SEED",),
    "fairseq_args": ("TRAIN_ARGS",),
}


def get_parser() -> argparse.ArgumentParser:
    study = TASK.preset.values
    parser = cli_parser("deepnet-depth-study", __doc__)
    parser.add_argument("--dataset", default=TASK.name, choices=list(DATASETS),
                        help=f"whose text and settings [{TASK.name}: the generated task]")
    parser.add_argument("--methods", type=comma_list, help="comma-separated method names "
                        f"[the dataset's METHODS; {TASK.name}: {study['METHODS'].value}]")
    parser.add_argument("--depths", type=comma_list, help="layers per side, comma-separated "
                        f"[the dataset's DEPTHS; {TASK.name}: {study['DEPTHS'].value}]")
    for option, setting, what in (("--updates", "MAX_UPDATE", "updates per run"),
                                  ("--lr", "LR", "peak learning rate"),
                                  ("--warmup", "WARMUP", "inverse_sqrt warmup updates"),
                                  ("--max-tokens", "MAX_TOKENS", "tokens per update"),
                                  ("--seed", "SEED", "the seed of every run")):
        default = study[setting].value if setting in study else "1"
        parser.add_argument(option, help=f"{what} [the dataset's; {TASK.name}: {default}]")
    parser.add_argument("--fairseq-args", help="more fairseq-train options for every run, one "
                                               "quoted string (TRAIN_ARGS)")
    parser.add_argument("--output-dir", help="where the data, runs and results go (DEEPNET_WORK) "
                                             "[runs/DATASET]")
    parser.add_argument("--force", action="store_true", help="train finished runs again (RETRY=1)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the settings and the runs; run nothing")
    parser.add_argument("--repo", default=home(), help=argparse.SUPPRESS)
    return parser


def given_settings(args) -> dict:
    """{setting: (value, source)} of the options given: the sweep's inputs, as a config file's."""
    given = {}
    for option, settings in OPTIONS.items():
        value = getattr(args, option)
        if value is not None:
            for name in settings:
                given[name] = (value, f"deepnet-depth-study --{option.replace('_', '-')}")
    if args.output_dir:
        given["WORK"] = (os.path.abspath(args.output_dir), "deepnet-depth-study --output-dir")
    if args.force:
        given["RETRY"] = ("1", "deepnet-depth-study --force")
    return given


@one_line_os_errors
def main(argv=None) -> int:
    from .__main__ import _one_line_errors, run_step

    args = get_parser().parse_args(argv)
    given = given_settings(args)

    def steps() -> int:
        for step in ("prepare", "sweep"):
            code = run_step(args.dataset, step, args.repo, args.dry_run, given)
            if code:
                return code
        return 0

    return _one_line_errors("deepnet-depth-study", steps)


if __name__ == "__main__":
    sys.exit(main())
