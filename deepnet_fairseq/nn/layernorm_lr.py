"""``--deepnorm-ln-lr-multiplier``: scale the learning rate of the DeepNorm layers' LayerNorm
gains and biases, so that their steps no longer make the model update grow with depth
(docs/methods.md describes the option, docs/findings.md measures it; the derivation is in
``constants.py``).

    --deepnorm-ln-lr-multiplier auto    # k from the depths and --deepnorm-constants, per stack
    --deepnorm-ln-lr-multiplier 0.05    # one given k for every layer's LayerNorms
    (absent)                            # off: LayerNorms train like every other parameter

How it is applied, and why this way:

* The model tags each LayerNorm parameter of its layers with fairseq's per-parameter
  ``optim_overrides`` attribute (``{OVERRIDE_KEY: k}``). fairseq's FP16 optimizer copies that
  attribute to its fp32 master copies (``--fp16-no-flatten-grads``), so the tag reaches whichever
  tensor the optimizer really steps.
* A torch optimizer step hook (``torch.optim.optimizer.register_optimizer_step_{pre,post}_hook``,
  registered once when this module is imported) turns every step of a tagged parameter
  ``before -> after`` into ``before + k (after - before)``. For every fairseq optimizer whose step
  is proportional to the learning rate (sgd, nag, adam, lamb, adamax, adagrad, adadelta; not
  adafactor's relative step) this is exactly the step with learning rate k * lr, weight decay
  included, while the optimizer state (momenta, second moments) is what it would be with an lr
  multiplier too: Adam's moments do not depend on lr.

Why not a separate torch parameter group with its own lr: fairseq's ``set_lr`` gives every
group the same lr on every update, and an extra group changes the optimizer state layout, so a
checkpoint of a run without the option could not be resumed with it (nor the reverse). Why not
fairseq's ``--optimizer composite`` (which reads ``optim_overrides['optimizer']['lr_scale']``):
it must be configured by hand per group, optimizer and scheduler (not expressible as a model
option), and it keeps its sub-optimizers in class-level dictionaries shared by every instance.
The hook keeps the user's ``--optimizer``/``--lr-scheduler`` untouched, follows every lr
schedule (the step already holds the current lr), leaves checkpoints unchanged, and acts the
same on every distributed worker (each imports the plugin and tags its replica).

Not supported, with an error at argument parsing: ``--fp16``/``--bf16`` with flattened grads (all
parameters live in one fp32 buffer: add ``--fp16-no-flatten-grads`` or use
``--memory-efficient-fp16``) and ``--optimizer composite``. The recipes add
``--fp16-no-flatten-grads`` themselves when a method uses the option under fp16/bf16
(``recipes.run.commands.per_tensor_steps``), so their GPU defaults need nothing from the user;
tests/unit/test_layernorm_lr.py checks one fp16 update both ways.
ZeRO-1 (``--zero-sharding os``) works in fp32 and with ``--fp16-no-flatten-grads``: torch's
ZeroRedundancyOptimizer (``nn/zero.py``; fairseq's own fairscale OSS alike) is a torch optimizer
whose step runs the shard's own optimizer and then broadcasts the shards, so the outer (ZeRO)
step saves and rescales every tagged parameter on every process and the inner one leaves them to
it (``_CLAIMED``); tests/slow/test_distributed.py checks one update of 2 processes in both
precisions. Full sharding (``--ddp-backend fully_sharded``, torch's FSDP2: ``nn/fsdp.py``) gives
fairseq's optimizer each process's shard of every parameter as a parameter of its own, tagged
as the whole one was, so the hook scales the shards' steps (tests/slow/test_fsdp.py).
"""

import weakref
from typing import Dict, List, Optional, Tuple, Union

import torch
from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                   register_optimizer_step_pre_hook)

from .. import constants

OPTION = "--deepnorm-ln-lr-multiplier"
OVERRIDE_KEY = "deepnorm_ln_lr_multiplier"
"""Key of ``p.optim_overrides`` that carries a parameter's learning-rate multiplier (read only by
this module): the product of every option that scales it (this one, --depth-transfer)."""
EPS_KEY = "deepnorm_adam_eps_multiplier"
"""Key of ``p.optim_overrides`` that carries a parameter's Adam-epsilon multiplier
(--depth-transfer). Adam's step is unchanged when the gradient and epsilon are scaled together,
so the hook applies epsilon x e as the gradient / e during the step (restored after it): exact
for every Adam implementation, fused or not, and the optimizer's state layout is unchanged."""


def parse(value) -> Union[None, str, float]:
    """None (off), "auto", or a positive float, from the option's value."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return _positive(value, f"{OPTION} must be 'auto' or a positive number")


def _positive(value, refusal: str) -> float:
    """VALUE as a positive finite float, or ValueError: REFUSAL, got VALUE."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not 0 < number < float("inf"):
        raise ValueError(f"{refusal}, got {value!r}")
    return number


LAYERS_OPTION = "--layers-lr-multiplier"


def layers_multiplier(args) -> float:
    """--layers-lr-multiplier's value (1 when absent); anything but a positive finite number
    is refused by name."""
    value = getattr(args, "layers_lr_multiplier", None)
    if value is None:
        return 1.0
    return _positive(value, f"{LAYERS_OPTION} must be a positive number")


def validate(args) -> None:
    """Reject, while fairseq parses the arguments, the settings where the optimizer does not step
    the model's own parameter tensors (so the tag cannot reach it): for this option, for
    --layers-lr-multiplier and for --depth-transfer, which tag parameters the same way."""
    transfer = str(getattr(args, "depth_transfer", None) or "none")
    if transfer != "none":
        optimizer = getattr(args, "optimizer", None)
        if optimizer is not None and str(optimizer) != "adam":
            raise ValueError(f"--depth-transfer {transfer} is defined for Adam (its learning-rate "
                             f"and epsilon rules are Adam's); use --optimizer adam, not "
                             f"{optimizer}")
        option = "--depth-transfer"
    elif parse(getattr(args, "deepnorm_ln_lr_multiplier", None)) is not None:
        option = OPTION
    elif getattr(args, "layers_lr_multiplier", None) is not None:
        option = LAYERS_OPTION
    else:
        return
    layers_multiplier(args)  # raises on a bad value
    half = getattr(args, "fp16", False) or getattr(args, "bf16", False)
    flat = not (getattr(args, "amp", False) or getattr(args, "fp16_no_flatten_grads", False)
                or getattr(args, "memory_efficient_fp16", False)
                or getattr(args, "memory_efficient_bf16", False))
    if half and flat:
        raise ValueError(
            f"{option} needs the optimizer to step each parameter tensor, but --fp16/--bf16 "
            f"flattens all parameters into one fp32 buffer: add --fp16-no-flatten-grads (or use "
            f"--memory-efficient-fp16, or --amp)")
    if getattr(args, "optimizer", None) == "composite":
        raise ValueError(f"{option} cannot be used with --optimizer composite: set the "
                         f"LayerNorms' lr_scale in the composite groups instead, or use a plain "
                         f"optimizer")


def stack_multipliers(value, c: constants.DeepNormConstants, form: str
                      ) -> Dict[str, Optional[float]]:
    """{"encoder": k, "decoder": k} of the option's ``value`` for constants ``c`` in ``form``;
    None for a side the model does not have (or when the option is off)."""
    value = parse(value)
    result = {}
    for side in ("encoder", "decoder"):
        alpha, beta = getattr(c, f"{side}_alpha"), getattr(c, f"{side}_beta")
        if value is None or alpha is None:
            result[side] = None
        elif value == "auto":
            result[side] = constants.layernorm_lr_multiplier(alpha, beta, form)
        else:
            result[side] = value
    return result


def is_layernorm(name: str) -> bool:
    """Whether a parameter name (``model.named_parameters()``) belongs to a LayerNorm: fairseq
    names them ``*layer_norm*`` (self_attn_, encoder_attn_, final_) or ``layernorm_embedding``."""
    return any("layer_norm" in part or "layernorm" in part for part in name.split("."))


def tag(p: torch.Tensor, lr: float = 1.0, eps: float = 1.0) -> None:
    """Multiply the learning-rate and epsilon multipliers of ``p`` by ``lr`` and ``eps`` (the
    options that scale a parameter compose by product)."""
    overrides = dict(getattr(p, "optim_overrides", None) or {})
    for key, factor in ((OVERRIDE_KEY, lr), (EPS_KEY, eps)):
        if factor != 1.0:
            overrides[key] = overrides.get(key, 1.0) * float(factor)
    p.optim_overrides = overrides


def tag_layers(layers: Optional[torch.nn.Module], k: Optional[float]) -> int:
    """Tag the LayerNorm parameters of one stack's ``layers`` with multiplier ``k`` (nothing
    when either is None); returns the number of tensors tagged. Embedding and final LayerNorms
    sit outside the layers: they act once, not once per sub-layer, and keep the plain lr."""
    if k is None or layers is None:
        return 0
    tagged = 0
    for name, p in layers.named_parameters():
        if is_layernorm(name):
            tag(p, lr=k)
            tagged += 1
    return tagged


def multiplier_of(p: torch.Tensor, key: str = OVERRIDE_KEY) -> Optional[float]:
    overrides = getattr(p, "optim_overrides", None)
    if isinstance(overrides, dict):
        return overrides.get(key)
    return None


# --- the optimizer step hook ----------------------------------------------------------------

# optimizer -> (number of parameters per group, [(parameter, k, e)]): which of its parameters
# are tagged (lr multiplier k, epsilon multiplier e), recomputed when its groups change
_TAGGED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# optimizer -> [(parameter, value before the step or None, k, e)] while its step runs
_PENDING: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# ids of the parameters some running step has saved: an optimizer stepping inside another's
# step (ZeRO steps a per-rank optimizer) leaves them to the outer one, so k applies once
_CLAIMED: set = set()


def _tagged(optimizer) -> List[Tuple[torch.Tensor, float, float]]:
    signature = tuple(len(group["params"]) for group in optimizer.param_groups)
    cached = _TAGGED.get(optimizer)
    if cached is None or cached[0] != signature:
        found = [(p, k, e) for group in optimizer.param_groups for p in group["params"]
                 if (k := multiplier_of(p) or 1.0, e := multiplier_of(p, EPS_KEY) or 1.0)
                 != (1.0, 1.0)]
        cached = (signature, found)
        _TAGGED[optimizer] = cached
    return cached[1]


def _before_step(optimizer, args, kwargs) -> None:
    stale = _PENDING.pop(optimizer, None)  # its previous step raised before the post hook
    if stale:
        _CLAIMED.difference_update(id(p) for p, *_ in stale)
    entries = []
    for p, k, e in _tagged(optimizer):
        if id(p) not in _CLAIMED:
            entries.append((p, p.detach().clone() if k != 1.0 else None, k, e))
            _CLAIMED.add(id(p))
            if e != 1.0 and p.grad is not None:
                p.grad.div_(e)  # Adam with epsilon x e == Adam on gradient / e
    if entries:
        _PENDING[optimizer] = entries


def _after_step(optimizer, args, kwargs) -> None:
    entries = _PENDING.pop(optimizer, None)
    if not entries:
        return
    with torch.no_grad():
        for p, before, k, e in entries:
            _CLAIMED.discard(id(p))
            if before is not None:
                # after + (1 - k)(before - after) = before + k (after - before)
                p.lerp_(before, 1.0 - k)
            if e != 1.0 and p.grad is not None:
                p.grad.mul_(e)  # the gradient as it was, for whoever reads it after the step


_HOOKS = (register_optimizer_step_pre_hook(_before_step),
          register_optimizer_step_post_hook(_after_step))
