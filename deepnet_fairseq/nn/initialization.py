"""DeepNorm's initialisation rule, as data: which parameters it touches and with what gain.

The decisions (docs/design.md, "Initialisation", explains each):

* ``fc1``, ``fc2``, ``v_proj`` and ``out_proj`` of every attention (self and the decoder's
  cross-attention ``encoder_attn``) are re-drawn from Xavier-normal with gain ``beta``;
* ``q_proj`` and ``k_proj`` are re-drawn from Xavier-normal with gain 1 (they do not sit on the
  residual branch's value path, so the paper does not down-scale them);
* the biases of all of these start at zero;
* embeddings, LayerNorms and the output projection keep fairseq's defaults.

We re-initialise rather than rescale: fairseq starts q/k/v_proj with
``xavier_uniform_(gain=1/sqrt(2))``, so scaling what is there would give beta/sqrt(2).

The role names here are the one list of a layer's weight matrices; the compared methods'
init rules (``method_layers``) use it too.
"""

from typing import Dict, Tuple

import torch.nn as nn

ATTENTIONS = ("self_attn", "encoder_attn")
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")
ROLES: Tuple[str, ...] = ("fc1", "fc2") + tuple(f"{a}.{p}" for a in ATTENTIONS for p in PROJECTIONS)
"""Every weight matrix of a fairseq Transformer layer, by its module name."""



def value_path(role: str) -> bool:
    """Whether a role carries the residual branch's signal (not q/k, which only weight it): the
    roles DeepNorm, T-Fixup and the other init rules scale."""
    return not role.endswith(("q_proj", "k_proj"))


# Sub-module names (relative to a Transformer layer) whose weight gets gain beta.
BETA_GAIN_ROLES: Tuple[str, ...] = tuple(filter(value_path, ROLES))
# Sub-module names whose weight gets gain 1.
UNIT_GAIN_ROLES: Tuple[str, ...] = tuple(r for r in ROLES if r not in BETA_GAIN_ROLES)


def expected_roles(layer: nn.Module) -> Tuple[str, ...]:
    """The roles a layer must have: all but the cross-attention's where it has none (encoder
    layers, decoder-only layers)."""
    has_cross = getattr(layer, "encoder_attn", None) is not None
    return tuple(r for r in ROLES if has_cross or not r.startswith("encoder_attn."))


def linears(layer: nn.Module) -> Dict[str, nn.Linear]:
    """The weight matrices of a layer by role; a missing role is an error, not a skip: a wrapped
    or renamed sub-module would otherwise keep fairseq's init unnoticed."""
    modules = dict(layer.named_modules())
    missing = [role for role in expected_roles(layer) if role not in modules]
    if missing:
        raise ValueError(
            f"{type(layer).__name__} has no sub-module {', '.join(missing)}: the init rules "
            f"expect fairseq's layer names ({', '.join(ROLES)}); re-initialise the layer before "
            f"wrapping it, or map the new names here")
    return {role: modules[role] for role in expected_roles(layer)}


def deepnorm_gains(beta: float) -> Dict[str, float]:
    """The Xavier-normal gain of each role, for a layer whose side has init gain ``beta``."""
    return {role: beta if role in BETA_GAIN_ROLES else 1.0 for role in ROLES}


def deepnorm_init_(layer: nn.Module, beta: float) -> None:
    """Re-initialise, in place, every DeepNorm role of one Transformer layer (raises if one it
    must have is absent)."""
    gains = deepnorm_gains(beta)
    for role, linear in linears(layer).items():
        nn.init.xavier_normal_(linear.weight, gain=gains[role])
        if linear.bias is not None:
            nn.init.zeros_(linear.bias)
