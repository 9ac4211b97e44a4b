"""matplotlib for every plot of the package (recipes and diagnostics): one place that picks the
non-interactive backend and keeps matplotlib's start-up logging quiet. Light to import (no
torch), so that the report tools stay quick."""

import logging
import sys


def pyplot():
    """matplotlib's pyplot on the non-interactive Agg backend, with a clear error if missing."""
    # fairseq sets the root logger to DEBUG when it is imported (fairseq 0.12's
    # wav2vec2_classification calls logging.basicConfig(level=DEBUG)), and matplotlib logs its
    # set-up at DEBUG as it is imported: quiet before the import, not after
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    try:
        import matplotlib
    except ImportError:
        sys.exit("error: matplotlib is needed for the plots: pip install matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
