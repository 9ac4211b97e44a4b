"""The paper's published numbers the recipes' tables are compared with (Wang et al. 2022).

One place for them. Only numbers stated in the paper's text/tables as transcribed in
docs/methods.md are here; a cell the paper has but this file lacks is left blank in the
reports rather than guessed.
"""

from typing import Dict, List, NamedTuple, Optional


class Reference(NamedTuple):
    method: Optional[str]  # a deepnet_fairseq.methods name, or None for a row we do not implement
    encoder_layers: int
    decoder_layers: int
    bleu: Optional[float]  # None: "diverged"
    label: str  # how the paper names the row


PAPER: Dict[str, List[Reference]] = {
    # Table 1, WMT-17 En-De, BLEU (fairseq tokenized BLEU).
    "wmt17": [
        Reference("deepnet", 6, 6, 27.8, "DeepNet"),
        Reference("deepnet", 18, 18, 28.8, "DeepNet"),
        Reference("deepnet", 50, 50, 29.0, "DeepNet"),
        Reference("deepnet", 100, 100, 28.9, "DeepNet"),
        Reference("post_ln", 6, 6, 28.1, "Post-LN"),
        Reference("post_ln", 18, 18, None, "Post-LN"),
        Reference("post_ln", 50, 50, None, "Post-LN"),
        Reference("post_ln", 100, 100, None, "Post-LN"),
    ],
    # Table 2, OPUS-100, average BLEU over all directions (detokenised sacreBLEU).
    "opus100": [
        Reference(None, 24, 24, 27.7, "48L baseline"),
        Reference("deepnet", 100, 100, 31.1, "DeepNet 200L"),
        Reference("deepnet", 500, 500, 32.1, "DeepNet 1000L"),
    ],
    # Figure 6 (IWSLT-14 De-En) gives its BLEU only as a plot.
    "iwslt14": [],
}

NOTES: Dict[str, str] = {
    "wmt17": "Pre-LN: 27.0-28.1 across depths in the paper's Table 1 (per-depth values not "
             "transcribed here). Paper BLEU is fairseq's tokenized BLEU with compound splitting.",
    "opus100": "Paper numbers are averages over all 198 directions; the 1000L model trained 4 "
               "epochs.",
    "iwslt14": "Figure 6 gives BLEU as a plot only; no numbers to compare with.",
}


def lookup(dataset: str, method: str, encoder_layers: int, decoder_layers: int):
    """The paper's reference for this run, or None."""
    for ref in PAPER.get(dataset, []):
        if (ref.method, ref.encoder_layers, ref.decoder_layers) == (method, encoder_layers,
                                                                    decoder_layers):
            return ref
    return None
