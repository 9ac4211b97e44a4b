"""Every depth-dependent DeepNorm constant, in the form of the paper.

Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers" (arXiv 2203.00555),
Figure 2 / Section 4. Each sub-layer computes ``LayerNorm(alpha * x + G(x))`` and the
weights of ``G`` (ffn, v_proj, out_proj) start from Xavier-normal with gain ``beta``:

=======================  =======================  ======================  =============  ============
architecture             encoder alpha            encoder beta            decoder alpha  decoder beta
=======================  =======================  ======================  =============  ============
encoder-decoder (NMT)    0.81 (N^4 M)^(1/16)      0.87 (N^4 M)^(-1/16)    (3M)^(1/4)     (12M)^(-1/4)
encoder-only (BERT)      (2N)^(1/4)               (8N)^(-1/4)             -              -
decoder-only (GPT)       -                        -                       (2M)^(1/4)     (8M)^(-1/4)
=======================  =======================  ======================  =============  ============

N is the number of encoder layers and M the number of decoder layers. Reference values for
the encoder-decoder case (tests/test_constants.py pins every row):

=======  =======  ======  =======  ======
N-M      alpha_e  beta_e  alpha_d  beta_d
=======  =======  ======  =======  ======
6-6      1.4179   0.4970  2.0598   0.3433
18-18    1.9987   0.3526  2.7108   0.2608
50-50    2.7505   0.2562  3.4996   0.2021
100-100  3.4157   0.2063  4.1618   0.1699
200-200  4.2419   0.1661  4.9492   0.1429
500-500  5.6482   0.1248  6.2233   0.1136
18-6     1.8661   0.3776  2.0598   0.3433
=======  =======  ======  =======  ======

This module is pure (no torch, no fairseq) so that the formulas can be read and tested alone.
"""

import dataclasses
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class DeepNormConstants:
    """alpha (skip-path scale) and beta (init gain) of each side; None where a side is absent."""

    encoder_alpha: Optional[float] = None
    encoder_beta: Optional[float] = None
    decoder_alpha: Optional[float] = None
    decoder_beta: Optional[float] = None

    def with_overrides(self, **overrides: Optional[float]) -> "DeepNormConstants":
        """Replace the constants given explicitly (None keeps the formula's value)."""
        chosen = {name: value for name, value in overrides.items() if value is not None}
        for name, value in chosen.items():
            if not value > 0:
                flag = "--deepnorm-" + name.replace("_", "-")
                raise ValueError(
                    f"{flag} must be positive, got {value}. DeepNorm multiplies the skip path "
                    f"by alpha and uses beta as an init gain; omit {flag} to use the paper's value."
                )
        return dataclasses.replace(self, **chosen)


def _check_depth(name: str, layers: int) -> None:
    if isinstance(layers, bool) or not isinstance(layers, int) or layers <= 0:
        raise ValueError(
            f"{name} must be a positive number of layers, got {layers!r}: "
            f"DeepNorm's constants are defined from the depth of each stack."
        )


def encoder_decoder(encoder_layers: int, decoder_layers: int) -> DeepNormConstants:
    """Constants of an N-layer encoder and M-layer decoder (the paper's NMT setting)."""
    _check_depth("--encoder-layers", encoder_layers)
    _check_depth("--decoder-layers", decoder_layers)
    n, m = encoder_layers, decoder_layers
    return DeepNormConstants(
        encoder_alpha=0.81 * (n**4 * m) ** (1 / 16),
        encoder_beta=0.87 * (n**4 * m) ** (-1 / 16),
        decoder_alpha=(3 * m) ** (1 / 4),
        decoder_beta=(12 * m) ** (-1 / 4),
    )


def encoder_only(encoder_layers: int) -> DeepNormConstants:
    """Constants of an N-layer encoder-only model (BERT-style)."""
    _check_depth("--encoder-layers", encoder_layers)
    n = encoder_layers
    return DeepNormConstants(encoder_alpha=(2 * n) ** (1 / 4), encoder_beta=(8 * n) ** (-1 / 4))


def decoder_only(decoder_layers: int) -> DeepNormConstants:
    """Constants of an M-layer decoder-only model (GPT-style)."""
    _check_depth("--decoder-layers", decoder_layers)
    m = decoder_layers
    return DeepNormConstants(decoder_alpha=(2 * m) ** (1 / 4), decoder_beta=(8 * m) ** (-1 / 4))
