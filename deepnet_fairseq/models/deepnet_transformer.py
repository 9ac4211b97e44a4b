"""DeepNet's architectures beyond ``deepnet_transformer`` and ``deepnet_transformer_tiny``.

DeepNet is a method like the others: its declaration (``methods``, layer rule
``method_layers.DeepNorm``) gives the model ``deepnet_transformer``, its options and those two
architectures (``method_transformers``). This module adds the sizes of the paper's
experiments on top of that arch hook: fairseq's IWSLT size and the depths of its tables.
"""

from fairseq.models import register_model_architecture

from .. import methods
from .method_transformers import architecture

DEEPNET = methods.get("deepnet")
_base = architecture(DEEPNET)


@register_model_architecture(DEEPNET.model, "deepnet_transformer_iwslt_de_en")
def deepnet_iwslt_architecture(args):
    """IWSLT size, as fairseq's transformer_iwslt_de_en: 512 hidden, 1024 FFN, 4 heads."""
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 1024)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 1024)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    _base(args)


# The depths of the paper's tables: deepnet_transformer_{N}_{M} is base size with N encoder
# and M decoder layers (the 1,000-layer model of Table 2 is 500_500).
NAMED_DEPTHS = ((6, 6), (12, 12), (18, 18), (50, 50), (100, 100), (200, 200), (250, 250), (500, 500))


def _depth_architecture(encoder_layers: int, decoder_layers: int):
    def hook(args):
        args.encoder_layers = getattr(args, "encoder_layers", encoder_layers)
        args.decoder_layers = getattr(args, "decoder_layers", decoder_layers)
        _base(args)

    hook.__doc__ = f"Base size, {encoder_layers}L encoder, {decoder_layers}L decoder."
    return hook


for _n, _m in NAMED_DEPTHS:
    register_model_architecture(DEEPNET.model, f"deepnet_transformer_{_n}_{_m}")(
        _depth_architecture(_n, _m))
