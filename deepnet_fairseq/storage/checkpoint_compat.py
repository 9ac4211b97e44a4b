"""Let torch >= 2.6 load fairseq checkpoints, with its safe (weights-only) unpickler kept on.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True``, which refuses any class
outside an allowlist. fairseq 0.12 calls ``torch.load`` without that argument, and its
checkpoints of argparse-configured models (this plugin's, fairseq's ``transformer``) store the
model options as an ``argparse.Namespace`` inside ``cfg``, so ``fairseq-generate --path``,
``--restore-file`` resumes and checkpoint averaging fail with "Unsupported global: GLOBAL
argparse.Namespace". We add exactly that class to the allowlist, plus what numpy needs to
rebuild a numeric array: a run trained with ``--eval-bleu`` (fairseq's translation example)
keeps its BLEU n-gram counts as numpy arrays in the checkpoint's saved metrics, which would
otherwise fail with "Unsupported global: GLOBAL numpy._core.multiarray._reconstruct". Arrays of
numbers only: object arrays still need a class the list does not have. Everything else in a
fairseq checkpoint (tensors, dicts, lists, numbers, strings, OrderedDict) is already allowed.

**Multi-process resume.** With several data-parallel processes, fairseq reads the checkpoint
file on rank 0 only (``Trainer.load_checkpoint``), turns its ``cfg`` into an OmegaConf
``DictConfig`` (``checkpoint_utils.load_checkpoint_to_cpu``) and sends the state to the other
ranks with ``distributed.utils.broadcast_object``: the tensors by ``broadcast``, the rest as a
``torch.save`` buffer that each receiving rank reads back with ``torch.load`` -- weights-only
too, so rank 1 dies with "Unsupported global: GLOBAL omegaconf.dictconfig.DictConfig".

Decision: the receiving ranks keep the weights-only unpickler, and only while fairseq unpickles
such a broadcast buffer (``_broadcast_object_slow``, the one function that does) a fixed,
short list of classes is allowed in addition: ``broadcast_globals()``, found by listing the
globals of the pickle of a real broadcast state (``torch.serialization.
get_unsafe_globals_in_checkpoint``; ``tests/slow/test_distributed.py`` checks the list against one).
They are OmegaConf's own container and node classes with their metadata, the ``typing.Any``
and builtin types that metadata names, ``collections.defaultdict`` (OmegaConf's resolver
cache) and fairseq's ``_TensorPlaceholder`` (the index of a tensor sent separately). None of
them runs code of the data's choosing when unpickled: their ``__setstate__`` stores values,
and the values go through the same restricted unpickler. What they carry was read on rank 0
from the checkpoint file by the weights-only unpickler (only ``argparse.Namespace`` added), so
a checkpoint file can inject nothing through the broadcast that it could not inject into rank
0 directly. We chose this over ``weights_only=False`` for the buffer, which would also have
worked (the sender is rank 0 of the same job, a peer fairseq already trusts), because the
allowlist keeps a full unpickler off the network path. Checkpoint files themselves are never
read with the extra classes.

If a checkpoint brings something else into the broadcast state (e.g. an old argparse-only
checkpoint that fairseq upgrades to a typed config), the receiving rank fails with torch's
"Unsupported global" error naming the class; ``--load-checkpoint-on-all-dp-ranks`` (fairseq's
own option: every rank reads the file itself, nothing is broadcast) is then the way round.
"""

import argparse
import collections
import functools
import typing

import numpy
import torch

# The dtypes of numeric arrays (numpy >= 1.25 pickles a dtype as an instance of its own class).
NUMERIC_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                  "uint64", "float16", "float32", "float64")


def fairseq_checkpoint_globals() -> list:
    """The classes a fairseq checkpoint file may contain beyond torch's default allowlist."""
    # numpy pickles an array as a call of its reconstruct function, whose module moved in
    # numpy 2 (numpy.core -> numpy._core): ask the installed numpy which one it uses
    reconstruct = numpy.zeros(1).__reduce__()[0]
    dtype_classes = {type(numpy.dtype(name)) for name in NUMERIC_DTYPES}
    return [argparse.Namespace, reconstruct, numpy.ndarray, numpy.dtype, *dtype_classes]


def allow_fairseq_checkpoint_globals() -> None:
    """Register the classes fairseq checkpoints contain with torch's weights-only unpickler."""
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is not None:  # absent before torch 2.4, where loading is unrestricted
        add_safe_globals(fairseq_checkpoint_globals())


def broadcast_globals() -> list:
    """The classes allowed, in addition, in a state rank 0 broadcasts (see the module doc)."""
    from fairseq.distributed.utils import _TensorPlaceholder
    from omegaconf.base import ContainerMetadata, Metadata
    from omegaconf.dictconfig import DictConfig
    from omegaconf.listconfig import ListConfig
    from omegaconf.nodes import AnyNode

    return [DictConfig, ListConfig, ContainerMetadata, Metadata, AnyNode,
            typing.Any, dict, list, int,  # the key / element / object types in that metadata
            collections.defaultdict, _TensorPlaceholder]


def allow_broadcast_globals() -> bool:
    """Wrap fairseq's ``_broadcast_object_slow`` so that it unpickles rank 0's buffer with
    ``broadcast_globals()`` allowed, for the duration of the call only. Idempotent; False when
    there is nothing to patch (torch without ``safe_globals``, where loading is unrestricted)."""
    from fairseq.distributed import utils as distributed_utils

    if not hasattr(torch.serialization, "safe_globals"):
        return False
    original = distributed_utils._broadcast_object_slow
    if getattr(original, "_deepnet_allowlisted", False):
        return True

    @functools.wraps(original)
    def broadcast_object_slow(*args, **kwargs):
        with torch.serialization.safe_globals(broadcast_globals()):
            return original(*args, **kwargs)

    broadcast_object_slow._deepnet_allowlisted = True
    # broadcast_object and broadcast_tensors look this name up in their module at each call
    distributed_utils._broadcast_object_slow = broadcast_object_slow
    return True


# at import: every reader of a checkpoint file needs the allowlist. The broadcast's wrapper is
# installed by register() (fairseq's own training, where several processes resume): a tool
# that only reads checkpoints (averaging, export) does not import fairseq's distributed code
# for it, which is most of fairseq and three seconds of its start.
allow_fairseq_checkpoint_globals()
