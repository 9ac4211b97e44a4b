"""Preparing text and binaries: the prepare step (prepare.py), raw text fetching and reading
(rawtext.py), cleaning (clean.py), sentencepiece and encoding (corpus.py), the presets' tags
(provenance.py) and the worker pool (workers.py)."""
