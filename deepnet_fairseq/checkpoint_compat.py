"""Let torch >= 2.6 load fairseq checkpoints, with its safe (weights-only) unpickler kept on.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True``, which refuses any class
outside an allowlist. fairseq 0.12 calls ``torch.load`` without that argument, and its
checkpoints of argparse-configured models (this plugin's, fairseq's ``transformer``) store the
model options as an ``argparse.Namespace`` inside ``cfg``, so ``fairseq-generate --path``,
``--restore-file`` resumes and checkpoint averaging fail with "Unsupported global: GLOBAL
argparse.Namespace". We add exactly that class to the allowlist; everything else in a fairseq
checkpoint (tensors, dicts, lists, numbers, strings, OrderedDict) is already allowed.
"""

import argparse

import torch

FAIRSEQ_CHECKPOINT_GLOBALS = (argparse.Namespace,)


def allow_fairseq_checkpoint_globals() -> None:
    """Register the classes fairseq checkpoints contain with torch's weights-only unpickler."""
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is not None:  # absent before torch 2.4, where loading is unrestricted
        add_safe_globals(list(FAIRSEQ_CHECKPOINT_GLOBALS))


allow_fairseq_checkpoint_globals()
