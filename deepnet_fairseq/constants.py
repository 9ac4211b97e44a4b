"""Every depth-dependent DeepNorm constant, in the form of the paper.

Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers" (arXiv 2203.00555),
Figure 2 / Section 4. Each sub-layer computes ``LayerNorm(alpha * x + G(x))`` and the
weights of ``G`` (ffn, v_proj, out_proj) start from Xavier-normal with gain ``beta``:

Figure 2's formulas (``FIGURE_2``) and their values at the reference depths are printed by
``python -m deepnet_fairseq.constants``; docs/design.md shows that output, and the docs test
keeps it current. tests/unit/test_constants.py pins every row against values written by hand.
N is the number of encoder layers and M the number of decoder layers.

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


RECORD = "deepnorm_constants"
"""Name of the buffer in which each DeepNorm layer records the (alpha, beta) it was built with
(checkpoints keep it; averaging requires it equal across inputs)."""


# The paper's Figure 2 as printed (architecture, encoder alpha, encoder beta, decoder alpha,
# decoder beta); encoder_decoder, encoder_only and decoder_only below compute these formulas.
FIGURE_2 = (
    ("encoder-decoder (NMT)", "0.81 (N^4 M)^(1/16)", "0.87 (N^4 M)^(-1/16)", "(3M)^(1/4)",
     "(12M)^(-1/4)"),
    ("encoder-only (BERT)", "(2N)^(1/4)", "(8N)^(-1/4)", "-", "-"),
    ("decoder-only (GPT)", "-", "-", "(2M)^(1/4)", "(8M)^(-1/4)"),
)
REFERENCE_DEPTHS = ((6, 6), (18, 18), (50, 50), (100, 100), (200, 200), (500, 500), (18, 6))


def markdown_table() -> str:
    """Figure 2 and the encoder-decoder values at REFERENCE_DEPTHS, as docs/design.md shows
    them."""
    head = "| architecture | encoder alpha | encoder beta | decoder alpha | decoder beta |"
    rows = [head, "|---|---|---|---|---|", *("| " + " | ".join(row) + " |" for row in FIGURE_2),
            "", "| N-M | alpha_e | beta_e | alpha_d | beta_d |", "|---|---|---|---|---|"]
    for n, m in REFERENCE_DEPTHS:
        c = encoder_decoder(n, m)
        rows.append(f"| {n}-{m} | {c.encoder_alpha:.4f} | {c.encoder_beta:.4f} | "
                    f"{c.decoder_alpha:.4f} | {c.decoder_beta:.4f} |")
    return "\n".join(rows) + "\n"


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


# --------------------------------------------------------------------------------------------
# Optimizer-aware DeepNorm constants (beyond the paper).
#
# Seed analysis: Su Jianlin, "What is so hard about training a 1000-layer Transformer?"
# (kexue.fm/archives/8978, 2022). We write down the assumptions we use and our extension to
# encoder-decoder models; the formulas below are pinned by tests/unit/test_methods.py.
#
# Assumptions, for a Post-LN stack of L sub-layers x <- LN(alpha x + F(x)) whose branch F has
# weights drawn with Xavier gain lambda:
#   A1. alpha >> |F|, so the LN divides by about alpha and sub-layer l adds F_l / alpha to the
#       stack's output: a change dF_l of one branch moves the output by about dF_l / alpha.
#   A2. F is (locally) linear in each of its weight matrices, the others being of scale
#       lambda, so a weight change dtheta changes F by about lambda * dtheta, and the gradient
#       reaching a weight is about lambda / alpha times the output gradient.
#   A3. The L sub-layers' updates add up in the worst case (they are aligned), so the model
#       update is about L * dF / alpha, which must be O(eta) whatever the depth.
#   A4. Per optimizer, one step changes a weight by: SGD eta * grad (about eta lambda/alpha);
#       Adam about eta (element-wise normalised); LAMB-like eta * |theta| (about eta lambda,
#       layer-wise trust ratio).
# Hence the depth condition L * lambda^2 / alpha^2 = 1 (SGD), L * lambda / alpha = 1 (Adam),
# L * lambda^2 / alpha = 1 (LAMB). Each leaves one degree of freedom; Su closes it with
# alpha * lambda = 1 for SGD and Adam (a branch of scale lambda against a skip path of scale
# alpha, as DeepNorm's own constants do up to a factor) and alpha = 1 for LAMB, giving
#   SGD   alpha = L^(1/4),  lambda = L^(-1/4)
#   Adam  alpha = L^(1/2),  lambda = L^(-1/2)
#   LAMB  alpha = 1,        lambda = L^(-1/2)
# with L = 2N for an N-block encoder-only or decoder-only stack (Su's "2N sub-layers").
# Pre-LN form (x <- x + F(LN(x)), final LN): there is no alpha; the final LN divides the sum by
# its standard deviation, which stays about 1 when lambda is small, so A1 holds with alpha = 1
# and the same conditions give lambda = L^(-1/2) (SGD), L^(-1) (Adam), L^(-1/2) (LAMB).
#
# Our encoder-decoder extension (a choice; the paper couples the encoder's constants to M
# through the cross-attention, we do not): each stack uses its own number of sub-layers,
# L = 2N for the encoder (self-attention, FFN) and L = 3M for the decoder (self-attention,
# cross-attention, FFN). This matches the paper's own decoder, whose alpha = (3M)^(1/4) is the
# SGD form with L = 3M (its beta (12M)^(-1/4) differs from L^(-1/4) by a constant factor).
# --------------------------------------------------------------------------------------------

CONSTANT_FORMS = ("paper", "sgd", "adam", "lamb", "pre_ln_sgd", "pre_ln_adam", "pre_ln_lamb")
"""Values of --deepnorm-constants: the paper's Figure 2, or an optimizer-aware form."""

# optimizer -> (alpha exponent, lambda exponent) of L, for the Post-LN forms
_POST_LN_EXPONENTS = {"sgd": (1 / 4, -1 / 4), "adam": (1 / 2, -1 / 2), "lamb": (0.0, -1 / 2)}
# optimizer -> lambda exponent of L, for the Pre-LN forms (alpha = 1)
_PRE_LN_EXPONENTS = {"sgd": -1 / 2, "adam": -1.0, "lamb": -1 / 2}


def is_pre_ln_form(form: str) -> bool:
    """Whether a --deepnorm-constants form is for Pre-LN layers (alpha = 1)."""
    return form.startswith("pre_ln_")


def optimizer_aware_stack(sublayers: int, form: str):
    """(alpha, lambda) of a stack of ``sublayers`` residual sub-layers for a non-paper form."""
    if not isinstance(sublayers, int) or sublayers <= 0:
        raise ValueError(f"the number of sub-layers must be positive, got {sublayers!r}")
    if is_pre_ln_form(form):
        return 1.0, float(sublayers) ** _PRE_LN_EXPONENTS[form[len("pre_ln_"):]]
    if form not in _POST_LN_EXPONENTS:
        raise ValueError(f"unknown --deepnorm-constants {form!r}; choose one of "
                         f"{', '.join(CONSTANT_FORMS)}")
    alpha_exp, lambda_exp = _POST_LN_EXPONENTS[form]
    return float(sublayers) ** alpha_exp, float(sublayers) ** lambda_exp


def encoder_decoder_for(encoder_layers: int, decoder_layers: int, form: str = "paper"
                        ) -> DeepNormConstants:
    """Encoder-decoder constants in the given form ("paper": ``encoder_decoder``)."""
    if form == "paper":
        return encoder_decoder(encoder_layers, decoder_layers)
    _check_depth("--encoder-layers", encoder_layers)
    _check_depth("--decoder-layers", decoder_layers)
    enc_alpha, enc_beta = optimizer_aware_stack(2 * encoder_layers, form)
    dec_alpha, dec_beta = optimizer_aware_stack(3 * decoder_layers, form)
    return DeepNormConstants(encoder_alpha=enc_alpha, encoder_beta=enc_beta,
                             decoder_alpha=dec_alpha, decoder_beta=dec_beta)


def deepnorm(encoder_layers: Optional[int], decoder_layers: Optional[int], form: str = "paper"
             ) -> DeepNormConstants:
    """The constants of a model with an N-layer encoder and/or an M-layer decoder (None: the
    model has no such stack): Figure 2's row for that kind of model, or for an encoder-decoder
    model the optimizer-aware ``form``. The one entry point of the DeepNorm models."""
    if encoder_layers is not None and decoder_layers is not None:
        return encoder_decoder_for(encoder_layers, decoder_layers, form)
    if form != "paper":  # Su's forms are written for one stack, but not wired for one here
        raise ValueError(f"--deepnorm-constants {form} is defined for encoder-decoder models "
                         f"only; single-stack models use the paper's constants")
    if decoder_layers is None:
        return encoder_only(encoder_layers)
    return decoder_only(decoder_layers)


# --------------------------------------------------------------------------------------------
# Depth-dependent scales of the compared methods (docs/methods.md), each in its paper's form.
# --------------------------------------------------------------------------------------------


def ds_init_gain(layer_index: int, alpha: float = 1.0) -> float:
    """DS-Init (Zhang, Titov & Sennrich 2019, arXiv 1908.11365): the weights of layer l
    (1-based, counted per stack) are drawn from U(+-gamma * alpha / sqrt(l)) with gamma the
    Xavier bound sqrt(6 / (fan_in + fan_out)), i.e. Xavier-uniform with gain alpha / sqrt(l)."""
    _check_depth("layer index", layer_index)
    if not 0 < alpha <= 1:
        raise ValueError(f"--ds-init-alpha must be in (0, 1], got {alpha}")
    return alpha / layer_index ** 0.5


def t_fixup_scales(encoder_layers: int, decoder_layers: int):
    """T-Fixup (Huang et al. 2020, ICML): (encoder scale, decoder scale). The encoder's v, out,
    fc1, fc2 are scaled by 0.67 N^(-1/4); the decoder's (self- and cross-attention) and the
    input embeddings of both sides by (9M)^(-1/4)."""
    _check_depth("--encoder-layers", encoder_layers)
    _check_depth("--decoder-layers", decoder_layers)
    return 0.67 * encoder_layers ** (-1 / 4), (9 * decoder_layers) ** (-1 / 4)


def fixup_scale(residual_branches: int, branch_depth: int = 2) -> float:
    """Fixup (Zhang, Dauphin & Ma 2019, arXiv 1901.09321), rule 2: inside a residual branch of
    ``branch_depth`` weight layers, all but the last (which starts at zero) are scaled by
    L^(-1/(2m-2)), with L the number of residual branches."""
    _check_depth("number of residual branches", residual_branches)
    if branch_depth < 2:
        raise ValueError("Fixup's scaling needs branches of at least two weight layers")
    return residual_branches ** (-1 / (2 * branch_depth - 2))


# --------------------------------------------------------------------------------------------
# LayerNorm step multiplier (beyond the paper and Su; --deepnorm-ln-lr-multiplier).
#
# The paper's analysis, and Su's above, treat LayerNorm as parameter-free. It is not: a Post-LN
# sub-layer computes y = LN(alpha x + F(x)) = g * normalise(alpha x + F(x)) + b, and its gain g
# (starts at 1) and bias b (starts at 0) act on the output directly.
#   B1. A change dg, db of one sub-layer's LN moves its output y by about |dg| + |db| per
#       feature: no 1/alpha in front, unlike a branch weight (A1).
#   B2. The next sub-layer computes LN(alpha y + F(y)); its LN divides by about alpha, so the
#       change of y passes up the skip path almost unchanged (its mean and its component along
#       y are removed), and so on to the top of the stack.
#   B3. Backward, the same skip path carries the output gradient down almost unchanged, so the
#       gradient reaching g and b is about the output gradient (no lambda/alpha as in A2).
# With A3 the L LayerNorms' steps add up: an LN step s moves the output by about L * s, linear
# in depth whatever alpha and lambda are (measured: docs/findings.md). Per optimizer (A4, B3) one
# step moves an LN parameter, and so the output, by about
#   SGD  eta * |output grad|;   Adam  eta;   LAMB  eta * |theta| = eta
# (LAMB: |g| = 1; b starts at 0, where the trust ratio falls back to 1), while one step of a
# branch weight moves the output by (A1, A2, A4)
#   SGD  eta lambda^2/alpha^2 * |output grad|;   Adam  eta lambda/alpha;   LAMB  eta lambda^2/alpha.
# Multiplying the LN parameters' learning rate by the ratio of the two,
#   k = lambda^2 / alpha^2   (SGD; also the paper's constants, lambda = beta: its analysis is SGD's)
#   k = lambda / alpha       (Adam)
#   k = lambda^2 / alpha     (LAMB)
# makes every LN parameter move the output as much as one branch weight does, so the depth
# condition the constants impose on the weights (L * contribution = const) bounds the LN part
# too. For the optimizer-aware forms that condition makes k = 1/L exactly (L = 2N encoder,
# 3M decoder); for the paper's constants k = (0.87/0.81)^2 (N^4 M)^(-1/4) on the encoder and
# 1/(6M) on the decoder: 2.31 M^(-1/4) / L and 1/(2L), i.e. 1/L up to factors as the paper's
# constants are Su's SGD form up to factors (encoder 1.47/L at 6L-6L, 0.73/L at 100L-100L).
# Pre-LN (x + F(LN(x))): the LN sits inside the branch and its change reaches the output
# through the branch's weights, as a weight's does; only the final LN acts directly, once.
# Nothing adds up with depth: k = 1.
# --------------------------------------------------------------------------------------------

_LAYERNORM_MULTIPLIER = {
    "paper": lambda alpha, lam: (lam / alpha) ** 2,
    "sgd": lambda alpha, lam: (lam / alpha) ** 2,
    "adam": lambda alpha, lam: lam / alpha,
    "lamb": lambda alpha, lam: lam**2 / alpha,
}


def layernorm_lr_multiplier(alpha: float, lam: float, form: str = "paper") -> float:
    """Learning-rate multiplier of the LayerNorm gains and biases of a stack whose sub-layers use
    skip-path scale ``alpha`` and init gain ``lam`` (beta) in the --deepnorm-constants ``form``."""
    if form not in CONSTANT_FORMS:
        raise ValueError(f"unknown --deepnorm-constants {form!r}; choose one of "
                         f"{', '.join(CONSTANT_FORMS)}")
    if not (alpha > 0 and lam > 0):
        raise ValueError(f"alpha and beta must be positive, got {alpha} and {lam}")
    if is_pre_ln_form(form):
        return 1.0
    return _LAYERNORM_MULTIPLIER[form](alpha, lam)



def deepscalelm_scales(sublayers: int, k: float = 2.0):
    """DeepScaleLM (Kedia et al., ICML 2024, arXiv 2403.09635): (lambda, beta) of the residual
    ``lambda x + beta F(x)`` of a stack of ``sublayers`` residual sub-layers, with
    beta^2 = k / sublayers and lambda^2 + beta^2 = 1, so that the stream's second moment is
    preserved sub-layer by sub-layer. k = 2 gives the public code's default (beta^2 = 0.005,
    lambda^2 = 0.995 for its 192-layer, 384-sub-layer model). Choice for encoder-decoder (the
    code has no decoder): each stack counts its own sub-layers, 2N encoder and 3M decoder."""
    if not isinstance(sublayers, int) or sublayers <= k:
        raise ValueError(f"DeepScaleLM needs more than {k:g} residual sub-layers per stack "
                         f"(beta^2 = {k:g} / sub-layers < 1), got {sublayers!r}: use at least 2 "
                         f"encoder layers")
    beta_sq = k / sublayers
    return (1 - beta_sq) ** 0.5, beta_sq ** 0.5


DEEPSCALELM_INPUT_CORRELATION = 0.221
"""DeepScaleLM's token correlation of the input embeddings, before dropout: a constant its code
measured on its BERT pre-training data (r_0 = 0.221 (1 - p)); we keep it for translation."""


def deepscalelm_correlation_after(r: float, sublayer: str, dropout: float,
                                  lam: float, beta: float) -> float:
    """The token correlation of the stream after one residual sub-layer ``lambda x + beta F``:
    an attention's output tokens are averages of each other (correlation 1, dropout leaves
    1 - p); a ReLU FFN's follows the arc-cosine kernel of order 1; the sum mixes the two by
    the moments lambda^2 and beta^2."""
    import math

    if sublayer == "ffn":
        out = (1 - dropout) * (r + (math.sqrt(max(0.0, 1 - r * r)) - r * math.acos(r)) / math.pi)
    else:
        out = 1 - dropout
    return (lam ** 2 * r + beta ** 2 * out) / (lam ** 2 + beta ** 2)


def deepscalelm_gains(d: int, d_ffn: int, dropout: float, r: float):
    """Init variances of DeepScaleLM's moment-preserving initialisation (its code, ReLU FFN):
    q, k 1/d; fc1 and fc2 each sqrt(2 (1 - p) / (d d_ffn)), so that the FFN's output second
    moment is (1 - p) times its input's (their sqrt((1 - p)/2)/d at d_ffn = 4d); v and out_proj
    each sqrt((1 - p) / r) / d, r the token correlation at the sub-layer's input, which sets an
    attention's output moment (r times its input's for averaged tokens) to 1 - p."""
    return {"qk": 1 / d, "ffn": (2 * (1 - dropout) / (d * d_ffn)) ** 0.5,
            "vo": ((1 - dropout) / r) ** 0.5 / d}


# --------------------------------------------------------------------------------------------
# Depth transfer (beyond the paper; --depth-transfer, --depth-base): hyperparameter transfer
# across depth. The rules of CompleteP (Dey et al., NeurIPS 2025, arXiv 2505.01618, Table 1;
# EleutherAI/nanoGPT-mup, branch completep, model.py) and Depth-muP (Yang et al., ICLR 2024,
# arXiv 2310.02244; Bordelon et al., ICLR 2024, arXiv 2309.16620), written for Adam(W) as one
# table with the depth exponent a (a = 1: CompleteP, a = 1/2: Depth-muP). With
# m_L = L / L_base, L the stack's layers and L_base the depth the hyperparameters were tuned at:
#   residual branch            x + m_L^(-a) F(x)   (Post-LN: LN(x + m_L^(-a) F(x)))
#   learning rate, hidden       eta m_L^(a - 1)     (every parameter inside the stack's layers:
#                                                    weights, biases, LayerNorm gains and biases)
#   Adam epsilon, hidden        eps m_L^(-a)
#   embeddings, output, final LayerNorm: unchanged (learning rate and epsilon)
# Hidden init variance does not change with depth in either rule. The epsilon row follows the
# gradient: a hidden weight's gradient carries the branch multiplier m_L^(-a), so its epsilon
# must shrink as much for Adam's update to stay what the learning rate says (the reference code
# scales the one global epsilon, embeddings included, since commit 3784e18; before it epsilon
# was left alone). Each stack uses its own L (N encoder, M decoder layers) and the one L_base.
# --------------------------------------------------------------------------------------------

DEPTH_EXPONENTS = {"completep": 1.0, "depth_mup": 0.5}
"""--depth-transfer rule -> its depth exponent a (CompleteP's alpha; renamed here because
DeepNorm's alpha is another quantity)."""
DEPTH_TRANSFERS = ("none", *DEPTH_EXPONENTS)
"""Values of --depth-transfer."""


@dataclass(frozen=True)
class DepthTransfer:
    """Multipliers of one stack under a depth-transfer rule (all 1 for "none" or L = L_base)."""

    branch: float = 1.0     # of the residual branch F(x)
    hidden_lr: float = 1.0  # of the learning rate of the stack's layers' parameters
    hidden_eps: float = 1.0  # of Adam's epsilon for those parameters


def depth_transfer(rule: str, layers: int, base: Optional[int]) -> DepthTransfer:
    """The multipliers of a stack of ``layers`` layers grown from ``base`` by ``rule``."""
    if rule not in DEPTH_TRANSFERS:
        raise ValueError(f"unknown --depth-transfer {rule!r}; choose one of "
                         f"{', '.join(DEPTH_TRANSFERS)}")
    _check_depth("the number of layers", layers)
    if rule == "none":
        if base is not None:  # a base depth that nothing reads would be a silent no-op
            raise ValueError(f"--depth-base {base} is read only with --depth-transfer "
                             f"({' or '.join(DEPTH_EXPONENTS)}), which is not given: add "
                             "--depth-transfer, or drop --depth-base")
        return DepthTransfer()
    if isinstance(base, bool) or not isinstance(base, int) or base <= 0:
        raise ValueError(f"--depth-transfer {rule} needs --depth-base, the positive number of "
                         f"layers per side the hyperparameters were tuned at; got {base!r}")
    a = DEPTH_EXPONENTS[rule]
    m = layers / base
    return DepthTransfer(branch=m ** -a, hidden_lr=m ** (a - 1), hidden_eps=m ** -a)


if __name__ == "__main__":
    print(markdown_table(), end="")
