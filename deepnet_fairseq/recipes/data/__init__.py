"""Preparing text and binaries, above the settings: the prepare step (prepare.py), cleaning
(clean.py), sentencepiece and encoding (corpus.py), the worker pool (workers.py) and whether
prepared data is the data of these settings (checks.py). Raw-text fetching and reading, which
the datasets' declarations use, sits below them in ``base/rawtext.py``."""
