"""The methods of ``deepnet_fairseq.methods`` as fairseq models and architectures.

Everything here is derived from the method declarations: for each method with a layer rule of its
own this registers the model ``<name>_transformer`` (fairseq's Transformer building the rule's
layers) and, for every method but DeepNet (``deepnet_transformer``, which registers its own), the
architectures ``<arch>`` (base size: 512 hidden, 2048 FFN, 8 heads; depth from
``--encoder-layers`` / ``--decoder-layers``) and ``<arch>_tiny`` (64 / 128 / 2 heads, 2L-2L).
Post-LN and Pre-LN are fairseq's own ``transformer`` under this plugin's naming. Each arch hook
sets the LayerNorm placement the method is defined for and rejects what it is not defined for,
while fairseq parses the arguments, so that nothing is written to --save-dir.
"""

from dataclasses import field, make_dataclass

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

from .. import constants, methods
from ..layers import wrap_for_training
from ..method_layers import DLCL, LayerAggregation, layer_classes

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
        layer_cls.stack_built(self)

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
        layer_cls.stack_built(self)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        self.num_built = getattr(self, "num_built", 0) + 1
        layer = self.layer_cls(cfg, index=self.num_built, no_encoder_attn=no_encoder_attn)
        return wrap_for_training(layer, cfg)


class MethodTransformerModel(TransformerModel):
    """fairseq's Transformer whose layers are those of ``method.layers``; subclassed once per
    method by ``register_method``.

    A rule that initialises from data (Admin's profiling) runs at the first forward in training
    mode (inside the first ``fairseq-train`` update); the ``data_initialised`` buffer records it,
    and the checkpoints keep it, so resuming or decoding never profiles again."""

    method: methods.Method = None
    config: type = None  # the method's own options, a FairseqDataclass

    @classmethod
    def rule(cls):
        return layer_classes(cls.method.layers)[0]

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        gen_parser_from_dataclass(parser, cls.config(), delete_default=True)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return MethodEncoder(cfg, src_dict, embed_tokens, layer_classes(cls.method.layers)[0])

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return MethodDecoder(cfg, tgt_dict, embed_tokens, layer_classes(cls.method.layers)[1],
                             no_encoder_attn=cfg.no_cross_attention)

    @classmethod
    def build_embedding(cls, args, dictionary, embed_dim, path=None):
        embedding = super().build_embedding(args, dictionary, embed_dim, path)
        scale = cls.rule().embedding_scale(args)
        if scale != 1.0:
            with torch.no_grad():  # built once per distinct table, so shared tables scale once
                embedding.weight.mul_(scale)
        return embedding

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        if self.rule().needs_batch_initialisation():
            self.register_buffer("data_initialised", torch.zeros((), dtype=torch.bool))

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        if self.training:
            self.initialise_from_batch(dict(src_tokens=src_tokens, src_lengths=src_lengths,
                                            prev_output_tokens=prev_output_tokens))
        return super().forward(src_tokens, src_lengths, prev_output_tokens, **kwargs)

    def initialise_from_batch(self, net_input: dict) -> None:
        """Run the rule's data-dependent initialisation on ``net_input`` unless it has run.
        Call it yourself to measure from the initialised start (theta_0 of a probe)."""
        if hasattr(self, "data_initialised") and not bool(self.data_initialised):
            self.rule().initialise_from_batch(self, net_input)
            self.data_initialised.fill_(True)


def initialise_from_batch(model, net_input: dict) -> None:
    """Complete any data-dependent initialisation (Admin's profiling) on one batch; a no-op for
    the other methods. Training does it by itself at the first update."""
    if isinstance(model, MethodTransformerModel):
        model.initialise_from_batch(net_input)


# --- architectures and their checks --------------------------------------------------------


def _validate(method: methods.Method, args) -> None:
    method.set_layer_norm_placement(args)
    if method.layers == "DLCL":
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
    if method.name == "ds_init":
        constants.ds_init_gain(1, args.ds_init_alpha)  # raises outside (0, 1]


def _base(method: methods.Method):
    def architecture(args):
        for option in method.model_options:
            setattr(args, option.name, getattr(args, option.name, option.default))
        base_architecture(args)
        _validate(method, args)

    architecture.__doc__ = f"{method.name}: base size (512/2048/8 heads), depth from --*-layers."
    return architecture


def _tiny(method: methods.Method):
    base = _base(method)

    def architecture(args):
        methods.apply_tiny_size(args)
        base(args)

    architecture.__doc__ = f"{method.name}: 64/128/2 heads, 2L-2L by default (tests, debugging)."
    return architecture


def _model_class(method: methods.Method) -> type:
    config = make_dataclass(
        f"{method.layers}Config",
        [(o.name, float, field(default=o.default, metadata={"help": o.help}))
         for o in method.model_options], bases=(FairseqDataclass,))
    camel = "".join(part.title() for part in method.name.split("_"))
    return type(f"{camel}TransformerModel", (MethodTransformerModel,),
                {"method": method, "config": config, "__module__": __name__,
                 "__doc__": f"{method.summary} ({method.paper})."})


def register_method(method: methods.Method) -> methods.Method:
    """Register a declared method with fairseq: its model (for a method with a layer rule of its
    own) and its architectures. ``methods.add``s it first if it is not declared yet."""
    if method.name not in methods.METHODS:
        methods.add(method)
    if method.layers is not None:
        register_model(method.model)(_model_class(method))
    elif method.model not in MODEL_REGISTRY:
        raise ValueError(f"method {method.name}: no fairseq model named {method.model!r}")
    if method.registers_arch:
        register_model_architecture(method.model, method.arch)(_base(method))
        register_model_architecture(method.model, f"{method.arch}_tiny")(_tiny(method))
    return method


for _method in list(methods.METHODS.values()):
    register_method(_method)
