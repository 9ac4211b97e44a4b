"""The paper's constants: every row of docs/design.md's reference table and each formula."""

import pytest

from deepnet_fairseq import constants


# N, M, alpha_e, beta_e, alpha_d, beta_d (docs/design.md / the constants module docstring)
REFERENCE = [
    (6, 6, 1.4179, 0.4970, 2.0598, 0.3433),
    (18, 18, 1.9987, 0.3526, 2.7108, 0.2608),
    (50, 50, 2.7505, 0.2562, 3.4996, 0.2021),
    (100, 100, 3.4157, 0.2063, 4.1618, 0.1699),
    (200, 200, 4.2419, 0.1661, 4.9492, 0.1429),
    (500, 500, 5.6482, 0.1248, 6.2233, 0.1136),
    (18, 6, 1.8661, 0.3776, 2.0598, 0.3433),
]


@pytest.mark.parametrize("n,m,alpha_e,beta_e,alpha_d,beta_d", REFERENCE,
                         ids=[f"{r[0]}-{r[1]}" for r in REFERENCE])
def test_encoder_decoder_reference_row(n, m, alpha_e, beta_e, alpha_d, beta_d):
    c = constants.encoder_decoder(n, m)
    assert (round(c.encoder_alpha, 4), round(c.encoder_beta, 4)) == (alpha_e, beta_e)
    assert (round(c.decoder_alpha, 4), round(c.decoder_beta, 4)) == (alpha_d, beta_d)


def test_encoder_depends_on_both_depths_decoder_only_on_its_own():
    assert constants.encoder_decoder(18, 6).encoder_alpha != constants.encoder_decoder(18, 18).encoder_alpha
    assert constants.encoder_decoder(6, 18).decoder_alpha == constants.encoder_decoder(18, 18).decoder_alpha


@pytest.mark.parametrize("n", [1, 6, 24, 1000])
def test_encoder_only(n):
    c = constants.encoder_only(n)
    assert c.encoder_alpha == pytest.approx((2 * n) ** 0.25)
    assert c.encoder_beta == pytest.approx((8 * n) ** -0.25)
    assert c.decoder_alpha is None and c.decoder_beta is None


@pytest.mark.parametrize("m", [1, 6, 24, 1000])
def test_decoder_only(m):
    c = constants.decoder_only(m)
    assert c.decoder_alpha == pytest.approx((2 * m) ** 0.25)
    assert c.decoder_beta == pytest.approx((8 * m) ** -0.25)
    assert c.encoder_alpha is None and c.encoder_beta is None


@pytest.mark.parametrize("n,m", [(0, 6), (6, 0), (-1, 6), (6, 2.5), (True, 6)])
def test_non_positive_or_non_integer_depth_is_rejected(n, m):
    with pytest.raises(ValueError, match="positive number of layers"):
        constants.encoder_decoder(n, m)


def test_overrides_replace_only_what_is_given():
    base = constants.encoder_decoder(6, 6)
    c = base.with_overrides(encoder_alpha=1.0, decoder_beta=None)
    assert c.encoder_alpha == 1.0
    assert (c.encoder_beta, c.decoder_alpha, c.decoder_beta) == (
        base.encoder_beta, base.decoder_alpha, base.decoder_beta)


@pytest.mark.parametrize("value", [0.0, -0.5])
def test_non_positive_override_is_rejected(value):
    with pytest.raises(ValueError, match="--deepnorm-decoder-beta must be positive"):
        constants.encoder_decoder(6, 6).with_overrides(decoder_beta=value)


def _evaluate(formula, n, m):
    """A Figure 2 formula as printed ("0.81 (N^4 M)^(1/16)"), evaluated for N, M."""
    import re

    expression = re.sub(r"(\d|\)|[NM])\s*(\(|[NM])", r"\1*\2", formula.replace("^", "**"))
    return eval(expression, {"N": n, "M": m})  # noqa: S307 - our own table's formulas


@pytest.mark.parametrize("n, m", [(6, 6), (18, 6), (100, 200)])
def test_figure_2_as_printed_is_what_the_functions_compute(n, m):
    """The formulas shown in docs/design.md (constants.FIGURE_2) agree with the code."""
    computed = {
        "encoder-decoder (NMT)": constants.encoder_decoder(n, m),
        "encoder-only (BERT)": constants.encoder_only(n),
        "decoder-only (GPT)": constants.decoder_only(m),
    }
    for architecture, *formulas in constants.FIGURE_2:
        c = computed[architecture]
        values = (c.encoder_alpha, c.encoder_beta, c.decoder_alpha, c.decoder_beta)
        for formula, value in zip(formulas, values):
            if formula == "-":
                assert value is None
            else:
                assert _evaluate(formula, n, m) == pytest.approx(value, rel=1e-12), formula
