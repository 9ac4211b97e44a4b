"""The compared methods as fairseq models and architectures, for encoder-decoder translation.

For each method ``m`` of ``method_layers`` this registers the model ``m_transformer`` and the
architectures ``m_transformer`` (base size: 512 hidden, 2048 FFN, 8 heads; depth from
``--encoder-layers`` / ``--decoder-layers``) and ``m_transformer_tiny`` (64 / 128 / 2, 2L-2L).
Post-LN and Pre-LN are fairseq's own ``transformer`` under this plugin's naming
(``post_ln_transformer``, ``pre_ln_transformer``, and ``_tiny``). Each arch hook sets the
LayerNorm placement the method is defined for and rejects what it is not defined for, while
fairseq parses the arguments, so that nothing is written to --save-dir.
"""

from dataclasses import dataclass, field, fields
from typing import Optional

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import MODEL_REGISTRY, register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
)

from .. import constants
from ..layers import wrap_for_training
from ..method_layers import LAYERS, DLCL, LayerAggregation, profile_admin_
from .deepnet_transformer import tiny_size

# --- stacks that build the method's layers -------------------------------------------------


def _attach_aggregation(stack, embed_dim: int) -> None:
    """DLCL: give the stack its layer aggregation and point every layer at it."""
    stack.layer_aggregation = LayerAggregation(len(stack.layers), embed_dim)
    for layer in stack.layers:
        layer.attach(stack.layer_aggregation)


class MethodEncoder(TransformerEncoderBase):
    """fairseq's encoder building ``layer_cls(cfg, index=l)`` for l = 1..N."""

    def __init__(self, cfg, dictionary, embed_tokens, layer_cls, return_fc=False):
        self.layer_cls = layer_cls  # read by build_encoder_layer, during super().__init__
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        if issubclass(layer_cls, DLCL):
            _attach_aggregation(self, cfg.encoder.embed_dim)

    def build_encoder_layer(self, cfg):
        self.num_built = getattr(self, "num_built", 0) + 1
        layer = self.layer_cls(cfg, index=self.num_built, return_fc=self.return_fc)
        return wrap_for_training(layer, cfg)


class MethodDecoder(TransformerDecoderBase):
    """fairseq's decoder building ``layer_cls(cfg, index=l)`` for l = 1..M."""

    def __init__(self, cfg, dictionary, embed_tokens, layer_cls, no_encoder_attn=False):
        self.layer_cls = layer_cls
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        if issubclass(layer_cls, DLCL):
            _attach_aggregation(self, cfg.decoder.embed_dim)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        self.num_built = getattr(self, "num_built", 0) + 1
        layer = self.layer_cls(cfg, index=self.num_built, no_encoder_attn=no_encoder_attn)
        return wrap_for_training(layer, cfg)


class MethodTransformerModel(TransformerModel):
    """fairseq's Transformer with the layers of ``rule`` (a key of ``method_layers.LAYERS``);
    ``config`` declares the method's own options."""

    rule: str = ""
    config: Optional[type] = None

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        if cls.config is not None:
            gen_parser_from_dataclass(parser, cls.config(), delete_default=True)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return MethodEncoder(cfg, src_dict, embed_tokens, LAYERS[cls.rule][0])

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return MethodDecoder(cfg, tgt_dict, embed_tokens, LAYERS[cls.rule][1],
                             no_encoder_attn=cfg.no_cross_attention)


# --- one model per method ------------------------------------------------------------------


@dataclass
class DSInitConfig(FairseqDataclass):
    ds_init_alpha: float = field(
        default=1.0,
        metadata={"help": "DS-Init's alpha in (0, 1]: layer l's weights are Xavier-uniform with "
                  "gain alpha/sqrt(l) (Zhang et al. 2019); chosen default 1"},
    )


@register_model("ds_init_transformer")
class DSInitTransformerModel(MethodTransformerModel):
    """Post-LN with depth-scaled init (DS-Init, Zhang, Titov & Sennrich 2019)."""
    rule, config = "DSInit", DSInitConfig


@register_model("lipschitz_transformer")
class LipschitzTransformerModel(MethodTransformerModel):
    """Post-LN with Lipschitz-constrained init (Xu et al. 2020)."""
    rule = "Lipschitz"


@register_model("admin_transformer")
class AdminTransformerModel(MethodTransformerModel):
    """Post-LN with Admin's omega (Liu et al. 2020), profiled on the first training batch.

    The profiling pass runs automatically at the first forward in training mode (inside the
    first ``fairseq-train`` update) and is recorded in the ``admin_profiled`` buffer, which the
    checkpoints keep, so resuming or decoding never profiles again."""
    rule = "Admin"

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        self.register_buffer("admin_profiled", torch.zeros((), dtype=torch.bool))

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        if self.training:
            self.initialise_from_batch(dict(src_tokens=src_tokens, src_lengths=src_lengths,
                                            prev_output_tokens=prev_output_tokens))
        return super().forward(src_tokens, src_lengths, prev_output_tokens, **kwargs)

    def initialise_from_batch(self, net_input: dict) -> None:
        """Run the profiling pass on ``net_input`` unless it has run. Call it yourself to
        measure from the profiled start (e.g. theta_0 of a model-update probe)."""
        if not bool(self.admin_profiled):
            profile_admin_(self, net_input)
            self.admin_profiled.fill_(True)


def initialise_from_batch(model, net_input: dict) -> None:
    """Complete any data-dependent initialisation (Admin's profiling) on one batch; a no-op for
    the other methods. Training does it by itself at the first update."""
    if isinstance(model, AdminTransformerModel):
        model.initialise_from_batch(net_input)


@register_model("rezero_transformer")
class ReZeroTransformerModel(MethodTransformerModel):
    """No LayerNorm, x + a G(x) with a = 0 learnable (ReZero, Bachlechner et al. 2020)."""
    rule = "ReZero"


@register_model("r_fixup_transformer")
class RFixupTransformerModel(MethodTransformerModel):
    """No LayerNorm, Fixup's init and branch multipliers (Zhang, Dauphin & Ma 2019)."""
    rule = "RFixup"


@register_model("t_fixup_transformer")
class TFixupTransformerModel(MethodTransformerModel):
    """No LayerNorm, T-Fixup's init (Huang et al. 2020); input embeddings scaled (9M)^(-1/4)."""
    rule = "TFixup"

    @classmethod
    def build_embedding(cls, args, dictionary, embed_dim, path=None):
        embedding = super().build_embedding(args, dictionary, embed_dim, path)
        _, decoder_scale = constants.t_fixup_scales(args.encoder_layers, args.decoder_layers)
        with torch.no_grad():  # built once per distinct table, so shared tables scale once
            embedding.weight.mul_(decoder_scale)
        return embedding


@register_model("dlcl_transformer")
class DLCLTransformerModel(MethodTransformerModel):
    """Pre-LN with dynamic linear combination of layers (DLCL, Wang et al. 2019)."""
    rule = "DLCL"


@register_model("normformer_transformer")
class NormFormerTransformerModel(MethodTransformerModel):
    """Pre-LN with NormFormer's extra norms and head scales in encoder and decoder."""
    rule = "NormFormer"


# --- architectures and their checks --------------------------------------------------------

# method -> (the fairseq model it is built by, the LayerNorm placement it is defined for):
# "post" (Post-LN; the --*-normalize-before flags are rejected), "pre" (Pre-LN, set by the
# hook) or "none" (LayerNorm-free: Post-LN layers whose LNs are removed; flags rejected too).
METHOD_MODELS = {
    "post_ln": ("transformer", "post"), "pre_ln": ("transformer", "pre"),
    "ds_init": ("ds_init_transformer", "post"), "lipschitz": ("lipschitz_transformer", "post"),
    "admin": ("admin_transformer", "post"), "rezero": ("rezero_transformer", "none"),
    "r_fixup": ("r_fixup_transformer", "none"), "t_fixup": ("t_fixup_transformer", "none"),
    "dlcl": ("dlcl_transformer", "pre"), "normformer": ("normformer_transformer", "pre"),
}


def _validate(method: str, args) -> None:
    placement = METHOD_MODELS[method][1]
    for side in ("encoder", "decoder"):
        if placement == "pre":
            setattr(args, f"{side}_normalize_before", True)  # idempotent: the hook runs again
        elif getattr(args, f"{side}_normalize_before", False):  # when a checkpoint is loaded
            what = "a Post-LN method" if placement == "post" else "built without LayerNorm"
            raise ValueError(
                f"--{side}-normalize-before cannot be used with --arch {args.arch}: {method} is "
                f"{what}. Drop the flag, or use --arch pre_ln_transformer for Pre-LN.")
    if method == "dlcl":
        if getattr(args, "checkpoint_activations", False):
            raise ValueError(
                f"--checkpoint-activations cannot be used with --arch {args.arch}: DLCL's layer "
                f"aggregation passes every layer's output to the later layers outside the "
                f"checkpointed forward. Drop the flag (or reduce --max-tokens).")
        for side in ("encoder", "decoder"):
            if getattr(args, f"{side}_layerdrop", 0) or getattr(args, f"{side}_layers_to_keep",
                                                                   None):
                raise ValueError(
                    f"--{side}-layerdrop / --{side}-layers-to-keep cannot be used with --arch "
                    f"{args.arch}: DLCL's aggregation weights are defined over all layers.")
    for side in ("encoder", "decoder"):
        constants._check_depth(f"--{side}-layers", getattr(args, f"{side}_layers"))
    if method == "ds_init":
        constants.ds_init_gain(1, args.ds_init_alpha)  # raises outside (0, 1]


def _base(method: str):
    def architecture(args):
        config = getattr(MODEL_REGISTRY[METHOD_MODELS[method][0]], "config", None)
        for f in fields(config) if config else ():
            setattr(args, f.name, getattr(args, f.name, f.default))
        base_architecture(args)
        _validate(method, args)

    architecture.__doc__ = f"{method}: base size (512/2048/8 heads), depth from --*-layers."
    return architecture


def _tiny(method: str):
    base = _base(method)

    def architecture(args):
        tiny_size(args)
        base(args)

    architecture.__doc__ = f"{method}: 64/128/2 heads, 2L-2L by default (tests, debugging)."
    return architecture


for _method, (_model, _) in METHOD_MODELS.items():
    register_model_architecture(_model, f"{_method}_transformer")(_base(_method))
    register_model_architecture(_model, f"{_method}_transformer_tiny")(_tiny(_method))
