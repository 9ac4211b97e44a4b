"""The ``deepnet_transformer`` model and its named architectures.

A fairseq ``TransformerModel`` (Post-LN) whose encoder and decoder layers are DeepNorm layers:
alpha and beta come from the actual depths at build time (``constants.encoder_decoder``) unless
overridden with ``--deepnorm-{encoder,decoder}-{alpha,beta}``. ``--deepnorm-constants`` selects
the optimizer-aware forms of ``constants.encoder_decoder_for`` instead of the paper's (the
``pre_ln_*`` forms build Pre-LN layers with alpha = 1).
"""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
)

from .. import constants, layernorm_lr, methods
from ..layers import DeepNormDecoderLayer, DeepNormEncoderLayer, wrap_for_training

_OVERRIDE_HELP = (
    "DeepNorm {what} of the {side}; default: the paper's formula for the actual "
    "--encoder-layers/--decoder-layers ({formula})"
)


@dataclass
class DeepNormConfig(FairseqDataclass):
    deepnorm_encoder_alpha: Optional[float] = field(
        default=None,
        metadata={"help": _OVERRIDE_HELP.format(
            what="skip-path scale alpha", side="encoder", formula="0.81 (N^4 M)^(1/16)")},
    )
    deepnorm_encoder_beta: Optional[float] = field(
        default=None,
        metadata={"help": _OVERRIDE_HELP.format(
            what="init gain beta", side="encoder", formula="0.87 (N^4 M)^(-1/16)")},
    )
    deepnorm_decoder_alpha: Optional[float] = field(
        default=None,
        metadata={"help": _OVERRIDE_HELP.format(
            what="skip-path scale alpha", side="decoder", formula="(3M)^(1/4)")},
    )
    deepnorm_decoder_beta: Optional[float] = field(
        default=None,
        metadata={"help": _OVERRIDE_HELP.format(
            what="init gain beta", side="decoder", formula="(12M)^(-1/4)")},
    )
    deepnorm_constants: ChoiceEnum(constants.CONSTANT_FORMS) = field(
        default="paper",
        metadata={"help": "which constants to use: 'paper' (Figure 2 of Wang et al. 2022), or the "
                  "optimizer-aware forms of Su (2022) extended to encoder-decoder by this plugin "
                  "('sgd', 'adam', 'lamb'; 'pre_ln_sgd', 'pre_ln_adam', 'pre_ln_lamb' build "
                  "Pre-LN layers with alpha = 1); see deepnet_fairseq/constants.py"},
    )
    deepnorm_ln_lr_multiplier: Optional[str] = field(
        default=None, metadata={"help": layernorm_lr.HELP})


_OVERRIDABLE = ("encoder_alpha", "encoder_beta", "decoder_alpha", "decoder_beta")


def deepnorm_constants(cfg) -> constants.DeepNormConstants:
    """The constants a model built from ``cfg`` (flat args or ``TransformerConfig``) uses."""
    if isinstance(cfg, TransformerConfig):
        encoder_layers, decoder_layers = cfg.encoder.layers, cfg.decoder.layers
    else:
        encoder_layers, decoder_layers = cfg.encoder_layers, cfg.decoder_layers
    overrides = {name: getattr(cfg, f"deepnorm_{name}", None) for name in _OVERRIDABLE}
    form = getattr(cfg, "deepnorm_constants", None) or "paper"
    return constants.encoder_decoder_for(encoder_layers, decoder_layers, form).with_overrides(
        **overrides)


class DeepNetEncoder(TransformerEncoderBase):
    def build_encoder_layer(self, cfg):
        c = deepnorm_constants(cfg)
        layer = DeepNormEncoderLayer(
            cfg, alpha=c.encoder_alpha, beta=c.encoder_beta, return_fc=self.return_fc
        )
        return wrap_for_training(layer, cfg)


class DeepNetDecoder(TransformerDecoderBase):
    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        c = deepnorm_constants(cfg)
        layer = DeepNormDecoderLayer(
            cfg, alpha=c.decoder_alpha, beta=c.decoder_beta, no_encoder_attn=no_encoder_attn
        )
        return wrap_for_training(layer, cfg)


@register_model("deepnet_transformer")
class DeepNetTransformerModel(TransformerModel):
    """Post-LN Transformer with DeepNorm (Wang et al. 2022, arXiv 2203.00555)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        gen_parser_from_dataclass(parser, DeepNormConfig(), delete_default=True)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return DeepNetEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return DeepNetDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)

    @classmethod
    def build_model(cls, args, task):
        model = super().build_model(args, task)
        layernorm_lr.tag_model(model, layernorm_lr.stack_multipliers(
            getattr(args, "deepnorm_ln_lr_multiplier", None), deepnorm_constants(args),
            getattr(args, "deepnorm_constants", None) or "paper"))
        return model


def _validate(args) -> None:
    """Reject settings DeepNorm is not defined for, while fairseq parses the arguments
    (the arch hook runs there), so that a bad run stops before it writes anything."""
    form = args.deepnorm_constants
    # the form's declaration says its LayerNorm placement: Post-LN, or Pre-LN (set here) for the
    # pre_ln_* forms; this hook also runs again when fairseq rebuilds a model from a checkpoint
    methods.get("deepnet" if form == "paper" else f"deepnet_{form}").set_layer_norm_placement(args)
    if constants.is_pre_ln_form(form):
        for side in ("encoder", "decoder"):
            if getattr(args, f"deepnorm_{side}_alpha", None) not in (None, 1.0):
                raise ValueError(f"--deepnorm-{side}-alpha cannot be used with "
                                 f"--deepnorm-constants {form}: Pre-LN has no skip-path scale")
    deepnorm_constants(args)  # raises on non-positive depths or alpha/beta overrides
    layernorm_lr.validate(args)


@register_model_architecture("deepnet_transformer", "deepnet_transformer")
def deepnet_base_architecture(args):
    """Base size (512 hidden, 2048 FFN, 8 heads); depth from --encoder/--decoder-layers."""
    for name in _OVERRIDABLE:
        setattr(args, f"deepnorm_{name}", getattr(args, f"deepnorm_{name}", None))
    args.deepnorm_constants = getattr(args, "deepnorm_constants", None) or "paper"
    args.deepnorm_ln_lr_multiplier = getattr(args, "deepnorm_ln_lr_multiplier", None)
    base_architecture(args)
    _validate(args)


@register_model_architecture("deepnet_transformer", "deepnet_transformer_iwslt_de_en")
def deepnet_iwslt_architecture(args):
    """IWSLT size, as fairseq's transformer_iwslt_de_en: 512 hidden, 1024 FFN, 4 heads."""
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 1024)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 1024)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    deepnet_base_architecture(args)


@register_model_architecture("deepnet_transformer", "deepnet_transformer_tiny")
def deepnet_tiny_architecture(args):
    """``methods.TINY_SIZE``: 64 hidden, 128 FFN, 2 heads, 2-2 layers (tests, debugging)."""
    methods.apply_tiny_size(args)
    deepnet_base_architecture(args)


# The depths of the paper's tables: deepnet_transformer_{N}_{M} is base size with N encoder
# and M decoder layers (the 1,000-layer model of Table 2 is 500_500).
NAMED_DEPTHS = ((6, 6), (12, 12), (18, 18), (50, 50), (100, 100), (200, 200), (250, 250), (500, 500))


def _depth_architecture(encoder_layers: int, decoder_layers: int):
    def architecture(args):
        args.encoder_layers = getattr(args, "encoder_layers", encoder_layers)
        args.decoder_layers = getattr(args, "decoder_layers", decoder_layers)
        deepnet_base_architecture(args)

    architecture.__doc__ = f"Base size, {encoder_layers}L encoder, {decoder_layers}L decoder."
    return architecture


for _n, _m in NAMED_DEPTHS:
    register_model_architecture("deepnet_transformer", f"deepnet_transformer_{_n}_{_m}")(
        _depth_architecture(_n, _m)
    )
