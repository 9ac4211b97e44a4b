"""Translate from Python with a checkpoint of this plugin, through fairseq's own hub interface.

    import deepnet_fairseq
    model = deepnet_fairseq.load("runs/quickstart/runs/deepnet-6L-6L/checkpoints/checkpoint_last.pt")
    print(model.translate("A man in an orange hat.", beam=5))

``load`` is fairseq's ``TransformerModel.from_pretrained`` (a ``GeneratorHubInterface``: it
applies sentencepiece, binarises with the model's dictionary, decodes with fairseq's
``SequenceGenerator`` and removes sentencepiece) with the plugin registered and its long
argument list filled in from the checkpoint: the data directory the model was trained on (its
dictionaries), and the sentencepiece model, the checkpoint's own ``--sentencepiece-model`` or,
for a run of the recipes, ``spm.model`` beside the data. Any of them can be given. The
checkpoint is read weights-only, whatever ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` says.
"""

import os
from typing import Optional


def _stored(checkpoint: str):
    """(data directory, sentencepiece model) the checkpoint was trained with (None if not)."""
    from .storage.checkpoint_io import read_checkpoint

    cfg = read_checkpoint(checkpoint, mmap=True).get("cfg") or {}
    task, bpe = cfg.get("task") or {}, cfg.get("bpe") or {}
    spm = bpe.get("sentencepiece_model") if bpe.get("_name") == "sentencepiece" else None
    return task.get("data"), spm


def load(checkpoint: str, data: Optional[str] = None, sentencepiece_model: Optional[str] = None,
         **overrides):
    """fairseq's hub interface for CHECKPOINT (``.translate(text)``, ``.generate``, ...).

    data: the fairseq-preprocess directory of the model's dictionaries [the checkpoint's];
    sentencepiece_model: [the checkpoint's, else ``spm.model`` beside the data directory, as
    the recipes write it; none found: text is taken as space-separated pieces];
    overrides: more options for fairseq's ``from_pretrained`` (e.g. ``beam=5``)."""
    from fairseq.models.transformer import TransformerModel

    from . import register

    register()
    if not os.path.isfile(checkpoint):
        raise FileNotFoundError(f"no checkpoint file {checkpoint}")
    stored_data, stored_spm = _stored(checkpoint)
    data = data or stored_data
    if not data or not os.path.isdir(data):
        raise FileNotFoundError(f"the data directory the model was trained on ({data}) is not "
                                f"there: pass data=DIR, its fairseq-preprocess output")
    beside = os.path.join(os.path.dirname(os.path.abspath(data)), "spm.model")
    spm = sentencepiece_model or stored_spm or (beside if os.path.isfile(beside) else None)
    pieces = {"bpe": "sentencepiece", "sentencepiece_model": spm} if spm else {}
    return TransformerModel.from_pretrained(
        os.path.dirname(os.path.abspath(checkpoint)),
        checkpoint_file=os.path.basename(checkpoint), data_name_or_path=os.path.abspath(data),
        **pieces, **overrides)
