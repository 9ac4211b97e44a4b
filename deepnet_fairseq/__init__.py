"""deepnet_fairseq: DeepNet (DeepNorm) Transformers for fairseq.

Load it with ``fairseq-train --user-dir <path of this package>`` (see the README): fairseq
imports the package, which then registers the plugin's models, architectures and tasks, and
lets torch >= 2.6 load fairseq checkpoints (``checkpoint_compat``).

Importing the package without fairseq loaded registers nothing and imports neither fairseq nor
torch, so that the pure modules (``constants``, ``methods``, the recipes' helpers) load in a
fraction of a second. Code that uses fairseq in the same process calls ``register()`` (our own
modules do, by importing ``deepnet_fairseq.models``).
"""

import importlib.abc
import importlib.util
import logging
import os
import sys
import warnings

THIRD_PARTY_WARNINGS = (
    # (category, message, module: regular expressions matched from their start) of what the
    # plugin's dependencies warn about their own use of their dependencies: nothing a user of
    # the plugin can act on. Silenced here, at import: the console scripts import this package
    # before fairseq, and fairseq imports it (its --user-dir) before it composes its config and
    # trains. Every other warning is left as it is. The test suite ignores the same
    # (tests/conftest.py).
    #
    # hydra 1.3, of fairseq 0.12's use of hydra 1.0's API, at every fairseq-train and
    # fairseq-generate start (about 20 lines)
    (UserWarning, r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental", ""),
    (UserWarning, r"\s*The version_base parameter is not specified", ""),
    (UserWarning, r"In '[^']*'. Usage of deprecated keyword in package header", ""),
    (UserWarning, r"\s*'[^']*' is validated against ConfigStore schema with the same name", ""),
    (UserWarning, r"\s*The strict flag in the compose API is deprecated", ""),
    # torch, of fairseq's calls: its data loaders' pin_memory=True on a machine without a GPU,
    # its MultiheadAttention's padding and attention masks of two dtypes, its
    # torch.cuda.amp.autocast (fairseq_task.py)
    (UserWarning, r"'pin_memory' argument is set as true but no accelerator is found",
     r"torch\."),
    (UserWarning, r"Support for mismatched key_padding_mask and attn_mask is deprecated",
     r"torch\."),
    (FutureWarning, r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated", r"fairseq\."),
)
for _category, _message, _module in THIRD_PARTY_WARNINGS:
    warnings.filterwarnings("ignore", message=_message, category=_category, module=_module)
del _category, _message, _module

USER_DIR = os.path.dirname(os.path.abspath(__file__))
"""The path to pass as ``--user-dir`` for this copy of the package."""


def register() -> None:
    """Register the plugin with fairseq (idempotent: Python imports each module once)."""
    from . import data_threads, models, tasks  # noqa: F401  (their registrations)
    from .criterions import source_gain  # noqa: F401  (its registration)
    from .nn import fsdp, zero
    from .storage import checkpoint_compat
    from .storage.checkpoint_io import load_fairseq_checkpoints_weights_only

    load_fairseq_checkpoints_weights_only()
    checkpoint_compat.allow_broadcast_globals()  # a multi-process resume's state, weights-only
    zero.install()  # --zero-sharding os on torch's ZeroRedundancyOptimizer, not fairscale's OSS
    fsdp.install()  # --ddp-backend fully_sharded on torch's FSDP2, not fairscale's FSDP
    data_threads.install()  # a run that ends mid-epoch exits cleanly (no abort at exit)


def load(checkpoint: str, data=None, sentencepiece_model=None, pieces=False, verbose=False,
         **overrides):
    """fairseq's hub interface for a checkpoint of this plugin: ``load(path).translate(text)``
    (``hub.load``: what it takes and refuses; the data directory and the sentencepiece model
    found from the checkpoint)."""
    from .hub import load as hub_load

    return hub_load(checkpoint, data, sentencepiece_model, pieces, verbose, **overrides)


class _KeepTheRootLogger(importlib.abc.MetaPathFinder):
    """Importing fairseq configures the root logger: one of its modules calls
    ``logging.basicConfig(level=DEBUG)`` at import (fairseq/models/wav2vec/
    wav2vec2_classification.py), so that every INFO and DEBUG line of every library (fairseq's
    model loading, hydra's config composition) went to stderr in any program that imported the
    plugin and then fairseq: the Python API, the console scripts, the recipes. Imported after
    this package, fairseq leaves the root logger as it found it (level and handlers); its own
    loggers are shown as the program configures logging (``load(..., verbose=True)`` shows
    them). Where fairseq is the program (fairseq-train, fairseq-generate),
    it is imported first and configures logging as it always has."""

    def find_spec(self, name, path=None, target=None):
        if name != "fairseq":
            return None
        sys.meta_path.remove(self)  # one import of the package: the finders after us find it
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_keeping_the_root_logger(module):
            root = logging.getLogger()
            level, handlers = root.level, list(root.handlers)
            try:
                exec_module(module)
            finally:
                root.setLevel(level)
                root.handlers[:] = handlers

        spec.loader.exec_module = exec_keeping_the_root_logger
        return spec


if "fairseq" in sys.modules:  # loaded as fairseq's --user-dir, or after fairseq
    register()
elif not any(isinstance(finder, _KeepTheRootLogger) for finder in sys.meta_path):
    sys.meta_path.insert(0, _KeepTheRootLogger())
