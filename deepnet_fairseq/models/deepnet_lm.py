"""DeepNorm for encoder-only (RoBERTa-style masked LM) and decoder-only (GPT-style) models.

The same DeepNorm layers as the translation model (``layers.py``), with the paper's constants
for a single stack (Figure 2; ``constants.encoder_only`` / ``constants.decoder_only``):

* ``deepnet_roberta`` (task ``masked_lm``): fairseq's RoBERTa with Post-LN DeepNorm encoder
  layers, alpha = (2N)^(1/4), beta = (8N)^(-1/4). Archs ``deepnet_roberta_base`` (12 layers,
  768 / 3072 / 12 heads, as ``roberta_base``), ``deepnet_roberta_large`` (24, 1024 / 4096 / 16)
  and ``deepnet_roberta_tiny`` (2, 64 / 128 / 2); depth from ``--encoder-layers``.
* ``deepnet_lm`` (task ``language_modeling``): fairseq's ``transformer_lm`` with Post-LN
  DeepNorm decoder layers, alpha = (2M)^(1/4), beta = (8M)^(-1/4). Archs ``deepnet_lm_gpt``
  (12 layers, 768 / 3072 / 12 heads, as ``transformer_lm_gpt``) and ``deepnet_lm_tiny``
  (2, 64 / 128 / 2); depth from ``--decoder-layers``.

``--deepnorm-{encoder,decoder}-{alpha,beta}`` override the constants and
``--deepnorm-ln-lr-multiplier`` scales the LayerNorms' step (``layernorm_lr.py``; ``auto`` is
beta^2/alpha^2 = 1/(4N) here), as for translation.
"""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta.model import RobertaEncoder, RobertaModel
from fairseq.models.roberta.model import base_architecture as roberta_base_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoder, TransformerEncoderBase
from fairseq.models.transformer_lm import (
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
    base_lm_architecture,
)
from fairseq.dataclass import FairseqDataclass
from fairseq.utils import safe_getattr, safe_hasattr

from .. import constants, layernorm_lr
from ..initialization import deepnorm_init_
from ..layers import DeepNormDecoderLayer, DeepNormEncoderLayer, wrap_for_training


def _reject_pre_ln(args, side: str) -> None:
    if safe_getattr(args, f"{side}_normalize_before", False):
        raise ValueError(
            f"--{side}-normalize-before cannot be used with --arch {args.arch}: DeepNorm is a "
            f"Post-LN method. Drop the flag (fairseq's own {'roberta_prenorm' if side == 'encoder' else 'transformer_lm'} "
            f"is the Pre-LN baseline).")


def _tag_layernorms(args, c: constants.DeepNormConstants, side: str, layers) -> None:
    """--deepnorm-ln-lr-multiplier for the one stack; single-stack constants are the paper's."""
    k = layernorm_lr.stack_multipliers(safe_getattr(args, "deepnorm_ln_lr_multiplier", None),
                                       c, "paper")[side]
    layernorm_lr.tag_layers(layers, k)


# --- encoder-only (RoBERTa) ----------------------------------------------------------------


def encoder_only_constants(args) -> constants.DeepNormConstants:
    return constants.encoder_only(args.encoder_layers).with_overrides(
        encoder_alpha=safe_getattr(args, "deepnorm_encoder_alpha", None),
        encoder_beta=safe_getattr(args, "deepnorm_encoder_beta", None))


@dataclass
class EncoderOnlyDeepNormConfig(FairseqDataclass):
    deepnorm_encoder_alpha: Optional[float] = field(
        default=None, metadata={"help": "DeepNorm skip-path scale alpha; default: the paper's "
                                "encoder-only (2N)^(1/4) for the actual --encoder-layers"})
    deepnorm_encoder_beta: Optional[float] = field(
        default=None, metadata={"help": "DeepNorm init gain beta; default: the paper's "
                                "encoder-only (8N)^(-1/4) for the actual --encoder-layers"})
    deepnorm_ln_lr_multiplier: Optional[str] = field(
        default=None, metadata={"help": layernorm_lr.HELP})


class DeepNetSentenceEncoder(TransformerEncoderBase):
    """fairseq's Transformer encoder built from DeepNorm layers with encoder-only constants."""

    def __init__(self, args, dictionary, embed_tokens):
        self.constants = encoder_only_constants(args)
        super().__init__(TransformerConfig.from_namespace(args), dictionary, embed_tokens)

    def build_encoder_layer(self, cfg):
        layer = DeepNormEncoderLayer(cfg, alpha=self.constants.encoder_alpha,
                                     beta=self.constants.encoder_beta, return_fc=self.return_fc)
        return wrap_for_training(layer, cfg)


class DeepNetRobertaEncoder(RobertaEncoder):
    def build_encoder(self, args, dictionary, embed_tokens):
        return DeepNetSentenceEncoder(args, dictionary, embed_tokens)


@register_model("deepnet_roberta")
class DeepNetRobertaModel(RobertaModel):
    """RoBERTa (masked LM) with Post-LN DeepNorm encoder layers.

    fairseq's RobertaModel re-initialises the whole model with BERT's init after building it
    (``self.apply(init_bert_params)`` in its constructor), so the DeepNorm roles are drawn again
    right after that; everything else (embeddings, LayerNorms, LM head) keeps BERT's init, as in
    fairseq's RoBERTa."""

    @classmethod
    def add_args(cls, parser):
        RobertaModel.add_args(parser)
        gen_parser_from_dataclass(parser, EncoderOnlyDeepNormConfig(), delete_default=True)

    def __init__(self, args, encoder):
        super().__init__(args, encoder)
        c = encoder_only_constants(args)
        layers = self.encoder.sentence_encoder.layers
        for layer in layers:
            deepnorm_init_(layer, c.encoder_beta)
        _tag_layernorms(args, c, "encoder", layers)

    @classmethod
    def build_model(cls, args, task):
        # fairseq's RobertaModel.build_model, with this plugin's encoder
        from omegaconf import OmegaConf

        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, False)
        deepnet_roberta_architecture(args)
        if not safe_hasattr(args, "max_positions"):
            if not safe_hasattr(args, "tokens_per_sample"):
                args.tokens_per_sample = task.max_positions()
            args.max_positions = args.tokens_per_sample
        encoder = DeepNetRobertaEncoder(args, task.source_dictionary)
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, True)
        return cls(args, encoder)


@register_model_architecture("deepnet_roberta", "deepnet_roberta_base")
def deepnet_roberta_architecture(args):
    """RoBERTa base size (12 layers, 768 / 3072 / 12 heads), Post-LN DeepNorm."""
    _reject_pre_ln(args, "encoder")
    for name in ("deepnorm_encoder_alpha", "deepnorm_encoder_beta", "deepnorm_ln_lr_multiplier"):
        setattr(args, name, safe_getattr(args, name, None))
    roberta_base_architecture(args)
    encoder_only_constants(args)  # raises on a non-positive depth or override
    layernorm_lr.validate(args)


@register_model_architecture("deepnet_roberta", "deepnet_roberta_large")
def deepnet_roberta_large_architecture(args):
    """RoBERTa large size (24 layers, 1024 / 4096 / 16 heads)."""
    args.encoder_layers = safe_getattr(args, "encoder_layers", 24)
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", 1024)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 4096)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", 16)
    deepnet_roberta_architecture(args)


@register_model_architecture("deepnet_roberta", "deepnet_roberta_tiny")
def deepnet_roberta_tiny_architecture(args):
    """64 / 128 / 2 heads, 2 layers by default (tests, debugging)."""
    args.encoder_layers = safe_getattr(args, "encoder_layers", 2)
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", 64)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 128)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", 2)
    deepnet_roberta_architecture(args)


# --- decoder-only (GPT-style language model) -----------------------------------------------


def decoder_only_constants(args) -> constants.DeepNormConstants:
    return constants.decoder_only(args.decoder_layers).with_overrides(
        decoder_alpha=safe_getattr(args, "deepnorm_decoder_alpha", None),
        decoder_beta=safe_getattr(args, "deepnorm_decoder_beta", None))


@dataclass
class DeepNetLanguageModelConfig(TransformerLanguageModelConfig):
    deepnorm_decoder_alpha: Optional[float] = field(
        default=None, metadata={"help": "DeepNorm skip-path scale alpha; default: the paper's "
                                "decoder-only (2M)^(1/4) for the actual --decoder-layers"})
    deepnorm_decoder_beta: Optional[float] = field(
        default=None, metadata={"help": "DeepNorm init gain beta; default: the paper's "
                                "decoder-only (8M)^(-1/4) for the actual --decoder-layers"})
    deepnorm_ln_lr_multiplier: Optional[str] = field(
        default=None, metadata={"help": layernorm_lr.HELP})


class DeepNetLMDecoder(TransformerDecoder):
    """fairseq's decoder (as ``transformer_lm`` builds it) from DeepNorm decoder layers."""

    def __init__(self, args, dictionary, embed_tokens):
        self.constants = decoder_only_constants(args)
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=True)

    def build_decoder_layer(self, args, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(args)
        layer = DeepNormDecoderLayer(cfg, alpha=self.constants.decoder_alpha,
                                     beta=self.constants.decoder_beta,
                                     no_encoder_attn=no_encoder_attn)
        return wrap_for_training(layer, cfg)


@register_model("deepnet_lm", dataclass=DeepNetLanguageModelConfig)
class DeepNetLanguageModel(TransformerLanguageModel):
    """Decoder-only language model with Post-LN DeepNorm layers."""

    @classmethod
    def build_model(cls, args, task):
        # fairseq's build_model makes the embeddings (plain, character or adaptive input) and a
        # decoder; we let it build a 0-layer decoder only for its embeddings, then build ours.
        layers = args.decoder_layers
        args.decoder_layers = 0
        try:
            shell = super().build_model(args, task)
        finally:
            args.decoder_layers = layers
        model = cls(DeepNetLMDecoder(args, task.target_dictionary, shell.decoder.embed_tokens))
        _tag_layernorms(args, model.decoder.constants, "decoder", model.decoder.layers)
        return model


@register_model_architecture("deepnet_lm", "deepnet_lm_gpt")
def deepnet_lm_architecture(args):
    """GPT size (12 layers, 768 / 3072 / 12 heads, GELU), Post-LN DeepNorm."""
    _reject_pre_ln(args, "decoder")
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", 768)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 3072)
    args.decoder_layers = safe_getattr(args, "decoder_layers", 12)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", 12)
    args.activation_fn = safe_getattr(args, "activation_fn", "gelu")
    base_lm_architecture(args)
    args.decoder_normalize_before = False  # base_lm_architecture forces Pre-LN; DeepNorm is Post-LN
    args.deepnorm_ln_lr_multiplier = safe_getattr(args, "deepnorm_ln_lr_multiplier", None)
    decoder_only_constants(args)  # raises on a non-positive depth or override
    layernorm_lr.validate(args)


@register_model_architecture("deepnet_lm", "deepnet_lm_tiny")
def deepnet_lm_tiny_architecture(args):
    """64 / 128 / 2 heads, 2 layers by default (tests, debugging)."""
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", 64)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 128)
    args.decoder_layers = safe_getattr(args, "decoder_layers", 2)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", 2)
    deepnet_lm_architecture(args)
