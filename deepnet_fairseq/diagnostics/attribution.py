"""Parameter groups of a translation model, freezing them, and attributing the model update
``F(x, theta_t) - F(x, theta_0)`` to them (``deepnet-model-update --freeze/--attribute``).

Groups, by fairseq's parameter names (``group_of``; the first rule that matches wins):

    layernorm   LayerNorm gains and biases (``*layer_norm*``, ``layernorm_embedding``)
    embed       token and learned position embeddings, the output projection
    bias        the biases of the attention and FFN projections
    self_attn   the weights of the self-attention projections (q, k, v, out)
    cross_attn  the weights of the decoder's encoder-attention projections
    ffn         the weights of fc1 and fc2
    other       anything else (e.g. Admin's omegas, ReZero's gates)

Attribution. With d = theta_t - theta_0 split into the groups' parts d_g, let
``D = F(x, theta_0 + d) - F(x, theta_0)`` (the update) and ``D_g = F(x, theta_0 + d_g) -
F(x, theta_0)`` (group g's step alone, every other parameter at theta_0). At each target
position i, group g's contribution is the projection of D_g,i on the direction of D_i:

    contribution_g = mean_i  <D_g,i, D_i> / ||D_i||        share_g = contribution_g / update

where update = mean_i ||D_i|| is the diagnostic's model update. To first order F is linear in
theta, sum_g D_g = D, and the contributions sum to the update exactly; what they miss,
``interaction = update - sum_g contribution_g``, is the second-order (cross-group) part of the
update, reported with them (its measured size is in docs/findings.md). ``alone_g = mean_i
||D_g,i||`` is the update group g's step makes by itself.
"""

from __future__ import annotations  # (torch in annotations: it is imported where it computes)

from typing import Callable, Dict, Iterable, List, Sequence

from .common import no_grad

GROUPS = ("layernorm", "embed", "bias", "self_attn", "cross_attn", "ffn", "other")


def group_of(name: str) -> str:
    """The group of a parameter, from its name in ``model.named_parameters()``."""
    parts = name.split(".")
    if any("layer_norm" in part or "layernorm" in part for part in parts):
        return "layernorm"
    if any(part.startswith("embed_") or part == "output_projection" for part in parts):
        return "embed"
    if parts[-1] == "bias":
        return "bias"
    if "self_attn" in parts:
        return "self_attn"
    if "encoder_attn" in parts:
        return "cross_attn"
    if "fc1" in parts or "fc2" in parts:
        return "ffn"
    return "other"


def group_names(value: str) -> List[str]:
    """argparse type: comma-separated names of ``GROUPS``."""
    import argparse

    names = [name for name in value.replace(",", " ").split() if name]
    unknown = [name for name in names if name not in GROUPS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown parameter group(s) {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    return names


def freeze(model: torch.nn.Module, groups: Iterable[str]) -> Dict[str, int]:
    """Set ``requires_grad = False`` on the parameters of ``groups`` (before fairseq's Trainer
    builds its optimizer, so that they are left out of it); returns the frozen tensors per group."""
    groups = set(groups)
    frozen = {group: 0 for group in groups}
    for name, p in model.named_parameters():
        group = group_of(name)
        if group in groups:
            p.requires_grad_(False)
            frozen[group] += 1
    return frozen


class Attribution:
    """Holds theta_0 and F(x, theta_0) of a model; ``__call__`` attributes its current update.

    ``features(model)`` must compute F(x, theta) on the fixed probe batch without gradients.
    """

    def __init__(self, model: torch.nn.Module, features: Callable[[torch.nn.Module], torch.Tensor]):
        self.model, self.features = model, features
        # named_parameters() lists a tensor shared by several modules once (shared embeddings)
        self.params = dict(model.named_parameters())
        self.start = {name: p.detach().clone() for name, p in self.params.items()}
        self.start_features = features(model)
        self.groups = {group: [n for n in self.params if group_of(n) == group] for group in GROUPS}

    @no_grad
    def __call__(self) -> List[Dict]:
        """One dict per group present in the model (group, trained, alone, contribution,
        share), then group "interaction" (update - the sum of the contributions) and group
        "all" (the update)."""
        import torch

        now = {name: p.detach().clone() for name, p in self.params.items()}
        total = self.features(self.model) - self.start_features
        norm = total.norm(dim=-1)
        update = norm.mean().item()
        direction = total / norm.clamp_min(torch.finfo(total.dtype).tiny).unsqueeze(-1)
        rows = []
        try:
            self._set(self.start)
            for group, names in self.groups.items():
                if not names:
                    continue
                trained = any(self.params[n].requires_grad for n in names)
                moved = any(not torch.equal(now[n], self.start[n]) for n in names)
                if moved:
                    self._set(now, names)
                    alone = self.features(self.model) - self.start_features
                    self._set(self.start, names)
                    contribution = (alone * direction).sum(-1).mean().item()
                    alone_norm = alone.norm(dim=-1).mean().item()
                else:  # frozen, or a step of exactly zero: no forward needed
                    contribution = alone_norm = 0.0
                rows.append(dict(group=group, trained=int(trained), alone=alone_norm,
                                 contribution=contribution))
        finally:
            self._set(now)
        explained = sum(r["contribution"] for r in rows)
        rows.append(dict(group="interaction", trained="", alone=float("nan"),
                         contribution=update - explained))
        rows.append(dict(group="all", trained="", alone=update, contribution=update))
        for row in rows:
            row["share"] = row["contribution"] / update if update > 0 else float("nan")
        return rows

    def _set(self, values: Dict[str, torch.Tensor], names: Sequence[str] = None) -> None:
        for name in (self.params if names is None else names):
            self.params[name].copy_(values[name])
