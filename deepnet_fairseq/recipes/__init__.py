"""The reproduction recipes' runtime (``scripts/<dataset>/``, one per declaration in
``datasets/``, and ``scripts/quickstart.sh``): ``python -m deepnet_fairseq.recipes DATASET
STEP`` (``__main__.py``), the quickstart (``quickstart.py``) and the depth study
(``depth_study.py``, ``deepnet-depth-study``: a sweep of the generated ``reverse_copy`` task). Nothing that fairseq loads
(``--user-dir``: models, architectures, tasks) imports this package. Its sub-packages, by
pipeline stage, lowest first (each imports only the ones below it; ``tests/unit/test_layering.py``
checks it):

- ``base/``: setting errors, the presets' provenance tags, machine probes, console lines and the
  raw-text tools;
- ``datasets/``: the datasets' declarations;
- ``spec/``: the run spec (settings, presets, config files, run paths);
- ``data/``: preparing text and binaries (prepare, cleaning, sentencepiece, workers, data checks);
- ``run/``: training a run (layout, commands, TRAIN_ARGS policy, runner, run logs, memory plan);
- ``evaluation/``: the evaluate step, decoding and scoring (evaluate, score, distinct);
- ``reporting/``: tables, plots and pages (report, curves, lr_transfer, results_page, paper);
- ``pipeline/``: the public API (prepare, train, evaluate, sweep) and the sweep;
- entry points: ``__main__``, ``quickstart``, ``depth_study``.

A run's verdict from fairseq's log is ``deepnet_fairseq/fairseq_log.py``'s, which the GPU
check shares. The helpers are small CLIs too: ``python -m
deepnet_fairseq.recipes.<stage>.<module> --help``.
"""

import argparse

# the recipes' file writers are the plugin's (fileio), re-exported for the recipes' modules
from ..storage.fileio import atomic_open, save_png, write_atomically, write_json  # noqa: F401


def cli_parser(prog: str, description: str, **kwargs) -> argparse.ArgumentParser:
    """The parser of one of the recipes' command lines: its --help prints DESCRIPTION (the
    module's docstring) as written."""
    return argparse.ArgumentParser(prog=prog, description=description,
                                   formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
