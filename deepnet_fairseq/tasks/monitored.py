"""Training-time monitors for any fairseq-train translation run: ``--task translation_monitored``.

The task is fairseq's ``translation`` task plus, every ``--monitor-interval`` updates (default:
``--log-interval``), three per-layer measurements of the update being made, logged with
``fairseq.logging.metrics`` so they appear in the progress output, ``--log-format json`` logs
and ``--tensorboard-logdir`` like fairseq's own statistics:

``mon_grad.{enc,dec}.{i}``
    L2 norm of the gradient of layer i's parameters as the optimizer receives it (after fairseq
    divides by the sample size and clips; fp16 loss scale removed). Under data parallelism this
    is the all-reduced gradient, the same on every worker.
``mon_lnin.{enc,dec}.{i}``
    norm of the inputs of layer i's LayerNorms (``alpha * x + G(x)`` for Post-LN and DeepNet;
    the sub-layer input for Pre-LN): L2 norm over the hidden dimension, mean over all positions
    of the batch (padding included) and over the layer's LayerNorms -- the paper's Figure 4.
    Under data parallelism, of the logging worker's (rank 0's) share of the batch.
``mon_upd.{enc,dec}.{i}``
    ||theta_after - theta_before|| / ||theta_before|| of layer i's parameters for this update.

plus model-wide ``mon_grad`` (over all layers), ``mon_lnin`` (mean over all layers) and
``mon_upd``. Nothing is hooked or copied on the other updates; with ``--monitor-interval 0``
the task is exactly ``translation``. Hooks are forward pre-hooks registered from outside the
model, so every architecture (fairseq's ``transformer``, Pre-LN, ``deepnet_transformer``) works
without changes; parameters are grouped by their ``encoder.layers.i`` / ``decoder.layers.i``
names in the fairseq model, which is first taken out of fairseq's data-parallel wrappers
(``unwrap``: ModuleProxyWrapper, torch DDP, LegacyDistributedDataParallel keep it as their
``module``), so multi-process runs measure the same layers as one process. A model with no
such layer (FSDP's flattened parameters, a model without ``layers`` stacks) is an error, not a
log of zeros. ``deepnet-plot-monitors`` draws the logs as per-layer heat maps.

    fairseq-train DATA --user-dir deepnet_fairseq --task translation_monitored ...
"""

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch
from fairseq.logging import metrics
from fairseq.models import BaseFairseqModel
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II

LAYER = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.")
SIDE = {"encoder": "enc", "decoder": "dec"}
PRIORITY = 1000  # after fairseq's own statistics in the progress output


def layer_of(name: str) -> Optional[Tuple[str, int]]:
    """('enc', 3) for 'encoder.layers.3.fc1.weight'; None outside the layer stacks."""
    match = LAYER.match(name)
    return (SIDE[match.group(1)], int(match.group(2))) if match else None


def metric_key(stat: str, layer: Tuple[str, int]) -> str:
    return f"mon_{stat}.{layer[0]}.{layer[1]}"


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The fairseq model inside the wrappers fairseq's trainer hands the task under data
    parallelism (``ModuleProxyWrapper(DistributedDataParallel(model))``,
    ``ModuleProxyWrapper(LegacyDistributedDataParallel(model))``, ...): each registers what it
    wraps as its sub-module ``module``. Read from ``_modules``, not ``getattr``, because
    ModuleProxyWrapper forwards unknown attributes to the model inside."""
    while not isinstance(model, BaseFairseqModel):
        inner = model._modules.get("module")
        if not isinstance(inner, torch.nn.Module):
            break  # not a wrapper we know: use it as it is
        model = inner
    return model


class LayerMonitor:
    """Per-layer gradient norms, LayerNorm input norms and update ratios of one update."""

    def __init__(self, model: torch.nn.Module):
        model = unwrap(model)  # the same parameter and module objects, named without "module."
        if any(type(param).__name__ == "DTensor" for param in model.parameters()):
            # each process holds a shard of every tensor: its norms would be the shard's
            raise RuntimeError("--task translation_monitored does not run under full sharding "
                               "(--ddp-backend fully_sharded: every process holds only shards "
                               "of a layer's parameters and gradients); monitor with another "
                               "--ddp-backend (the monitors do not change training)")
        self.params = defaultdict(list)  # (side, i) -> parameters of that layer
        for name, param in model.named_parameters():
            layer = layer_of(name)
            if layer is not None and param.requires_grad:
                self.params[layer].append(param)
        if not self.params:  # logging zeros would look like a measurement: refuse instead
            names = [name for name, _ in model.named_parameters()][:3]
            raise RuntimeError(
                f"--task translation_monitored found no trainable parameter named "
                f"'encoder.layers.<i>.*' or 'decoder.layers.<i>.*' in {type(model).__name__} "
                f"(first parameters: {names}); the monitors need fairseq's layer stacks "
                f"(FSDP's flattened parameters are not supported). Use --task translation.")
        self.norms = [(layer_of(name), module) for name, module in model.named_modules()
                      if isinstance(module, torch.nn.LayerNorm) and layer_of(name + ".")]
        self.ln_sums: Dict[Tuple[str, int], float] = defaultdict(float)
        self.ln_counts: Dict[Tuple[str, int], int] = defaultdict(int)
        self.handles = []
        self.update = None  # the update whose LayerNorm inputs are being summed

    # LayerNorm inputs, through forward pre-hooks that only read their input.
    def attach(self) -> None:
        for layer, module in self.norms:
            self.handles.append(module.register_forward_pre_hook(self._hook(layer)))

    def _hook(self, layer):
        def hook(module, inputs):
            with torch.no_grad():
                self.ln_sums[layer] += inputs[0].detach().float().norm(dim=-1).mean().item()
                self.ln_counts[layer] += 1
        return hook

    def detach(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def log_layernorm_inputs(self) -> None:
        means = {layer: self.ln_sums[layer] / self.ln_counts[layer] for layer in self.ln_counts}
        for layer, value in sorted(means.items()):
            metrics.log_scalar(metric_key("lnin", layer), value, priority=PRIORITY, round=4)
        if means:
            metrics.log_scalar("mon_lnin", sum(means.values()) / len(means), priority=PRIORITY,
                               round=4)
        self.ln_sums.clear()
        self.ln_counts.clear()

    def log_gradients(self, scale) -> None:
        total = 0.0
        for layer, params in sorted(self.params.items()):
            grads = [p.grad.detach().float() for p in params if p.grad is not None]
            if not grads:
                continue
            norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])) * scale
            norm = float(norm)
            total += norm ** 2
            metrics.log_scalar(metric_key("grad", layer), norm, priority=PRIORITY, round=4)
        metrics.log_scalar("mon_grad", total ** 0.5, priority=PRIORITY, round=4)

    def snapshot(self):
        return {layer: [p.detach().clone() for p in params] for layer, params in self.params.items()}

    def log_updates(self, before) -> None:
        delta_sq = theta_sq = 0.0
        for layer, params in sorted(self.params.items()):
            d = sum(float((p.detach() - b).float().pow(2).sum()) for p, b in zip(params, before[layer]))
            t = sum(float(b.float().pow(2).sum()) for b in before[layer])
            delta_sq, theta_sq = delta_sq + d, theta_sq + t
            metrics.log_scalar(metric_key("upd", layer), (d / t) ** 0.5 if t > 0 else 0.0,
                               priority=PRIORITY, round=6)
        metrics.log_scalar("mon_upd", (delta_sq / theta_sq) ** 0.5 if theta_sq > 0 else 0.0,
                           priority=PRIORITY, round=6)


@dataclass
class MonitoredTranslationConfig(TranslationConfig):
    monitor_interval: Optional[int] = field(
        default=None,
        metadata={"help": "measure per-layer gradient norms, LayerNorm input norms and update "
                          "ratios every N updates (default: --log-interval; 0: off)"},
    )
    # fairseq fills this from --log-interval (no help: the option is the common one)
    log_interval: int = II("common.log_interval")


class MonitorMixin:
    """Adds the monitors to a fairseq task: measures in ``train_step`` (forward/backward of the
    update's micro-batches) and ``optimizer_step`` (the final gradients, and the update)."""

    _monitor: Optional[LayerMonitor] = None

    def _monitored(self, update_num: int) -> bool:
        interval = self.cfg.monitor_interval
        if interval is None:
            interval = self.cfg.log_interval
        return interval > 0 and (update_num + 1) % interval == 0

    def _monitor_for(self, model) -> LayerMonitor:
        if self._monitor is None or self._monitor_model is not model:
            self._monitor, self._monitor_model = LayerMonitor(model), model
        return self._monitor

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if not self._monitored(update_num):
            return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        monitor = self._monitor_for(model)
        if monitor.update != update_num:  # first micro-batch: drop values of a skipped update
            monitor.ln_sums.clear()
            monitor.ln_counts.clear()
            monitor.update = update_num
        monitor.attach()
        try:
            return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        finally:
            monitor.detach()

    def optimizer_step(self, optimizer, model, update_num):
        if not self._monitored(update_num):
            return super().optimizer_step(optimizer, model, update_num)
        monitor = self._monitor_for(model)
        monitor.log_layernorm_inputs()
        # fp16 optimizers keep the model's gradients unscaled and apply this factor in step()
        monitor.log_gradients(getattr(optimizer, "_multiply_factor", 1.0))
        before = monitor.snapshot()
        result = super().optimizer_step(optimizer, model, update_num)
        monitor.log_updates(before)
        return result


@register_task("translation_monitored", dataclass=MonitoredTranslationConfig)
class MonitoredTranslationTask(MonitorMixin, TranslationTask):
    """fairseq's ``translation`` task with the per-layer monitors of this module."""
