"""The methods of ``deepnet_fairseq.methods`` as fairseq models and architectures.

Everything here is derived from the method declarations: for each method with a layer rule of its
own (DeepNet's DeepNorm included) this registers the model ``<name>_transformer`` (fairseq's
Transformer building the rule's layers, with the method's ``model_options``) and, for every
method not selected by options on another's arch, the architectures ``<arch>`` (base size: 512
hidden, 2048 FFN, 8 heads; depth from ``--encoder-layers`` / ``--decoder-layers``) and
``<arch>_tiny`` (64 / 128 / 2 heads, 2L-2L). Post-LN and Pre-LN are fairseq's own
``transformer`` under this plugin's naming. Each arch hook runs the rule's ``validate`` (the
LayerNorm placement the method is defined for, and the rule's own checks) while fairseq parses
the arguments, so that nothing is written to --save-dir.
"""

import functools
from dataclasses import field, make_dataclass
from typing import Optional

import torch
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.distributed import fsdp_wrap
from fairseq.models import MODEL_REGISTRY, register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
)

from fairseq.modules.checkpoint_activations import checkpoint_wrapper

from .. import methods
from ..nn.method_layers import ENCODER_DECODER, RULES, layer_classes, tag_depth_transfer

# --- stacks that build the method's layers -------------------------------------------------


def wrap_for_training(layer, cfg):
    """Apply fairseq's activation-checkpointing and FSDP wrappers to an initialised layer.

    The same two steps as fairseq's ``TransformerEncoderBase.build_encoder_layer``: with
    ``--checkpoint-activations`` the layer is checkpointed and FSDP always wraps it.
    """
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=0 if checkpoint else cfg.min_params_to_wrap)


class MethodEncoder(TransformerEncoderBase):
    """fairseq's encoder building ``layer_cls(cfg, index=l, stacks=stacks)`` for l = 1..N;
    ``stacks``: the model's stacks, ("encoder",) in an encoder-only model."""

    def __init__(self, cfg, dictionary, embed_tokens, layer_cls, return_fc=False,
                 stacks=ENCODER_DECODER):
        self.layer_cls, self.stacks = layer_cls, stacks  # read during super().__init__
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        layer_cls.stack_built(self)
        tag_depth_transfer(self)

    def build_encoder_layer(self, cfg):
        self.num_built = getattr(self, "num_built", 0) + 1
        layer = self.layer_cls(cfg, index=self.num_built, stacks=self.stacks,
                               return_fc=self.return_fc)
        return wrap_for_training(layer, cfg)


class MethodDecoder(TransformerDecoderBase):
    """fairseq's decoder building ``layer_cls(cfg, index=l, stacks=stacks)`` for l = 1..M;
    ``stacks``: the model's stacks, ("decoder",) in a decoder-only model."""

    def __init__(self, cfg, dictionary, embed_tokens, layer_cls, no_encoder_attn=False,
                 stacks=ENCODER_DECODER):
        self.layer_cls, self.stacks = layer_cls, stacks
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        layer_cls.stack_built(self)
        tag_depth_transfer(self)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        self.num_built = getattr(self, "num_built", 0) + 1
        layer = self.layer_cls(cfg, index=self.num_built, stacks=self.stacks,
                               no_encoder_attn=no_encoder_attn)
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


def set_option_defaults(method: methods.Method, args) -> None:
    """The defaults of the method's ``model_options`` where ``args`` has none."""
    for option in method.all_model_options:
        if getattr(args, option.name, None) is None:
            setattr(args, option.name, option.default)


def validate(method: methods.Method, args, stacks=ENCODER_DECODER) -> None:
    """The arch hook's checks: the rule's, or the LayerNorm placement alone for a method built
    by an existing model."""
    if method.layers is None:
        method.set_layer_norm_placement(args)
    else:
        RULES[method.layers].validate(args, method, stacks)


def architecture(method: methods.Method):
    """The arch hook of ``method.arch``: base size, depth from --*-layers."""
    def hook(args):
        set_option_defaults(method, args)
        base_architecture(args)
        validate(method, args)

    hook.__doc__ = f"{method.name}: base size (512/2048/8 heads), depth from --*-layers."
    return hook


def _tiny(method: methods.Method):
    base = architecture(method)

    def hook(args):
        methods.apply_tiny_size(args)
        base(args)

    hook.__doc__ = f"{method.name}: 64/128/2 heads, 2L-2L by default (tests, debugging)."
    return hook


@functools.lru_cache(maxsize=None)
def model_config(method: methods.Method) -> type:
    """The option dataclass of the method's ``model_options`` (``<rule>Config``): what its
    model adds to fairseq-train's parser."""
    def annotation(option):
        if option.choices:
            return ChoiceEnum(option.choices)
        return Optional[option.kind] if option.default is None else option.kind

    return make_dataclass(
        f"{method.layers}Config",
        [(o.name, annotation(o), field(default=o.default, metadata={"help": o.help}))
         for o in method.all_model_options], bases=(FairseqDataclass,))


def _model_class(method: methods.Method) -> type:
    camel = "".join(part.title() for part in method.name.split("_"))
    return type(f"{camel}TransformerModel", (MethodTransformerModel,),
                {"method": method, "config": model_config(method), "__module__": __name__,
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
    if method.archs:
        arch, tiny = method.archs
        register_model_architecture(method.model, arch)(architecture(method))
        register_model_architecture(method.model, tiny)(_tiny(method))
    return method


for _method in list(methods.METHODS.values()):
    register_method(_method)
