"""The paper's published numbers the recipes' tables are compared with (Wang et al. 2022).

The numbers themselves are in each dataset's declaration (``datasets/<name>.py``: its
``paper`` rows and ``note``); only numbers stated in the paper's text/tables as transcribed in
docs/methods.md are there.
"""

from ..datasets import DATASETS


def lookup(dataset: str, method: str, encoder_layers: int, decoder_layers: int):
    """The paper's reference for this run, or None (also for a dataset not declared)."""
    declared = DATASETS.get(dataset)
    for ref in declared.paper if declared else ():
        if (ref.method, ref.encoder_layers, ref.decoder_layers) == (method, encoder_layers,
                                                                    decoder_layers):
            return ref
    return None
