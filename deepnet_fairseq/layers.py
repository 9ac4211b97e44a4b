"""DeepNorm Transformer layers: fairseq's Post-LN layers with a scaled skip path and DeepNorm init.

fairseq's layers compute, for each sub-layer (self-attention, cross-attention, FFN),
``x = LayerNorm(residual_connection(dropout(G(x)), residual))``. Overriding the
``residual_connection`` hook is therefore all DeepNorm needs from the forward pass:
``LayerNorm(alpha * x + dropout(G(x)))``, with dropout on the branch before the sum.
"""

import logging

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)

from .initialization import deepnorm_init_

logger = logging.getLogger(__name__)

RECORD = "deepnorm_constants"
"""Name of the buffer in which each DeepNorm layer records the (alpha, beta) it was built with."""


class DeepNormResidual:
    """The DeepNorm rule for a fairseq layer: scaled skip path and DeepNorm init.

    Mixed in before fairseq's layer class; ``_apply_deepnorm`` runs at the end of the layer's
    constructor, so the weights are initialised before fairseq wraps the layer.
    """

    def _apply_deepnorm(self, side: str, alpha: float, beta: float) -> None:
        # The arch hook rejects Pre-LN with a user-facing message; this guards direct
        # construction. The one Pre-LN use is the optimizer-aware Pre-LN form
        # (--deepnorm-constants pre_ln_*), where alpha = 1: x + G(LN(x)) with the DeepNorm gain.
        if self.normalize_before and alpha != 1:
            raise ValueError(f"DeepNorm's alpha is defined for Post-LN only; {side} "
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

    def residual_connection(self, x, residual):
        # x is the branch output, already through dropout; residual is the skip path (T x B x C).
        # One fused op: no temporary tensor for alpha * residual (memory and speed as Post-LN).
        return torch.add(x, residual, alpha=self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha:.4f}, beta={self.beta:.4f}"


class DeepNormEncoderLayer(DeepNormResidual, TransformerEncoderLayerBase):
    """Post-LN encoder layer computing ``LayerNorm(alpha * x + dropout(G(x)))``.

    Args:
        cfg: fairseq ``TransformerConfig``.
        alpha: skip-path scale of every sub-layer of the encoder.
        beta: Xavier-normal gain of fc1, fc2, v_proj, out_proj (see ``initialization``).
    """

    def __init__(self, cfg, alpha: float, beta: float, return_fc: bool = False):
        super().__init__(cfg, return_fc=return_fc)
        self._apply_deepnorm("encoder", alpha, beta)


class DeepNormDecoderLayer(DeepNormResidual, TransformerDecoderLayerBase):
    """Post-LN decoder layer computing ``LayerNorm(alpha * x + dropout(G(x)))`` for the
    self-attention, cross-attention and FFN sub-layers; arguments as ``DeepNormEncoderLayer``.
    """

    def __init__(self, cfg, alpha: float, beta: float, no_encoder_attn: bool = False):
        super().__init__(cfg, no_encoder_attn=no_encoder_attn)
        self._apply_deepnorm("decoder", alpha, beta)


def wrap_for_training(layer, cfg):
    """Apply fairseq's activation-checkpointing and FSDP wrappers to an initialised layer.

    The same two steps as fairseq's ``TransformerEncoderBase.build_encoder_layer``: with
    ``--checkpoint-activations`` the layer is checkpointed and FSDP always wraps it.
    """
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=0 if checkpoint else cfg.min_params_to_wrap)
