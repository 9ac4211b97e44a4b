"""DeepNorm for encoder-only (RoBERTa-style masked LM) and decoder-only (GPT-style) models.

The same DeepNorm layers as the translation model (``nn.method_layers.DeepNorm``), with the
paper's constants for a single stack (Figure 2; ``constants.encoder_only`` /
``constants.decoder_only``):

* ``deepnet_roberta`` (task ``masked_lm``): fairseq's RoBERTa with Post-LN DeepNorm encoder
  layers, alpha = (2N)^(1/4), beta = (8N)^(-1/4). Archs ``deepnet_roberta_base`` (12 layers,
  768 / 3072 / 12 heads, as ``roberta_base``), ``deepnet_roberta_large`` (24, 1024 / 4096 / 16)
  and ``deepnet_roberta_tiny`` (2, 64 / 128 / 2); depth from ``--encoder-layers``.
* ``deepnet_lm`` (task ``language_modeling``): fairseq's ``transformer_lm`` with Post-LN
  DeepNorm decoder layers, alpha = (2M)^(1/4), beta = (8M)^(-1/4). Archs ``deepnet_lm_gpt``
  (12 layers, 768 / 3072 / 12 heads, as ``transformer_lm_gpt``) and ``deepnet_lm_tiny``
  (2, 64 / 128 / 2); depth from ``--decoder-layers``.

Both are built from DeepNet's declaration (``methods``) and rule (``method_layers.DeepNorm``),
with the model's one stack: the same options (``--deepnorm-{encoder,decoder}-{alpha,beta}``
of the stack the model has override the constants; ``--deepnorm-ln-lr-multiplier`` scales the
LayerNorms' step, ``auto`` is beta^2/alpha^2 = 1/(4N) here), the same checks.
"""

from dataclasses import dataclass

from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta.model import RobertaEncoder, RobertaModel
from fairseq.models.roberta.model import base_architecture as roberta_base_architecture
from fairseq.models.transformer import TransformerConfig
from fairseq.models.transformer_lm import (
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
    base_lm_architecture,
)
from fairseq.utils import safe_getattr, safe_hasattr

from .. import methods
from ..nn.initialization import deepnorm_init_
from ..nn.method_layers import DeepNormDecoderLayer, DeepNormEncoderLayer
from .method_transformers import (MethodDecoder, MethodEncoder, model_config,
                                  set_option_defaults, validate)

DEEPNET = methods.get("deepnet")
DeepNormConfig = model_config(DEEPNET)
"""DeepNet's options, the same dataclass as ``deepnet_transformer``'s."""

ENCODER_ONLY, DECODER_ONLY = ("encoder",), ("decoder",)


def _layer_config(args) -> TransformerConfig:
    """The config the DeepNorm layers read. From an OmegaConf config (the LM's, registered with
    a dataclass) ``from_namespace`` copies only fairseq's own fields, so DeepNet's are copied
    here: the layers read their overrides and the stack its --deepnorm-ln-lr-multiplier."""
    cfg = TransformerConfig.from_namespace(args)
    for option in DEEPNET.model_options:
        setattr(cfg, option.name, safe_getattr(args, option.name, option.default))
    return cfg


# --- encoder-only (RoBERTa) ----------------------------------------------------------------


class DeepNetRobertaEncoder(RobertaEncoder):
    def build_encoder(self, args, dictionary, embed_tokens):
        return MethodEncoder(_layer_config(args), dictionary, embed_tokens,
                             DeepNormEncoderLayer, stacks=ENCODER_ONLY)


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
        gen_parser_from_dataclass(parser, DeepNormConfig(), delete_default=True)

    def __init__(self, args, encoder):
        super().__init__(args, encoder)
        for layer in self.encoder.sentence_encoder.layers:
            deepnorm_init_(layer, layer.beta)

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
    set_option_defaults(DEEPNET, args)
    roberta_base_architecture(args)
    validate(DEEPNET, args, ENCODER_ONLY)


@register_model_architecture("deepnet_roberta", "deepnet_roberta_large")
def deepnet_roberta_large_architecture(args):
    """RoBERTa large size (24 layers, 1024 / 4096 / 16 heads)."""
    args.encoder_layers = safe_getattr(args, "encoder_layers", 24)
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", 1024)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 4096)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", 16)
    deepnet_roberta_architecture(args)


def apply_tiny_size(args, side: str) -> None:
    """The tiny size of every method's ``_tiny`` arch (``methods.TINY_SIZE``: 64 / 128 / 2 heads,
    2 layers) on the model's one stack, ``side``, where not given."""
    for name in ("layers", "embed_dim", "ffn_embed_dim", "attention_heads"):
        key = f"{side}_{name}"
        setattr(args, key, safe_getattr(args, key, methods.TINY_SIZE[f"encoder_{name}"]))


@register_model_architecture("deepnet_roberta", "deepnet_roberta_tiny")
def deepnet_roberta_tiny_architecture(args):
    """64 / 128 / 2 heads, 2 layers by default (tests, debugging)."""
    apply_tiny_size(args, "encoder")
    deepnet_roberta_architecture(args)


# --- decoder-only (GPT-style language model) -----------------------------------------------


@dataclass
class DeepNetLanguageModelConfig(TransformerLanguageModelConfig, DeepNormConfig):
    """fairseq's transformer_lm options and DeepNet's (the LM model is registered with its
    dataclass, so the two are joined here)."""


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
        return cls(MethodDecoder(_layer_config(args), task.target_dictionary,
                                 shell.decoder.embed_tokens, DeepNormDecoderLayer,
                                 no_encoder_attn=True, stacks=DECODER_ONLY))


@register_model_architecture("deepnet_lm", "deepnet_lm_gpt")
def deepnet_lm_architecture(args):
    """GPT size (12 layers, 768 / 3072 / 12 heads, GELU), Post-LN DeepNorm."""
    set_option_defaults(DEEPNET, args)
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", 768)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 3072)
    args.decoder_layers = safe_getattr(args, "decoder_layers", 12)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", 12)
    args.activation_fn = safe_getattr(args, "activation_fn", "gelu")
    validate(DEEPNET, args, DECODER_ONLY)  # before base_lm_architecture, which forces Pre-LN
    base_lm_architecture(args)
    args.decoder_normalize_before = False  # DeepNorm is Post-LN


@register_model_architecture("deepnet_lm", "deepnet_lm_tiny")
def deepnet_lm_tiny_architecture(args):
    """64 / 128 / 2 heads, 2 layers by default (tests, debugging)."""
    apply_tiny_size(args, "decoder")
    deepnet_lm_architecture(args)
