"""The reproduction recipes' runtime (``scripts/<dataset>/``, one per declaration in
``datasets/``, and ``scripts/quickstart.sh``): ``python -m deepnet_fairseq.recipes DATASET
STEP`` (``__main__.py``), the quickstart (``quickstart.py``) and the depth study
(``depth_study.py``, ``deepnet-depth-study``: a sweep of the generated ``reverse_copy`` task). Nothing that fairseq loads
(``--user-dir``: models, architectures, tasks) imports this package. Its sub-packages, by
pipeline stage:

- ``datasets/``: the datasets' declarations;
- ``spec/``: the run spec (settings, presets, config files, setting errors);
- ``data/``: preparing text and binaries (prepare, raw text, cleaning, sentencepiece, workers);
- ``run/``: launching and running steps (launch layout, runner, run logs, memory plan, GPUs);
- ``evaluation/``: decoding and scoring (evaluate, score, distinct);
- ``reporting/``: tables, plots and pages (report, curves, lr_transfer, results_page, paper).

A run's verdict from fairseq's log is ``deepnet_fairseq/fairseq_log.py``'s, which the GPU
check shares. The helpers are small CLIs too: ``python -m
deepnet_fairseq.recipes.<stage>.<module> --help``.
"""

# the recipes' file writers are the plugin's (fileio), re-exported for the recipes' modules
from ..storage.fileio import atomic_open, save_png, write_atomically, write_json  # noqa: F401
