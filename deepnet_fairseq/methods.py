"""The training methods, one declaration each: everything that defines a method lives in its
``Method`` below, and the rest of the plugin derives from it: the fairseq models and
architectures (``models.method_transformers``), the names the recipes and diagnostics accept
(METHOD=<name>, ``--methods``), the training settings the recipes use, and the methods table of
docs/methods.md (``python -m deepnet_fairseq.methods --markdown``).

This module is pure (no torch, no fairseq): it is data. A method's layer rule (its residual and
init, in code) is named by ``Method.layers`` and lives in ``method_layers``; adding a method is
one declaration here (or ``models.method_transformers.register_method`` from your own user
dir) plus its layer rule and its tests: docs/methods.md shows a complete example.

    python -m deepnet_fairseq.methods                      # list the methods
    python -m deepnet_fairseq.methods deepnet 18 18        # print its fairseq-train options
    python -m deepnet_fairseq.methods --markdown           # the methods table of the docs
"""

import argparse
import shlex
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

from . import constants

LAYER_NORM_PLACEMENTS = ("post", "pre", "none")
# The groups of the results tables, in the paper's order (Table 1: Post-LN, No-LN, Pre-LN, then
# DeepNet), and the methods published after it.
FAMILIES = ("Post-LN", "No-LN", "Pre-LN", "DeepNet", "after 2022")


@dataclass(frozen=True)
class ModelOption:
    """A method's own fairseq-train option, e.g. DS-Init's ``--ds-init-alpha``: a ``kind``
    (float or str), one of ``choices`` where given; a default of None means "not given"."""

    name: str  # the attribute name; the flag is --name-with-dashes
    default: Union[float, str, None]
    help: str
    kind: type = float
    choices: Tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


DEPTH_TRANSFER_OPTIONS = (
    ModelOption(
        "depth_transfer", "none", "hyperparameter transfer across depth, for any method: "
        "'completep' (Dey et al. 2025) or 'depth_mup' (Yang et al. 2024) multiplies each "
        "residual branch by m^-a, the learning rate of the layers' parameters by m^(a-1) and "
        "their Adam epsilon by m^-a, with m = layers / --depth-base, a = 1 (completep) or 1/2 "
        "(depth_mup); embeddings and output unchanged. Needs --optimizer adam. DeepNet takes "
        "its alpha and beta at --depth-base (the rule replaces DeepNorm's own depth scaling); "
        "see deepnet_fairseq/constants.py", kind=str, choices=constants.DEPTH_TRANSFERS),
    ModelOption(
        "depth_base", None, "with --depth-transfer: the number of layers per side the "
        "hyperparameters (learning rate, epsilon) were tuned at", kind=int),
    ModelOption(
        "layers_lr_multiplier", None, "learning-rate multiplier of every parameter of the "
        "layers; the embeddings, output projection and final LayerNorms keep --lr. A depth "
        "rule for the hidden weights alone: e.g. --lr tuned at 6L-6L and 0.5 at 18L-18L "
        "(results/deepnet-depth-diagnosis). Composes by product with --depth-transfer and "
        "--deepnorm-ln-lr-multiplier"),
)
"""Options every method's model has (``Method.all_model_options``)."""


@dataclass(frozen=True)
class Method:
    """One training method.

    name:        what recipes and diagnostics call it (METHOD=<name>, ``--methods <name>``).
    summary:     its rule in one line, for listings and the methods table.
    paper:       where it comes from.
    layer_norm:  the LayerNorm placement it is defined for: "post" (the --*-normalize-before
                 flags are rejected), "pre" (the arch hook sets them) or "none" (Post-LN layers
                 whose LayerNorms the rule removes; the flags are rejected).
    layers:      the name of its layer rule in ``method_layers`` (residual, init, and the
                 rule's own checks of the options); None for a method built by an existing
                 model (``model``).
    model:       the registered fairseq model that builds it; default ``<name>_transformer``, a
                 model of its own registered from ``layers``.
    arch:        its architecture; default ``<name>_transformer``.

    Three kinds of settings, by who reads them:

    model_options: options the method *adds* to fairseq-train (``--ds-init-alpha``, DeepNet's
                 ``--deepnorm-*``): registered on its model, with their defaults, for its rule
                 to read. Declared once here; they become the model's option dataclass.
    options:     existing fairseq-train options, with values, that *select* the method on
                 another method's arch (DeepNet's constant forms are ``deepnet_transformer``
                 plus ``--deepnorm-constants FORM``). A method with options registers no arch
                 of its own; one without registers ``arch`` and ``arch_tiny`` (``archs``).
    training:    not fairseq options: the recipes' settings its paper prescribes (NAME,
                 value), used unless the user sets NAME. A value "{OTHER}" is the resolved
                 value of the setting OTHER (T-Fixup's warmup from the peak lr).

    family:      its group in the results tables (``FAMILIES``); default: DeepNet for the
                 DeepNorm model, else from its LayerNorm placement.
    display:     its name in the results pages ("Post-LN"); default: ``name``.
    stack_state: what its layers pass to the later layers of their stack outside each layer's
                 forward (DLCL's layer aggregation), named in errors; such layers cannot be
                 activation-checkpointed or dropped (their rule is a ``method_layers.
                 StackState``), which the recipes' planning reads here, without torch.
    """

    name: str
    summary: str
    paper: str
    layer_norm: str
    layers: Optional[str] = None
    model: Optional[str] = None
    arch: Optional[str] = None
    options: Tuple[str, ...] = ()
    model_options: Tuple[ModelOption, ...] = ()
    training: Tuple[Tuple[str, str], ...] = ()
    family: Optional[str] = None
    display: Optional[str] = None
    stack_state: Optional[str] = None

    def __post_init__(self):
        if self.layer_norm not in LAYER_NORM_PLACEMENTS:
            raise ValueError(f"method {self.name}: layer_norm must be one of "
                             f"{LAYER_NORM_PLACEMENTS}, got {self.layer_norm!r}")
        if (self.layers is None) == (self.model is None):
            raise ValueError(f"method {self.name}: give exactly one of layers= (a layer rule of "
                             f"its own) or model= (an existing fairseq model)")
        # frozen dataclass: fill the derived defaults once, here
        if self.model is None:
            object.__setattr__(self, "model", f"{self.name}_transformer")
        if self.arch is None:
            object.__setattr__(self, "arch", f"{self.name}_transformer")
        if self.family is None:
            object.__setattr__(self, "family", "DeepNet" if self.model == "deepnet_transformer"
                               else {"post": "Post-LN", "pre": "Pre-LN",
                                     "none": "No-LN"}[self.layer_norm])
        if self.display is None:
            object.__setattr__(self, "display", self.name)
        if self.family not in FAMILIES:
            raise ValueError(f"method {self.name}: family must be one of {FAMILIES}")

    @property
    def all_model_options(self) -> Tuple[ModelOption, ...]:
        """The options its model registers: those every method has, then its own."""
        return DEPTH_TRANSFER_OPTIONS + self.model_options

    @property
    def archs(self) -> Tuple[str, ...]:
        """The architectures the plugin registers for it: ``arch`` and ``arch_tiny``, none for a
        method selected by ``options`` on another method's arch."""
        return () if self.options else (self.arch, f"{self.arch}_tiny")

    def set_layer_norm_placement(self, args, placement: Optional[str] = None) -> None:
        """Set on fairseq's ``args`` the LayerNorm placement this method is defined for (or
        ``placement``, where its rule reads it from the options), or reject the
        --*-normalize-before flags that contradict it. Idempotent: fairseq runs the arch hook
        again when it loads a checkpoint."""
        placement = placement or self.layer_norm
        for side in ("encoder", "decoder"):
            if placement == "pre":
                setattr(args, f"{side}_normalize_before", True)
            elif getattr(args, f"{side}_normalize_before", False):
                what = ("a Post-LN method" if placement == "post"
                        else "built without LayerNorm")
                raise ValueError(
                    f"--{side}-normalize-before cannot be used with --arch {args.arch}: "
                    f"{self.name} is {what}. Drop the flag, or choose a Pre-LN method: "
                    f"{', '.join(m.name for m in METHODS.values() if m.layer_norm == 'pre')} "
                    f"(python -m deepnet_fairseq.methods lists them with their options).")

    def train_args(self, encoder_layers: int, decoder_layers: int) -> List[str]:
        return ["--arch", self.arch, "--encoder-layers", str(encoder_layers),
                "--decoder-layers", str(decoder_layers), *self.options]


def _deepnet_form(form: str, summary: str) -> Method:
    return Method(f"deepnet_{form}", summary,
                  "this plugin, after Su (2022); deepnet_fairseq/constants.py",
                  "pre" if form.startswith("pre_ln_") else "post",
                  model="deepnet_transformer", arch="deepnet_transformer",
                  options=("--deepnorm-constants", form))


_DEPTH_TRANSFER_RULES = {
    "completep": ("CompleteP: branch and Adam eps x 6/L", "Dey et al. 2025 (CompleteP, arXiv "
                  "2505.01618; EleutherAI/nanoGPT-mup completep)"),
    "depth_mup": ("Depth-muP: branch, hidden lr and Adam eps x (6/L)^(1/2)", "Yang et al. 2024 "
                  "(Depth-muP, arXiv 2310.02244); Bordelon et al. 2024 (arXiv 2309.16620)"),
}


def _with_depth_transfer(base: str, what: str, rule: str) -> Method:
    """Method ``base`` grown from 6L-6L by a depth-transfer rule (the depth study's base)."""
    summary, paper = _DEPTH_TRANSFER_RULES[rule]
    model = "deepnet_transformer" if base == "deepnet" else f"{base}_transformer"
    return Method(f"{base}_{rule}", f"{what} + {summary}", paper,
                  "pre" if base == "pre_ln" else "post", model=model, arch=model,
                  options=("--depth-transfer", rule, "--depth-base", "6"))


_DEEPNORM_OVERRIDE = ("DeepNorm {what} of the {side}; default: the paper's formula (Figure 2) for "
                      "the actual depths ({formula})")
_DEEPNORM_OPTIONS = (
    ModelOption("deepnorm_encoder_alpha", None, _DEEPNORM_OVERRIDE.format(
        what="skip-path scale alpha", side="encoder",
        formula="encoder-decoder 0.81 (N^4 M)^(1/16), encoder-only (2N)^(1/4)")),
    ModelOption("deepnorm_encoder_beta", None, _DEEPNORM_OVERRIDE.format(
        what="init gain beta", side="encoder",
        formula="encoder-decoder 0.87 (N^4 M)^(-1/16), encoder-only (8N)^(-1/4)")),
    ModelOption("deepnorm_decoder_alpha", None, _DEEPNORM_OVERRIDE.format(
        what="skip-path scale alpha", side="decoder",
        formula="encoder-decoder (3M)^(1/4), decoder-only (2M)^(1/4)")),
    ModelOption("deepnorm_decoder_beta", None, _DEEPNORM_OVERRIDE.format(
        what="init gain beta", side="decoder",
        formula="encoder-decoder (12M)^(-1/4), decoder-only (8M)^(-1/4)")),
    ModelOption(
        "deepnorm_constants", "paper", "which constants to use: 'paper' (Figure 2 of Wang et "
        "al. 2022), or, for encoder-decoder models, the optimizer-aware forms of Su (2022) "
        "extended to encoder-decoder by this plugin ('sgd', 'adam', 'lamb'; 'pre_ln_sgd', "
        "'pre_ln_adam', 'pre_ln_lamb' build Pre-LN layers with alpha = 1); see "
        "deepnet_fairseq/constants.py", kind=str,
        choices=constants.CONSTANT_FORMS),
    ModelOption(
        "deepnorm_ln_lr_multiplier", None, "learning-rate multiplier of the LayerNorm gains and "
        "biases of every DeepNorm layer: 'auto' derives it per stack from the depths and "
        "--deepnorm-constants (Post-LN forms: 1/L with L = 2N encoder, 3M decoder; paper: "
        "beta^2/alpha^2, which is 1/(4N) for an N-layer encoder-only or decoder-only model; "
        "Pre-LN forms: 1), a number sets it; default: off. Applied to the optimizer's step of "
        "those parameters; see deepnet_fairseq/nn/layernorm_lr.py and constants.py", kind=str),
)

_DECLARED = (
    Method("deepnet", "LN(alpha x + G(x)); ffn/v/out Xavier-normal gain beta",
           "Wang et al. 2022 (DeepNet, arXiv 2203.00555)", "post", layers="DeepNorm",
           display="DeepNet",
           model_options=_DEEPNORM_OPTIONS),
    # fairseq's own layers (rule Standard, which changes nothing), as models of this plugin so
    # that they take every method's options (--depth-transfer)
    Method("post_ln", "LN(x + G(x)) (fairseq default)", "Vaswani et al. 2017", "post",
           layers="Standard", display="Post-LN"),
    Method("pre_ln", "x + G(LN(x)), final LN (fairseq --*-normalize-before)",
           "Vaswani et al. 2017 (tensor2tensor order)", "pre", layers="Standard",
           display="Pre-LN"),
    Method("ds_init", "LN(x + G(x)); layer l Xavier-uniform gain alpha/sqrt(l)",
           "Zhang, Titov & Sennrich 2019 (DS-Init, arXiv 1908.11365)", "post", layers="DSInit",
           display="DS-Init",
           model_options=(ModelOption(
               "ds_init_alpha", 1.0, "DS-Init's alpha in (0, 1]: layer l's weights are "
               "Xavier-uniform with gain alpha/sqrt(l) (Zhang et al. 2019); chosen default 1"),)),
    Method("admin", "LN(omega x + G(x)); omega_i = sqrt(sum_{j<i} Var y_j), profiled on batch 1",
           "Liu et al. 2020 (Admin, arXiv 2004.08249)", "post", layers="Admin", display="Admin"),
    Method("rezero", "x + a G(x), a = 0 learnable, no LN", "Bachlechner et al. 2020 (ReZero, arXiv 2003.04887)",
           "none", layers="ReZero", display="ReZero"),
    Method("r_fixup", "x + m G(x), no LN; out/fc2 = 0, v/fc1 x L^(-1/2), m = 1 learnable",
           "Zhang, Dauphin & Ma 2019 (Fixup, arXiv 1901.09321)", "none", layers="RFixup",
           display="R-Fixup"),
    Method("t_fixup", "x + G(x), no LN; enc v/out/ffn x 0.67 N^(-1/4), dec and embeddings "
           "x (9M)^(-1/4)", "Huang et al. 2020 (T-Fixup, ICML)", "none", layers="TFixup",
           display="T-Fixup",
           # T-Fixup trains without learning-rate warmup: the "warmup" starts at the peak lr,
           # so the lr is constant until the inverse-sqrt decay, the same decay as every other
           # method's. (WARMUP=1 would be wrong: fairseq's inverse-sqrt then decays as
           # lr / sqrt(update) from the first update, 1/20 of the peak at update 400.)
           training=(("WARMUP_INIT_LR", "{LR}"),)),
    Method("dlcl", "Pre-LN; input of layer l+1 = sum_k W_lk LN(y_k), W learnable, starts at "
           "the mean", "Wang et al. 2019 (DLCL, arXiv 1906.01787)", "pre", layers="DLCL",
           display="DLCL", stack_state="DLCL's layer aggregation"),
    Method("normformer", "Pre-LN + head scales, LN after self-attention, LN inside FFN",
           "Shleifer et al. 2021 (NormFormer, arXiv 2110.09456)", "pre", layers="NormFormer",
           display="NormFormer"),
    Method("lipschitz", "LN(x + G(x)); weights U(+-1/sqrt(fan_in)), biases 0",
           "Xu et al. 2020 (arXiv 1911.03179)", "post", layers="Lipschitz",
           display="Lipschitz init"),
    # Optimizer-aware DeepNorm (beyond the paper; constants.py), L = 2N enc, 3M dec:
    _deepnet_form("sgd", "LN(alpha x + G(x)); alpha = L^(1/4), gain L^(-1/4)"),
    _deepnet_form("adam", "LN(alpha x + G(x)); alpha = L^(1/2), gain L^(-1/2)"),
    _deepnet_form("lamb", "LN(x + G(x)); gain L^(-1/2)"),
    _deepnet_form("pre_ln_sgd", "x + G(LN(x)); gain L^(-1/2)"),
    _deepnet_form("pre_ln_adam", "x + G(LN(x)); gain 1/L"),
    _deepnet_form("pre_ln_lamb", "x + G(LN(x)); gain L^(-1/2)"),
    # DeepNet whose LayerNorm gains/biases step k times slower, k from the depths and the form
    # (constants.layernorm_lr_multiplier; docs/methods.md), with the paper's and Adam's constants
    Method("deepnet_ln", "DeepNet; LayerNorm lr x beta^2/alpha^2 per stack",
           "this plugin (docs/findings.md)", "post", model="deepnet_transformer",
           arch="deepnet_transformer", options=("--deepnorm-ln-lr-multiplier", "auto")),
    Method("deepnet_adam_ln", "deepnet_adam; LayerNorm lr x 1/L (L = 2N enc, 3M dec)",
           "this plugin (docs/findings.md)", "post", model="deepnet_transformer",
           arch="deepnet_transformer",
           options=("--deepnorm-constants", "adam", "--deepnorm-ln-lr-multiplier", "auto")),
    # Depth transfer (beyond the paper; constants.py): the learning rate tuned at --depth-base
    # layers per side carries over to other depths. The study's base is 6L-6L (docs/methods.md).
    _with_depth_transfer("deepnet", "DeepNet (alpha, beta of 6L-6L)", "completep"),
    _with_depth_transfer("deepnet", "DeepNet (alpha, beta of 6L-6L)", "depth_mup"),
    _with_depth_transfer("pre_ln", "Pre-LN", "completep"),
    # The methods after DeepNet (2022 on). Those defined for decoder-only LMs (Peri-LN, Mix-LN,
    # LayerNorm Scaling, DyT) treat the decoder's cross-attention as one more sub-layer with
    # the same rule, and each stack (encoder, decoder) counts its own layers; docs/methods.md.
    Method("subln", "Pre-LN + LN before out_proj (self-attn) and before fc2; v/out/ffn x gamma, "
           "enc sqrt(ln 3M ln 2N / 3), dec sqrt(ln 3M)",
           "Wang et al. 2022 (Magneto, arXiv 2210.06423; microsoft/torchscale subln)", "pre",
           layers="SubLN", display="Sub-LN", family="after 2022"),
    # x + LN_out(F(LN_in(x))): the output LN is the addition to Pre-LN
    Method("peri_ln", "x + LN(G(LN(x))), final LN", "Kim et al. 2025 (Peri-LN, arXiv 2502.02732)",
           "pre", layers="PeriLN", display="Peri-LN", family="after 2022"),
    # x + F(LN(x) / sqrt(l)), l = 1..N in each stack
    Method("ln_scaling", "x + G(LN(x)/sqrt(l)), l the layer index, final LN",
           "Sun et al. 2025 (The Curse of Depth, arXiv 2502.05795)", "pre", layers="LNScaling",
           display="LayerNorm Scaling", family="after 2022"),
    # DyT(x) = weight * tanh(alpha x) + bias in place of every LayerNorm
    Method("dyt", "Pre-LN, every LN -> w tanh(a x) + b, a = 0.5 learnable",
           "Zhu et al. 2025 (DyT, arXiv 2503.10622; jiachenzhu/DyT)", "pre", layers="DyT",
           display="DyT", family="after 2022",
           model_options=(ModelOption(
               "dyt_alpha_init", 0.5, "DyT's alpha0, the start value of the learnable scalar "
               "in tanh(alpha x) (Zhu et al. 2025; 0.5 is the paper's default)"),)),
    # Post-LN below floor(alpha L), Pre-LN above, per stack
    Method("mix_ln", "LN(x + G(x)) in layers l <= floor(0.25 L), x + G(LN(x)) above, final LN",
           "Li et al. 2025 (Mix-LN, arXiv 2412.13795)", "pre", layers="MixLN", display="Mix-LN",
           family="after 2022",
           model_options=(ModelOption(
               "mix_ln_ratio", 0.25, "Mix-LN's alpha in [0, 1): the lowest floor(alpha L) "
               "layers of each stack are Post-LN, the rest Pre-LN (Li et al. 2025: 0.25)"),)),
    # lambda x + beta G(LN(x)), lambda^2 + beta^2 = 1, with a moment-preserving init
    Method("deepscalelm", "Pre-LN; lambda x + beta G(LN(x)), beta^2 = 2/(sub-layers), lambda^2 "
           "= 1 - beta^2; moment-preserving init", "Kedia et al. 2024 (DeepScaleLM, arXiv "
           "2403.09635; akhilkedia/TranformersGetStable)", "pre", layers="DeepScaleLM",
           display="DeepScaleLM",
           family="after 2022"),
    # last sub-layer: LN(h + G(h) + x), x the layer's input
    Method("b2t", "Post-LN; the layer input is added again before its last LN; weights x L^(-1/2)",
           "Takase et al. 2023 (B2T connection, arXiv 2206.00330; takase/b2t_connection)",
           "post", layers="B2T", display="B2T", family="after 2022"),
    # x <- LN(x + g), d <- d + g per sub-layer; the stack's output x + LN(d)
    Method("resi_dual", "Post-LN stream + dual stream d of the summed branches; out x + LN(d)",
           "Xie et al. 2023 (ResiDual, arXiv 2304.14802; microsoft/ResiDual)", "post",
           layers="ResiDual", display="ResiDual", stack_state="ResiDual's dual stream",
           family="after 2022"),
)

METHODS: Dict[str, Method] = {}
"""name -> Method: the declarations above, and any added with ``add``."""


def add(method: Method) -> Method:
    """Add a declaration to the registry (names are unique)."""
    if method.name in METHODS:
        raise ValueError(f"method {method.name!r} is already declared")
    METHODS[method.name] = method
    return method


for _method in _DECLARED:
    add(_method)


def get(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(
            f"unknown method {name!r}; choose one of: {', '.join(METHODS)}") from None


TINY_SIZE = {"encoder_embed_dim": 64, "encoder_ffn_embed_dim": 128, "encoder_attention_heads": 2,
             "decoder_attention_heads": 2, "encoder_layers": 2, "decoder_layers": 2}
"""The ``_tiny`` architectures' size (the paper's Figure 5 width, 64-128-2 heads; 2L-2L): every
method's tiny arch and the diagnostics read it here (the decoder's widths follow fairseq's
defaults from the encoder's)."""


def apply_tiny_size(args) -> None:
    """Set the tiny size on fairseq's ``args`` where not given (the ``_tiny`` arch hooks)."""
    for name, value in TINY_SIZE.items():
        setattr(args, name, getattr(args, name, value))


def tiny_width_args() -> List[str]:
    """fairseq-train options of the tiny width (depth not included)."""
    return [arg for name, value in TINY_SIZE.items() if not name.endswith("_layers")
            for arg in ("--" + name.replace("_", "-"), str(value))]


def markdown_table() -> str:
    """The methods table of docs/methods.md, derived from the declarations."""
    rows = ["| method | rule | LayerNorm | source | fairseq-train options |",
            "|---|---|---|---|---|"]
    for m in METHODS.values():
        options = shlex.join(["--arch", m.arch, *m.options])
        rows.append(f"| `{m.name}` | {m.summary} | {m.layer_norm} | {m.paper} | `{options}` |")
    return "\n".join(rows) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepnet_fairseq.methods", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("method", nargs="?", help="method name; omit to list them")
    parser.add_argument("encoder_layers", nargs="?", type=int, default=6,
                        help="encoder layers (default 6)")
    parser.add_argument("decoder_layers", nargs="?", type=int,
                        help="decoder layers (default: as many as the encoder)")
    parser.add_argument("--markdown", action="store_true", help="print the methods table")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown_table(), end="")
        return
    if args.method is None:
        width = max(map(len, METHODS))
        for name, method in METHODS.items():
            print(f"{name:{width}s} {method.summary} ({method.paper})")
        return
    try:
        method = get(args.method)
    except ValueError as err:
        parser.error(str(err))
    decoder_layers = args.encoder_layers if args.decoder_layers is None else args.decoder_layers
    print(shlex.join(method.train_args(args.encoder_layers, decoder_layers)))


if __name__ == "__main__":
    main()
