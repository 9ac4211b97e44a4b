"""The reproduction recipes' runtime (``scripts/<dataset>/``, one per declaration in
``datasets/``, and ``scripts/quickstart.sh``): ``python -m deepnet_fairseq.recipes DATASET
STEP`` (settings, launch layout, memory plan, runs), the quickstart, corpus cleaning, run
classification, scoring, multi-direction decoding and the result table / CSV / plot. The
helpers are small CLIs too: ``python -m deepnet_fairseq.recipes.<module> --help``. Nothing that
fairseq loads (``--user-dir``: models, architectures, tasks) imports this package; the depth
study (``diagnostics/depth_study.py``) classifies its runs with ``runlog``, as the sweeps do.
"""

# the recipes' file writers are the plugin's (fileio), re-exported for the recipes' modules
from ..storage.fileio import atomic_open, save_png, write_atomically, write_json  # noqa: F401
