"""The compared methods' Transformer layers: each is a residual rule plus an init rule.

A method is a small mixin over fairseq's own layers (``TransformerEncoderLayerBase`` /
``TransformerDecoderLayerBase``), as DeepNorm is (``DeepNorm`` below): it overrides the
``residual_connection`` hook (the residual rule), re-initialises the layer's weights in its
constructor, before fairseq wraps the layer for activation checkpointing / FSDP (the init rule),
and where it must, swaps a sub-module (LayerNorm -> identity) or adds one through a forward hook.
Two rules touch the forward, minimally: those with a parameter per sub-layer (Admin, R-Fixup)
reset a sub-layer counter at its start (``PerSublayer``), and the two that pass state between
layers (DLCL, ResiDual: ``StackState``) wrap fairseq's forward of the first and last layers.

fairseq's layers compute, per sub-layer, ``x = LN(residual_connection(dropout(G(x)), residual))``
(Post-LN) or ``x = residual_connection(dropout(G(LN(x))), residual)`` (Pre-LN); tensors are
time-first, T x B x C. Every layer gets ``index`` (1-based position in its stack) and reads the
stack's depth and the method's options from ``cfg`` (fairseq keeps every parsed option on it).

Where a paper leaves a choice open, the choice is marked "Choice:" here and in docs/methods.md.
"""

import functools
import logging
import math
from typing import Dict, List, Tuple

import torch
import torch.nn as nn
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase
from fairseq.modules import LayerNorm
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from fairseq.utils import safe_getattr

from .. import constants
from . import layernorm_lr
from .initialization import deepnorm_init_, linears, value_path

logger = logging.getLogger(__name__)

RULES: Dict[str, type] = {}
"""Layer rules by name (``Method.layers`` names one); filled by ``@layer_rule``."""


def layer_rule(rule: type) -> type:
    """Class decorator: make a layer rule available to method declarations by its class name."""
    if RULES.get(rule.__name__, rule) is not rule:
        raise ValueError(f"a layer rule named {rule.__name__} already exists")
    RULES[rule.__name__] = rule
    return rule


def depth_transfer_of(cfg, side: str) -> constants.DepthTransfer:
    """--depth-transfer's multipliers for one stack of a model built from ``cfg`` (flat args, an
    OmegaConf config or a ``TransformerConfig``; a model without the option: none)."""
    rule = str(safe_getattr(cfg, "depth_transfer") or "none")
    if rule == "none":  # constants' own check: a --depth-base given alone is refused
        return constants.depth_transfer(rule, 1, safe_getattr(cfg, "depth_base"))
    layers = (getattr(cfg, side).layers if isinstance(cfg, TransformerConfig)
              else safe_getattr(cfg, f"{side}_layers"))
    return constants.depth_transfer(rule, layers, safe_getattr(cfg, "depth_base"))


def tag_depth_transfer(stack) -> None:
    """--depth-transfer's learning-rate and epsilon multipliers, times --layers-lr-multiplier's,
    on every parameter of a stack's layers (embeddings, output and the final LayerNorm sit
    outside them and keep the plain ones); they compose with --deepnorm-ln-lr-multiplier by
    product."""
    if not len(stack.layers):
        return
    transfer = depth_transfer_of(stack.cfg, stack.layers[0].side)
    lr = transfer.hidden_lr * layernorm_lr.layers_multiplier(stack.cfg)
    if (lr, transfer.hidden_eps) != (1.0, 1.0):
        for p in stack.layers.parameters():
            layernorm_lr.tag(p, lr=lr, eps=transfer.hidden_eps)


class BranchScale:
    """Mixed in first, before every rule: --depth-transfer's multiplier m_L^-a on the residual
    branch (fairseq's ``residual_connection(x, residual)`` gets the branch output x, after
    dropout), then the rule's own residual. One multiply per sub-layer, none when m = 1."""

    def residual_connection(self, x, residual):
        if self.branch_multiplier != 1.0:
            x = x * self.branch_multiplier
        return super().residual_connection(x, residual)


@functools.lru_cache(maxsize=None)
def layer_classes(rule_name: str) -> Tuple[type, type]:
    """(encoder layer class, decoder layer class) of a rule: ``BranchScale`` and the rule mixed in
    before fairseq's ``TransformerEncoderLayerBase`` / ``TransformerDecoderLayerBase``."""
    try:
        rule = RULES[rule_name]
    except KeyError:
        raise ValueError(f"no layer rule named {rule_name!r} (known: {', '.join(RULES)}); "
                         f"decorate its class with @method_layers.layer_rule") from None
    pair = []
    for side, base in (("Encoder", TransformerEncoderLayerBase),
                       ("Decoder", TransformerDecoderLayerBase)):
        cls = type(f"{rule.__name__}{side}Layer", (BranchScale, rule, base),
                   {"__doc__": rule.__doc__})
        cls.__module__ = rule.__module__
        pair.append(cls)
    return tuple(pair)


ENCODER_DECODER = ("encoder", "decoder")


class MethodLayer:
    """Mixin base: stores ``index``, ``side`` ("encoder"/"decoder"), ``depth`` and ``stacks``
    (the model's stacks: both for translation, one for an encoder-only or decoder-only model),
    then calls ``setup(cfg)``, where a method adds its parameters and applies its init rule."""

    def __init__(self, cfg, index: int, stacks: Tuple[str, ...] = ENCODER_DECODER, **kwargs):
        super().__init__(cfg, **kwargs)
        self.index = index
        self.side = "decoder" if isinstance(self, TransformerDecoderLayerBase) else "encoder"
        self.depth = getattr(cfg, self.side).layers
        self.stacks = stacks
        self.branch_multiplier = depth_transfer_of(cfg, self.side).branch
        self.setup(cfg)

    def setup(self, cfg) -> None:
        pass

    @classmethod
    def validate(cls, args, method, stacks: Tuple[str, ...] = ENCODER_DECODER) -> None:
        """Called by the arch hook, while fairseq parses the arguments (and again when it loads
        a checkpoint): set the LayerNorm placement ``method`` (the declaration) is defined for
        and reject what the rule is not defined for, so that a bad run stops before it writes
        anything. A rule with checks of its own extends this."""
        method.set_layer_norm_placement(args)
        for side in stacks:
            constants._check_depth(f"--{side}-layers", getattr(args, f"{side}_layers"))
            depth_transfer_of(args, side)  # raises on a missing or bad --depth-base
        layernorm_lr.validate(args)

    def extra_repr(self) -> str:
        scale = (f", branch x {self.branch_multiplier:.4g}" if self.branch_multiplier != 1.0
                 else "")
        return f"{self.side} layer {self.index}/{self.depth}{scale}"

    # Model-level parts of a rule, called by the model that builds these layers
    # (models.method_transformers); a rule overrides those it needs.

    @classmethod
    def embedding_scale(cls, args) -> float:
        """Factor applied once to the input embedding tables at build (T-Fixup)."""
        return 1.0

    @classmethod
    def initialise_from_batch(cls, model, net_input: dict) -> None:
        """Data-dependent initialisation on the first training batch (Admin's profiling)."""

    @classmethod
    def stack_built(cls, stack) -> None:
        """Called once a stack (encoder or decoder) has built its layers: for rules that change
        the stack's own modules (DyT's final norm, ResiDual's dual stream)."""

    @classmethod
    def needs_batch_initialisation(cls) -> bool:
        return cls.initialise_from_batch.__func__ is not MethodLayer.initialise_from_batch.__func__

    @property
    def num_sublayers(self) -> int:
        return 3 if getattr(self, "encoder_attn", None) is not None else 2



class PerSublayer(MethodLayer):
    """For rules with one parameter per sub-layer: ``residual_connection`` is called once per
    sub-layer, in order (self-attention, cross-attention, FFN); we count the calls from the start
    of each forward and hand the index to ``sublayer_residual``. A decoder layer that has a
    cross-attention must be given ``encoder_out`` (always so in translation)."""

    def forward(self, *args, **kwargs):
        self._sublayer = 0
        return super().forward(*args, **kwargs)

    def residual_connection(self, x, residual):
        i, self._sublayer = self._sublayer, self._sublayer + 1
        return self.sublayer_residual(i, x, residual)

    def sublayer_residual(self, i: int, x, residual):
        raise NotImplementedError


@layer_rule
class Standard(MethodLayer):
    """fairseq's layer as it is (Post-LN or Pre-LN by the method's placement): the rule of the
    Post-LN and Pre-LN baselines, so that they have every method's options (--depth-transfer)."""


class NoLayerNorm(MethodLayer):
    """Removes the layer's LayerNorms (ReZero, Fixup, T-Fixup): in Post-LN mode each sub-layer
    becomes ``residual_connection(dropout(G(x)), x)``."""

    def setup(self, cfg):
        if self.normalize_before:
            raise ValueError("LayerNorm-free methods are built from Post-LN layers")
        for name in ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"):
            if getattr(self, name, None) is not None:
                setattr(self, name, nn.Identity())
        super().setup(cfg)


def _reinit_(layer, init_weight) -> None:
    """Re-draw every weight matrix of the layer with ``init_weight(role, weight)``, biases 0."""
    for role, linear in linears(layer).items():
        init_weight(role, linear.weight)
        if linear.bias is not None:
            nn.init.zeros_(linear.bias)


# --- DeepNorm ---------------------------------------------------------------------------------

RECORD = constants.RECORD


def deepnorm_form(args) -> str:
    """--deepnorm-constants as text: under a hydra config (the LM task) fairseq gives the member
    of its ChoiceEnum, which is not a str."""
    return str(safe_getattr(args, "deepnorm_constants") or "paper")


@layer_rule
class DeepNorm(MethodLayer):
    """DeepNorm (Wang et al. 2022, arXiv 2203.00555): Post-LN with ``LN(alpha x + G(x))``,
    dropout on the branch before the sum; fc1, fc2, v_proj, out_proj Xavier-normal with gain
    beta, q/k with gain 1 (``initialization.deepnorm_init_``). alpha and beta of each side come
    from the model's stacks and depths (``constants.deepnorm``; Figure 2 for encoder-decoder,
    encoder-only and decoder-only models) unless --deepnorm-{side}-{alpha,beta} override them;
    --deepnorm-constants selects an optimizer-aware form (the ``pre_ln_*`` forms build Pre-LN
    layers with alpha = 1), --deepnorm-ln-lr-multiplier scales the LayerNorms' step."""

    @staticmethod
    def constants_for(args, stacks=ENCODER_DECODER) -> constants.DeepNormConstants:
        """The constants of a model with ``stacks`` built from ``args`` (flat args, an OmegaConf
        config or a ``TransformerConfig``)."""
        def depth(side):
            if isinstance(args, TransformerConfig):
                return getattr(args, side).layers
            return safe_getattr(args, f"{side}_layers")

        overrides = {f"{side}_{name}": safe_getattr(args, f"deepnorm_{side}_{name}")
                     for side in stacks for name in ("alpha", "beta")}
        # --depth-transfer grows the tuned base model: alpha and beta are the base depth's, and
        # the rule's branch multiplier carries the depth (constants.py, docs/methods.md)
        grown = str(safe_getattr(args, "depth_transfer") or "none") != "none"
        depths = [(safe_getattr(args, "depth_base") if grown else depth(s)) if s in stacks
                  else None for s in ENCODER_DECODER]
        return constants.deepnorm(*depths,
                                  form=deepnorm_form(args)).with_overrides(**overrides)

    @classmethod
    def validate(cls, args, method, stacks=ENCODER_DECODER):
        form = deepnorm_form(args)
        # the form says the LayerNorm placement: Post-LN, or Pre-LN (set here) for pre_ln_*
        method.set_layer_norm_placement(args, "pre" if constants.is_pre_ln_form(form) else "post")
        for side in ENCODER_DECODER:
            for name in ("alpha", "beta"):
                given = safe_getattr(args, f"deepnorm_{side}_{name}")
                if given is not None and side not in stacks:
                    raise ValueError(f"--deepnorm-{side}-{name} cannot be used with --arch "
                                     f"{args.arch}: the model has no {side}")
                if name == "alpha" and given not in (None, 1.0) and constants.is_pre_ln_form(form):
                    raise ValueError(f"--deepnorm-{side}-alpha cannot be used with "
                                     f"--deepnorm-constants {form}: Pre-LN has no skip-path "
                                     f"scale")
        for side in stacks:
            depth_transfer_of(args, side)  # raises on a missing or bad --depth-base
        cls.constants_for(args, stacks)  # raises on non-positive depths or alpha/beta overrides
        layernorm_lr.validate(args)

    def setup(self, cfg):
        c = self.constants_for(cfg, self.stacks)
        alpha, beta = getattr(c, f"{self.side}_alpha"), getattr(c, f"{self.side}_beta")
        # The arch hook rejects Pre-LN with a user-facing message; this guards direct
        # construction. The one Pre-LN use is the optimizer-aware Pre-LN form
        # (--deepnorm-constants pre_ln_*), where alpha = 1: x + G(LN(x)) with the DeepNorm gain.
        if self.normalize_before and alpha != 1:
            raise ValueError(f"DeepNorm's alpha is defined for Post-LN only; {self.side} "
                             f"normalize_before is set with alpha = {alpha}")
        self.alpha = alpha
        self.beta = beta
        # The constants travel with the weights: a checkpoint keeps the alpha it was trained
        # with, and loading it restores that alpha (``_restore_trained_alpha``) even where the
        # arguments now give another (a changed formula, --encoder-layers-to-keep, a different
        # --deepnorm-constants on load). float64 so that the recorded value is exact.
        self.register_buffer(RECORD, torch.tensor([alpha, beta], dtype=torch.float64))
        self._register_load_state_dict_pre_hook(self._restore_trained_alpha)
        deepnorm_init_(self, beta)

    def _restore_trained_alpha(self, state_dict, prefix, *args):
        key = prefix + RECORD
        if key not in state_dict:  # a checkpoint from before the constants were recorded
            state_dict[key] = self.deepnorm_constants.clone()
            return
        trained = float(state_dict[key][0])
        # --fp16 training stores the buffer in half precision: equal within its rounding means
        # the same alpha, and the exact value built here is kept
        precision = torch.finfo(state_dict[key].dtype).eps * 2
        if abs(trained - self.alpha) > precision * abs(self.alpha):
            logger.warning(
                "%s%s: the checkpoint was trained with alpha = %.6g; these "
                "arguments give %.6g. Using the trained %.6g, so the model computes what it was "
                "trained to.", prefix, RECORD, trained, self.alpha, trained)
            self.alpha = trained

    @classmethod
    def stack_built(cls, stack):
        # --deepnorm-ln-lr-multiplier: tag the LayerNorms of the stack's layers with their k
        if not len(stack.layers):
            return
        first = stack.layers[0]
        form = deepnorm_form(stack.cfg)
        k = layernorm_lr.stack_multipliers(
            safe_getattr(stack.cfg, "deepnorm_ln_lr_multiplier"),
            cls.constants_for(stack.cfg, first.stacks), form)[first.side]
        layernorm_lr.tag_layers(stack.layers, k)

    def residual_connection(self, x, residual):
        # x is the branch output, already through dropout; residual is the skip path (T x B x C).
        # One fused op: no temporary tensor for alpha * residual (memory and speed as Post-LN).
        return torch.add(x, residual, alpha=self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha:.4f}, beta={self.beta:.4f}"


DeepNormEncoderLayer, DeepNormDecoderLayer = layer_classes("DeepNorm")


# --- DS-Init ---------------------------------------------------------------------------------

@layer_rule
class DSInit(MethodLayer):
    """DS-Init (Zhang, Titov & Sennrich 2019): Post-LN; every weight matrix of layer l is
    Xavier-uniform with gain alpha / sqrt(l), l counted from 1 in each stack. Choices: all six
    projections (q, k, v, out, fc1, fc2; cross-attention too) are re-drawn and their biases start
    at zero; the merged attention of the same paper is a separate contribution, not included."""

    @classmethod
    def validate(cls, args, method, stacks=ENCODER_DECODER):
        super().validate(args, method, stacks)
        constants.ds_init_gain(1, args.ds_init_alpha)  # raises outside (0, 1]

    def setup(self, cfg):
        self.gain = constants.ds_init_gain(self.index, cfg.ds_init_alpha)
        _reinit_(self, lambda role, w: nn.init.xavier_uniform_(w, gain=self.gain))


# --- Lipschitz-constrained init ---------------------------------------------------------------

@layer_rule
class Lipschitz(MethodLayer):
    """Lipschitz-constrained initialisation (Xu et al. 2020, arXiv 1911.03179): Post-LN (the
    paper's "v1" order) with every weight matrix drawn from U(+-1/sqrt(fan_in)) (Kaiming-uniform
    with gain sqrt(1/3): a third of the variance-preserving value) and zero biases, so that the
    sum entering each LayerNorm has a standard deviation below one and the LN does not shrink
    the residual. Choice: as in the authors' code for layers; embeddings keep fairseq's init."""

    def setup(self, cfg):
        def draw(role, weight):
            bound = 1.0 / math.sqrt(weight.size(1))
            nn.init.uniform_(weight, -bound, bound)
        _reinit_(self, draw)


# --- Admin ------------------------------------------------------------------------------------

@layer_rule
class Admin(PerSublayer):
    """Admin (Liu et al. 2020): Post-LN with ``LN(omega_i * x + G(x))``, omega_i a learnable
    vector per sub-layer (``omega_init + omega_delta``). omega starts at one and is set by a profiling pass on the first
    training batch (``profile_admin_``): omega_i = sqrt(sum_{j<i} Var[y_j]), the y_j being the
    stack's input (embeddings) and the outputs of the sub-layers before i in the same stack,
    measured in the plain Post-LN network (omega = 1). Choices: the stack input counts as y_0;
    each stack (encoder, decoder) accumulates separately; profiling runs without dropout."""

    def setup(self, cfg):
        # omega = omega_init + omega_delta: the profiled start values live in a buffer and the
        # learnable part starts at 0. Learning omega directly would be the same function and the
        # same gradients, but fairseq's --fp16 optimizer keeps fp32 master copies of the
        # parameters made before the first batch, which would undo the profiled values.
        n, d = self.num_sublayers, self.embed_dim
        self.register_buffer("omega_init", torch.ones(n, d))
        self.omega_delta = nn.Parameter(torch.zeros(n, d))
        self.profile: List[float] = None  # set to a list to record variances

    @property
    def omega(self):
        return self.omega_init + self.omega_delta

    @classmethod
    def initialise_from_batch(cls, model, net_input):
        profile_admin_(model, net_input)

    def sublayer_residual(self, i, x, residual):
        if self.profile is not None:
            if self.index == 1 and i == 0:
                self.profile.append(residual.detach().float().var().item())
            self.profile.append(x.detach().float().var().item())
        return residual * (self.omega_init[i] + self.omega_delta[i]) + x


def collective_device(model_device: torch.device, backend: str) -> torch.device:
    """The device on which to hand a tensor to a ``torch.distributed`` collective of a process
    group with ``backend``, for a model on ``model_device``: NCCL reduces CUDA tensors only (the
    model's GPU, or the current one for a CPU model); gloo reduces CPU tensors everywhere; any
    other backend (mpi, a per-device spec such as "cpu:gloo,cuda:nccl") gets the model's."""
    if backend == "nccl":
        if model_device.type == "cuda":
            return model_device
        return torch.device("cuda", torch.cuda.current_device())
    if backend == "gloo":
        return torch.device("cpu")
    return model_device


def profile_admin_(model, sample_input: dict) -> None:
    """Admin's profiling pass: run ``model`` once on ``sample_input`` with omega = 1 and no
    dropout, then set every omega_i to sqrt(sum of the variances before sub-layer i)."""
    stacks = [[m for m in stack.modules() if isinstance(m, Admin)]
              for stack in (model.encoder, model.decoder)]
    was_training = model.training
    with torch.no_grad():
        for layers in stacks:
            for layer in layers:
                layer.omega_init.fill_(1.0)
                layer.omega_delta.zero_()
                layer.profile = []
        model.eval()
        try:
            model(**sample_input)
        finally:
            model.train(was_training)
        for layers in stacks:
            variances = torch.tensor([v for layer in layers for v in layer.profile])
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                # the same omega on every worker: the mean of the workers' variances, reduced on
                # the device the process group can reduce (NCCL: CUDA tensors only)
                device = collective_device(next(model.parameters()).device,
                                           torch.distributed.get_backend())
                variances = variances.to(device)
                torch.distributed.all_reduce(variances)
                variances = variances.cpu() / torch.distributed.get_world_size()
            before = torch.cumsum(variances, 0)  # before[k]: y_0 .. y_k
            k = 0
            for layer in layers:
                for i in range(layer.num_sublayers):
                    layer.omega_init[i].fill_(before[k].sqrt().item())
                    k += 1
                layer.profile = None


# --- ReZero -----------------------------------------------------------------------------------

@layer_rule
class ReZero(NoLayerNorm):
    """ReZero (Bachlechner et al. 2020): no LayerNorm, ``x + a * G(x)`` with one learnable
    scalar a per layer starting at 0, shared by the layer's sub-layers as in the authors' code
    (majumderb/rezero)."""

    def setup(self, cfg):
        super().setup(cfg)
        self.resweight = nn.Parameter(torch.zeros(1))

    def residual_connection(self, x, residual):
        return residual + self.resweight * x


# --- R-Fixup ----------------------------------------------------------------------------------

@layer_rule
class RFixup(NoLayerNorm, PerSublayer):
    """Fixup for Transformers (Zhang, Dauphin & Ma 2019; "R-Fixup" in the DeepNet paper): no
    LayerNorm; ``x + m_i * G(x)`` with a learnable scalar multiplier m_i per branch starting at 1;
    the last weight layer of each branch (out_proj, fc2) starts at zero and the other value-path
    layer (v_proj, fc1) keeps fairseq's init scaled by L^(-1/2) (Fixup's L^(-1/(2m-2)), m = 2).
    Choices: L counts the residual branches of the layer's own stack (2N encoder, 3M decoder);
    q/k keep fairseq's init; Fixup's scalar biases before each weight layer are not added,
    because every fairseq Linear already has a (vector) bias, which subsumes them."""

    def setup(self, cfg):
        super().setup(cfg)
        self.multiplier = nn.Parameter(torch.ones(self.num_sublayers))
        branches = self.depth * (3 if self.side == "decoder" else 2)
        self.scale = constants.fixup_scale(branches, branch_depth=2)
        with torch.no_grad():
            for role, linear in linears(self).items():
                if role.endswith(("out_proj", "fc2")):
                    nn.init.zeros_(linear.weight)
                    nn.init.zeros_(linear.bias)
                elif role.endswith(("v_proj", "fc1")):
                    linear.weight.mul_(self.scale)

    def sublayer_residual(self, i, x, residual):
        return residual + self.multiplier[i] * x


# --- T-Fixup ----------------------------------------------------------------------------------

@layer_rule
class TFixup(NoLayerNorm):
    """T-Fixup (Huang et al. 2020): no LayerNorm (and no warmup: a training setting of its
    declaration); every weight matrix Xavier-uniform (gain 1), then v, out_proj, fc1, fc2 scaled
    by 0.67 N^(-1/4) in the encoder and (9M)^(-1/4) in the decoder (self- and cross-attention);
    the input embeddings are scaled by (9M)^(-1/4) (``embedding_scale``). Choice: biases start
    at zero; fairseq's sqrt(d) embedding scale is kept."""

    @classmethod
    def embedding_scale(cls, args):
        return constants.t_fixup_scales(args.encoder_layers, args.decoder_layers)[1]

    def setup(self, cfg):
        super().setup(cfg)
        encoder_scale, decoder_scale = constants.t_fixup_scales(cfg.encoder.layers,
                                                                cfg.decoder.layers)
        self.scale = decoder_scale if self.side == "decoder" else encoder_scale

        def draw(role, weight):
            nn.init.xavier_uniform_(weight)
            if value_path(role):
                weight.data.mul_(self.scale)
        _reinit_(self, draw)


# --- NormFormer -------------------------------------------------------------------------------

@layer_rule
class NormFormer(MethodLayer):
    """NormFormer (Shleifer et al. 2021): Pre-LN plus a LayerNorm after self-attention
    (``attn_ln``), learnable per-head scales (``c_attn``, starting at 1) and a LayerNorm after
    the FFN's activation (``ffn_layernorm``), for encoder and decoder. The names and positions are
    fairseq's ``transformer_lm`` ones (head scaling after out_proj, as fairseq does; the decoder
    layer applies them itself, the encoder layer through forward hooks). Choices: cross-attention
    gets no extra LN, as in fairseq; the optional residual scaling (--scale-resids) is off."""

    def setup(self, cfg):
        if not self.normalize_before:
            raise ValueError("NormFormer is built from Pre-LN layers")
        ffn_dim = getattr(cfg, self.side).ffn_embed_dim
        heads = self.self_attn.num_heads
        self.attn_ln = LayerNorm(self.embed_dim)
        self.c_attn = nn.Parameter(torch.ones(heads))
        self.ffn_layernorm = LayerNorm(ffn_dim)
        if self.side == "encoder":  # fairseq's decoder layer applies the three itself
            self.self_attn.register_forward_hook(self._normformer_attention)
            self.fc2.register_forward_pre_hook(self._normformer_ffn)

    def _normformer_attention(self, module, inputs, output):
        x, weights = output
        tgt_len, bsz, dim = x.shape
        heads = self.c_attn.numel()
        x = (x.view(tgt_len, bsz, heads, dim // heads) * self.c_attn[:, None]).view_as(x)
        return self.attn_ln(x), weights

    def _normformer_ffn(self, module, inputs):
        return (self.ffn_layernorm(inputs[0]),)


# --- DLCL -------------------------------------------------------------------------------------

class LayerAggregation(nn.Module):
    """DLCL's dynamic linear combination of layers (Wang et al. 2019, arXiv 1906.01787) for one
    stack of L layers: the input of layer l+1 (and the stack's output, l = L) is
    ``sum_{k=0..l} W[l+1, k] * LN_k(y_k)``, y_0 the embeddings and y_k the output of layer k.
    W is learnable and starts as the average, W[l+1, k] = 1 / (l+1) (the authors' "avg" init).
    Choice: every y_k, y_0 included, has its own LayerNorm; the stack's final LN is kept.

    Holds the y_k of the forward in progress (``outputs``), reset by the first layer."""

    def __init__(self, num_layers: int, embed_dim: int):
        super().__init__()
        rows = torch.arange(1, num_layers + 2, dtype=torch.float32)[:, None]
        weights = torch.tril(torch.ones(num_layers + 1, num_layers + 1)) / rows
        self.weights = nn.Parameter(weights)  # row l: weights of the input of layer l+1
        self.layer_norms = nn.ModuleList(LayerNorm(embed_dim) for _ in range(num_layers + 1))
        self.outputs: List[torch.Tensor] = []

    def push(self, y):
        self.outputs.append(self.layer_norms[len(self.outputs)](y))

    def combine(self):
        k = len(self.outputs)
        weights = self.weights[k - 1, :k]
        return sum(w * y for w, y in zip(weights, self.outputs))


class StackState(MethodLayer):
    """Base of the rules whose layers pass state to the later layers of their stack outside
    fairseq's ``x`` (DLCL's aggregation, ResiDual's dual stream): the state lives on the stack
    (``stack_built``), so a checkpointed layer would recompute it without its graph and a
    dropped layer would break the chain. The method's declaration names it
    (``Method.stack_state``, which the recipes' planning reads without torch); the stack saves
    it as ``state_attr`` (a checkpoint key: keep it), built by ``new_state``, and every layer
    reaches it as ``self.stack_state``."""

    state_attr = ""

    @classmethod
    def new_state(cls, num_layers: int, embed_dim: int) -> nn.Module:
        raise NotImplementedError

    @classmethod
    def stack_built(cls, stack):
        # the stack owns (and saves) the state; each layer holds a plain reference, not a
        # sub-module, so the state is saved once
        side = "decoder" if isinstance(stack, TransformerDecoderBase) else "encoder"
        state = cls.new_state(len(stack.layers), getattr(stack.cfg, side).embed_dim)
        setattr(stack, cls.state_attr, state)
        for layer in stack.layers:
            layer.__dict__["stack_state"] = state

    @staticmethod
    def layer_output(out):
        """The hidden states of a fairseq layer's output (the decoder layer returns a tuple)."""
        return out[0] if isinstance(out, tuple) else out

    @staticmethod
    def with_layer_output(out, y):
        """``out`` with its hidden states replaced by ``y``."""
        return (y, *out[1:]) if isinstance(out, tuple) else y

    @classmethod
    def validate(cls, args, method, stacks=ENCODER_DECODER):
        super().validate(args, method, stacks)
        if not method.stack_state:  # the recipes would plan it as checkpointable
            raise ValueError(f"method {method.name}: its layer rule {cls.__name__} passes state "
                             f"between layers; name it in its declaration's stack_state")
        if getattr(args, "checkpoint_activations", False):
            raise ValueError(
                f"--checkpoint-activations cannot be used with --arch {args.arch}: "
                f"{method.stack_state} passes every layer's output to the later layers outside "
                f"the checkpointed forward. Drop the flag (or reduce --max-tokens).")
        for side in stacks:
            if getattr(args, f"{side}_layerdrop", 0) or getattr(args, f"{side}_layers_to_keep",
                                                                   None):
                raise ValueError(
                    f"--{side}-layerdrop / --{side}-layers-to-keep cannot be used with --arch "
                    f"{args.arch}: {method.stack_state} is defined over all layers.")


@layer_rule
class DLCL(StackState):
    """DLCL (Wang et al. 2019): Pre-LN layers whose input is ``LayerAggregation.combine`` of all
    earlier outputs. It changes what flows between layers, so it wraps
    the layer's forward (fairseq's stack loop is kept): layer 1 resets the stack's aggregation
    and stores y_0; each layer replaces its input by the combination and stores its output; the
    last layer returns the final combination. Not combinable with --checkpoint-activations."""

    state_attr = "layer_aggregation"
    new_state = LayerAggregation

    def setup(self, cfg):
        if not self.normalize_before:
            raise ValueError("DLCL is built from Pre-LN layers")

    def forward(self, x, *args, **kwargs):
        agg = self.stack_state
        if self.index == 1:
            agg.outputs = []
            agg.push(x)
        out = super().forward(agg.combine(), *args, **kwargs)
        y = self.layer_output(out)
        agg.push(y)
        if self.index == self.depth:
            y = agg.combine()
            agg.outputs = []  # do not keep the activations alive after the forward
        return self.with_layer_output(out, y)


# --- the methods after DeepNet (2022 on) -----------------------------------------------------

_LAYER_NORMS = ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")


def _require_pre_ln(layer, name: str) -> None:
    if not layer.normalize_before:
        raise ValueError(f"{name} is built from Pre-LN layers")


def magneto_gains(encoder_layers: int, decoder_layers: int) -> Tuple[float, float]:
    """Sub-LN's init gains (encoder, decoder) for an N-layer encoder and an M-layer decoder:
    gamma_e = sqrt(log(3M) log(2N) / 3), gamma_d = sqrt(log(3M)). From Wang et al. 2022
    ("Foundation Transformers", arXiv 2210.06423, the initialisation of Sec. 2.2 derived in its
    Sec. 4), as microsoft/torchscale's encoder-decoder ``subln`` init computes them (checked
    against its architecture/encoder.py and decoder.py)."""
    n, m = encoder_layers, decoder_layers
    return math.sqrt(math.log(3 * m) * math.log(2 * n) / 3), math.sqrt(math.log(3 * m))


@layer_rule
class SubLN(MethodLayer):
    """Sub-LN / Magneto (Wang et al. 2022, arXiv 2210.06423; microsoft/torchscale ``subln``):
    Pre-LN plus a LayerNorm inside each sub-layer, on the self-attention's heads before the
    output projection (``self_attn.inner_attn_ln``) and on the FFN's activation before fc2
    (``ffn_layernorm``); v_proj, out_proj, fc1 and fc2 (weights and biases) of the
    self-attention and FFN start at fairseq's init times gamma (``magneto_gains``). Choices, as
    torchscale: the cross-attention gets no inner LN and keeps fairseq's init."""

    def setup(self, cfg):
        _require_pre_ln(self, "Sub-LN")
        attn = self.self_attn
        attn.inner_attn_ln = LayerNorm(self.embed_dim)
        # fairseq's fused path (F.multi_head_attention_forward) reads out_proj's weight without
        # calling it, which would skip the hook: take the path that calls out_proj
        attn.skip_embed_dim_check = True
        attn.out_proj.register_forward_pre_hook(self._subln_attention)
        self.ffn_layernorm = LayerNorm(getattr(cfg, self.side).ffn_embed_dim)
        if self.side == "encoder":  # fairseq's decoder layer applies ffn_layernorm itself
            self.fc2.register_forward_pre_hook(self._subln_ffn)
        gains = magneto_gains(cfg.encoder.layers, cfg.decoder.layers)
        self.gain = gains[1] if self.side == "decoder" else gains[0]
        with torch.no_grad():
            for role, linear in linears(self).items():
                if role in ("self_attn.v_proj", "self_attn.out_proj", "fc1", "fc2"):
                    linear.weight.mul_(self.gain)
                    if linear.bias is not None:
                        linear.bias.mul_(self.gain)

    def _subln_attention(self, module, inputs):
        return (self.self_attn.inner_attn_ln(inputs[0]),)

    def _subln_ffn(self, module, inputs):
        return (self.ffn_layernorm(inputs[0]),)


@layer_rule
class PeriLN(MethodLayer):
    """Peri-LN (Kim et al. 2025, arXiv 2502.02732): ``x + LN_out(F(LN_in(x)))``, a LayerNorm on
    each sub-layer's input (Pre-LN's) and one on its output (``out_ln[i]``, sub-layers in
    order), with Pre-LN's final LayerNorm. Defined for decoder-only LMs; Choices: the decoder's
    cross-attention is one more sub-layer with the same rule; the output LN is applied to the
    branch before its dropout; weights keep fairseq's init and the output LNs start at
    gain 1, bias 0; no LayerNorm is added on the embeddings."""

    def setup(self, cfg):
        _require_pre_ln(self, "Peri-LN")
        self.out_ln = nn.ModuleList(LayerNorm(self.embed_dim) for _ in range(self.num_sublayers))
        attentions = [self.self_attn] + ([self.encoder_attn] if self.num_sublayers == 3 else [])
        for i, attn in enumerate(attentions):
            attn.register_forward_hook(functools.partial(self._normalise_attention, i))
        self.fc2.register_forward_hook(self._normalise_ffn)

    def _normalise_attention(self, i, module, inputs, output):
        x, weights = output
        return self.out_ln[i](x), weights

    def _normalise_ffn(self, module, inputs, output):
        return self.out_ln[-1](output)


@layer_rule
class LNScaling(MethodLayer):
    """LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth", arXiv 2502.05795): Pre-LN whose
    sub-layer LayerNorms' outputs are scaled by 1/sqrt(l), l the layer's 1-based index in its
    stack: ``x + G(LN(x) / sqrt(l))``. Defined for decoder-only LMs; Choices: the decoder's
    cross-attention input LN is scaled as the others; each stack counts its own l; the stack's
    final LayerNorm is not scaled; weights keep fairseq's init."""

    def setup(self, cfg):
        _require_pre_ln(self, "LayerNorm Scaling")
        self.ln_scale = self.index ** -0.5
        for name in _LAYER_NORMS:
            norm = getattr(self, name, None)
            if norm is not None:
                norm.register_forward_hook(self._scale)

    def _scale(self, module, inputs, output):
        return output * self.ln_scale


@layer_rule
class DeepScaleLM(MethodLayer):
    """DeepScaleLM (Kedia et al., ICML 2024, arXiv 2403.09635; akhilkedia/TranformersGetStable):
    Pre-LN with ``lambda x + beta G(LN(x))``, lambda^2 + beta^2 = 1, beta^2 = 2 / (sub-layers of
    the stack) (``constants.deepscalelm_scales``), and a moment-preserving init: q/k variance
    1/d, fc1/fc2 sqrt(2 (1 - p) / (d d_ffn)), v/out sqrt((1 - p) / r) / d with r the token
    correlation the paper's model predicts at that sub-layer's input, all biases 0
    (``constants.deepscalelm_gains``). Choices (its code is BERT-only): each stack counts its own
    sub-layers (2N, 3M); the cross-attention is a sub-layer like the others, its v/out drawn with
    the encoder output's correlation; embeddings keep fairseq's init (the Pre-LN LayerNorms
    normalise them); the FFN factor is ReLU's (fairseq's default activation)."""

    def setup(self, cfg):
        _require_pre_ln(self, "DeepScaleLM")
        if cfg.activation_fn != "relu":
            raise ValueError(f"DeepScaleLM's init is derived for ReLU; got --activation-fn "
                             f"{cfg.activation_fn}")
        p = cfg.dropout
        self.lam, self.beta = constants.deepscalelm_scales(self.num_sublayers * self.depth)
        kinds = ("attn", "cross", "ffn") if self.num_sublayers == 3 else ("attn", "ffn")
        # the correlation at each sub-layer's input, from the embeddings through the layers below
        r = constants.DEEPSCALELM_INPUT_CORRELATION * (1 - p)
        inputs = {}
        for _ in range(self.index):
            for kind in kinds:
                inputs[kind] = r
                r = constants.deepscalelm_correlation_after(r, kind, p, self.lam, self.beta)
        if "cross" in kinds:  # its values are the encoder's output
            inputs["cross"] = self.encoder_output_correlation(cfg, p)
        width, ffn = cfg.encoder.embed_dim if self.side == "encoder" else cfg.decoder.embed_dim, \
            (cfg.encoder if self.side == "encoder" else cfg.decoder).ffn_embed_dim
        for role, linear in linears(self).items():
            if role.endswith(("q_proj", "k_proj")):
                var = constants.deepscalelm_gains(width, ffn, p, 1.0)["qk"]
            elif role in ("fc1", "fc2"):
                var = constants.deepscalelm_gains(width, ffn, p, 1.0)["ffn"]
            else:
                kind = "cross" if role.startswith("encoder_attn") else "attn"
                var = constants.deepscalelm_gains(width, ffn, p, inputs[kind])["vo"]
            nn.init.normal_(linear.weight, std=var ** 0.5)
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    @staticmethod
    def encoder_output_correlation(cfg, p: float) -> float:
        lam, beta = constants.deepscalelm_scales(2 * cfg.encoder.layers)
        r = constants.DEEPSCALELM_INPUT_CORRELATION * (1 - p)
        for _ in range(cfg.encoder.layers):
            for kind in ("attn", "ffn"):
                r = constants.deepscalelm_correlation_after(r, kind, p, lam, beta)
        return r

    def residual_connection(self, x, residual):
        return torch.add(residual * self.lam, x, alpha=self.beta)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, lambda={self.lam:.4f}, beta={self.beta:.4f}"


class DynamicTanh(nn.Module):
    """DyT (Zhu et al. 2025): ``weight * tanh(alpha * x) + bias`` over the last dimension,
    alpha a learnable scalar starting at ``alpha0``, weight ones and bias zeros."""

    def __init__(self, dim: int, alpha0: float):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), float(alpha0)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return self.weight * torch.tanh(self.alpha * x) + self.bias

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, alpha0={self.alpha.item():g}"


@layer_rule
class DyT(MethodLayer):
    """DyT (Zhu et al. 2025, "Transformers without Normalization", arXiv 2503.10622;
    jiachenzhu/DyT): Pre-LN with every LayerNorm replaced by ``DynamicTanh`` (alpha0 =
    ``--dyt-alpha-init``, default 0.5, the paper's default outside LLMs), the stacks' final
    norms (and ``--layernorm-embedding``'s, if used) too. Weights keep fairseq's init."""

    def setup(self, cfg):
        _require_pre_ln(self, "DyT")
        for name in _LAYER_NORMS:
            if getattr(self, name, None) is not None:
                setattr(self, name, DynamicTanh(self.embed_dim, cfg.dyt_alpha_init))

    @classmethod
    def stack_built(cls, stack):
        for name in ("layer_norm", "layernorm_embedding"):
            norm = getattr(stack, name, None)
            if norm is not None:
                setattr(stack, name, DynamicTanh(norm.weight.numel(), stack.cfg.dyt_alpha_init))


@layer_rule
class MixLN(MethodLayer):
    """Mix-LN (Li et al. 2025, arXiv 2412.13795): Post-LN in the lowest floor(alpha L) layers of
    a stack, Pre-LN above them (alpha = ``--mix-ln-ratio``, default 0.25, the paper's).
    Defined for decoder-only LMs; Choices: the encoder and the decoder are split separately,
    each by its own depth (6L-6L: layer 1 of each Post-LN); the stacks keep Pre-LN's final
    LayerNorm, after the Pre-LN layers; weights keep fairseq's init."""

    def setup(self, cfg):
        ratio = cfg.mix_ln_ratio
        if not 0 <= ratio < 1:
            raise ValueError(f"--mix-ln-ratio must be in [0, 1), got {ratio}")
        _require_pre_ln(self, "Mix-LN")  # the arch sets Pre-LN; the rule switches the lowest
        self.normalize_before = self.index > math.floor(ratio * self.depth)


@layer_rule
class B2T(PerSublayer):
    """B2T connection (Takase et al. 2023, arXiv 2206.00330; takase/b2t_connection): Post-LN
    whose last sub-layer (the FFN) also adds the layer's input, skipping the layer's
    intermediate LayerNorms: encoder ``LN2(h + FFN(h) + x)`` with ``h = LN1(x + Attn(x))``; in
    the decoder the input skips both the self- and cross-attention LNs. Init: every weight
    matrix of the layer (attention and FFN, cross-attention too) is fairseq's draw times
    L^(-1/2), L the depth of the layer's stack, biases untouched: the authors' rescaled init
    (``rescaling_init`` in their modules/transformer_layer.py, applied with the connection)."""

    def setup(self, cfg):
        self.init_scale = self.depth ** -0.5
        with torch.no_grad():
            for linear in linears(self).values():
                linear.weight.mul_(self.init_scale)

    def sublayer_residual(self, i, x, residual):
        if i == 0:
            self._layer_input = residual
        out = residual + x
        if i == self.num_sublayers - 1:
            out = out + self._layer_input
            self._layer_input = None
        return out


class DualStream(nn.Module):
    """ResiDual's second residual stream of one stack: ``value`` is the running sum d of the
    stack input and every branch output of the forward in progress (set by the first layer,
    released by the last), ``norm`` the LayerNorm applied to it at the top. eps 1e-7 as the
    authors' code builds it. (``num_layers``: the ``StackState.new_state`` signature.)"""

    def __init__(self, num_layers: int, embed_dim: int):
        super().__init__()
        self.norm = LayerNorm(embed_dim, eps=1e-7)
        self.value = None


@layer_rule
class ResiDual(StackState):
    """ResiDual (Xie et al. 2023, arXiv 2304.14802; microsoft/ResiDual): Post-LN layers, and
    beside their stream a dual stream that sums the raw branch outputs. Per sub-layer, with
    g = dropout(G(x)): ``x <- LN(x + g)`` (fairseq's Post-LN sub-layer) and ``d <- d + g``
    (``residual_connection``); both start at the stack input, and the stack's output is
    ``x + LN(d)`` (added by the last layer). The decoder's cross-attention is one more sub-layer
    with the same rule, as in the authors' code; weights keep fairseq's init. Choices, the
    authors' defaults: the scale of the branch outputs on the dual stream and the weight of x
    in the output (their --*-res-input-norm-scale and --*-alpha) are 1 and not options."""

    state_attr = "dual_stream"
    new_state = DualStream

    def setup(self, cfg):
        if self.normalize_before:
            raise ValueError("ResiDual is built from Post-LN layers")

    def forward(self, x, *args, **kwargs):
        stream = self.stack_state
        if self.index == 1:
            stream.value = x
        out = super().forward(x, *args, **kwargs)
        if self.index == self.depth:
            y = self.layer_output(out) + stream.norm(stream.value)
            stream.value = None  # do not keep the activations alive after the forward
            out = self.with_layer_output(out, y)
        return out

    def residual_connection(self, x, residual):
        # x: the branch output after dropout, residual: the Post-LN stream's input
        self.stack_state.value = self.stack_state.value + x
        return residual + x
