"""The source-blind baseline of a binarised translation set: the loss of a model that ignores
its source and predicts each target token from the validation targets' unigram distribution.
A run that ends no better than it has learnt nothing from the source ("stalled": the depth
study and the recipes' report both mark it)."""

import math
import os
from collections import Counter


def unigram_baseline(data: str, src: str, tgt: str) -> float:
    """Entropy (bits per token, </s> included) of the validation targets' unigram distribution
    in the binarised directory ``data`` (fairseq-preprocess's valid.SRC-TGT.TGT)."""
    from fairseq.data import Dictionary, data_utils

    dictionary = Dictionary.load(os.path.join(data, f"dict.{tgt}.txt"))
    prefix = os.path.join(data, f"valid.{src}-{tgt}.{tgt}")
    dataset = data_utils.load_indexed_dataset(prefix, dictionary)
    if dataset is None:
        raise FileNotFoundError(f"no validation set {prefix}.{{bin,idx}} in {data}")
    counts = Counter()
    for i in range(len(dataset)):
        counts.update(dataset[i].tolist())
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values())
