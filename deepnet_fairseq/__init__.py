"""deepnet_fairseq: DeepNet (DeepNorm) Transformers for fairseq.

Load it with ``fairseq-train --user-dir <path of this package>`` (see the README): fairseq
imports the package, which then registers the plugin's models, architectures and tasks, and
lets torch >= 2.6 load fairseq checkpoints (``checkpoint_compat``).

Importing the package without fairseq loaded registers nothing and imports neither fairseq nor
torch, so that the pure modules (``constants``, ``methods``, the recipes' helpers) load in a
fraction of a second. Code that uses fairseq in the same process calls ``register()`` (our own
modules do, by importing ``deepnet_fairseq.models``).
"""

import os
import sys
import warnings

# fairscale 0.4.13 (imported by fairseq for ZeRO sharding) warns at import about torch.cuda.amp
# decorators it uses: nothing a user of this plugin can act on, so our console scripts, which
# import this package before fairseq, do not print it
warnings.filterwarnings("ignore", category=FutureWarning, module=r"fairscale(\.|$)")

USER_DIR = os.path.dirname(os.path.abspath(__file__))
"""The path to pass as ``--user-dir`` for this copy of the package."""


def register() -> None:
    """Register the plugin with fairseq (idempotent: Python imports each module once)."""
    from . import models, tasks  # noqa: F401  (their registrations)
    from .storage import checkpoint_compat  # noqa: F401  (its registrations)
    from .storage.checkpoint_io import load_fairseq_checkpoints_weights_only

    load_fairseq_checkpoints_weights_only()


def load(checkpoint: str, data=None, sentencepiece_model=None, **overrides):
    """fairseq's hub interface for a checkpoint of this plugin: ``load(path).translate(text)``
    (``hub.load``: the data directory and the sentencepiece model found from the checkpoint)."""
    from .hub import load as hub_load

    return hub_load(checkpoint, data, sentencepiece_model, **overrides)


if "fairseq" in sys.modules:  # loaded as fairseq's --user-dir, or after fairseq
    register()
