"""DeepNorm's initialisation rule, as data: which parameters it touches and with what gain.

Decided in DESIGN section 2 (and explained in the README):

* ``fc1``, ``fc2``, ``v_proj`` and ``out_proj`` of every attention (self and the decoder's
  cross-attention ``encoder_attn``) are re-drawn from Xavier-normal with gain ``beta``;
* ``q_proj`` and ``k_proj`` are re-drawn from Xavier-normal with gain 1 (they do not sit on the
  residual branch's value path, so the paper does not down-scale them);
* the biases of all of these start at zero;
* embeddings, LayerNorms and the output projection keep fairseq's defaults.

We re-initialise rather than rescale: fairseq starts q/k/v_proj with
``xavier_uniform_(gain=1/sqrt(2))``, so scaling what is there would give beta/sqrt(2).
"""

from typing import Dict, Tuple

import torch.nn as nn

ATTENTIONS = ("self_attn", "encoder_attn")

# Sub-module names (relative to a Transformer layer) whose weight gets gain beta.
BETA_GAIN_ROLES: Tuple[str, ...] = ("fc1", "fc2") + tuple(
    f"{attn}.{proj}" for attn in ATTENTIONS for proj in ("v_proj", "out_proj")
)
# Sub-module names whose weight gets gain 1.
UNIT_GAIN_ROLES: Tuple[str, ...] = tuple(
    f"{attn}.{proj}" for attn in ATTENTIONS for proj in ("q_proj", "k_proj")
)


def deepnorm_gains(beta: float) -> Dict[str, float]:
    """The Xavier-normal gain of each role, for a layer whose side has init gain ``beta``."""
    gains = {role: beta for role in BETA_GAIN_ROLES}
    gains.update({role: 1.0 for role in UNIT_GAIN_ROLES})
    return gains


def deepnorm_init_(layer: nn.Module, beta: float) -> None:
    """Re-initialise, in place, the DeepNorm roles present in one Transformer layer.

    Roles absent from the layer (an encoder layer has no ``encoder_attn``) are skipped.
    """
    modules = dict(layer.named_modules())
    for role, gain in deepnorm_gains(beta).items():
        linear = modules.get(role)
        if linear is None:
            continue
        nn.init.xavier_normal_(linear.weight, gain=gain)
        if linear.bias is not None:
            nn.init.zeros_(linear.bias)
