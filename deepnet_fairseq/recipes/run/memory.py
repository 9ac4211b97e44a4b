"""Memory plan of a training run: will it fit the GPU, and the cheapest layout that does.

Pure arithmetic (no torch, no fairseq): the launcher (``layout.plan_layout``) calls ``plan`` with
the model and machine of a run; ``benchmarks/memory_plan.py`` checks the estimate against the
peak measured on a device. All sizes are bytes; GB here is 1e9 bytes (``GPU_MEMORY_GB`` too, so
an "80 GB" card, 80 GiB = 85.9e9 bytes, keeps a little more room than the plan counts).

Peak memory per GPU = resident + max(activations - gradients, optimizer-step temporaries):

* resident (from the first update on): weights, gradients, fp32 master weights and their
  gradient (fairseq's FP16Optimizer), Adam's m and v (fp32), and with several processes torch
  DDP's gradient buckets (a copy of the gradients: fairseq leaves --gradient-as-bucket-view off);
* activations are held while the gradients of the half-precision weights are freed (fairseq's
  zero_grad sets them to None), hence "- gradients";
* the optimizer step allocates Adam's denominator: with FP16Optimizer's one flat fp32 tensor,
  4 bytes x all parameters at once (measured: the whole peak of checkpointed deep models),
  otherwise only per tensor (the largest is the embedding).

Full sharding (``--ddp-backend fully_sharded``: torch's FSDP2 through the plugin, nn/fsdp.py)
divides every resident part by the number of processes, at the cost of gathering each layer's
parameters before its forward and again before its backward; the plan takes it only where
ZeRO-1 does not fit (``_candidates``), and counts what stays whole (``estimate``).
"""

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional

GB = 1e9
# the share of a device's memory a plan may fill (a GPU's card, a CPU machine's memory): the rest
# is the framework's own, fragmentation and, on a CPU machine, the system's and the data's
MARGIN = 0.9

# ---- the activation fit ---------------------------------------------------------------------
# Fitted to the peaks of fairseq's Trainer measured on an H200 at base width (512/2048/8 heads),
# 4,096 target tokens (128 sentences x 32), vocabulary 32,004, shared embeddings:
# results/memory/h200-fairseq-trainer-peaks.jsonl (benchmarks/memory_plan.py measures the same;
# the measured figures: docs/reproducing.md, "Expected time and memory on 8 x 80 GB").
# Activations = peak - resident + gradients, fitted as
#   PRECISION_FACTOR x tokens x (OUTPUT_BYTES x vocab + layers x LAYER_BYTES x width)
# fp16, no checkpointing, 6L/18L/50L/100L per side: a straight line in the layers (enc + dec),
# a slope per layer and a fixed part; the fixed part is the output layer (half-precision
# logits, their fp32 log-softmax and its gradient: ~12 bytes per token per vocabulary entry).
# With --checkpoint-activations a layer keeps only its input (~2 bytes per token per width unit
# in fp16), fitted from memory-efficient fp16 at 100L (the fp16 checkpointed peaks are the
# optimizer step's 4 x params, not activations). PRECISION_FACTOR is fp32 over fp16 at 18L;
# bf16 and memory-efficient fp16 measured the same as fp16 there.
OUTPUT_BYTES = 12.22          # per token per vocabulary entry (1.602e9 / (4096 x 32004))
LAYER_BYTES = 34.10           # per token per layer per width unit (71.52e6 / (4096 x 512))
LAYER_BYTES_CHECKPOINTED = 1.96  # the same with activation checkpointing (4.111e6 / (4096 x 512))
PRECISION_FACTOR = {"fp16": 1.0, "bf16": 1.0, "fp32": 1.611}

# ---- the activation fit on CPU ----------------------------------------------------------------
# CPU training (tests, smoke runs, benchmarks/memory_plan.py with no GPU) keeps other tensors
# for the backward pass than CUDA does, so it has its own two terms, fitted to torch's CPU
# allocations (peak of the running sum of the allocator's events, torch.profiler with
# profile_memory) of fairseq's Trainer on a CPU: base width, 1,024 target tokens (32 sentences
# x 32), vocabulary 32,004, 2L and 4L per side in fp32 and bf16 (activations = peak - resident
# + gradients, a straight line in the layers): results/memory/cpu-fit.jsonl (the measured
# figures: docs/reproducing.md, "The memory model on CPU"). Why they differ from the CUDA terms:
# * the output term does not grow in fp32: label_smoothed_cross_entropy takes the log-softmax
#   in fp32 in every precision, and what is alive at the start of the backward pass is its fp32
#   log-probabilities (saved by log_softmax), their gradient and then the logits' gradient:
#   3 x 4 = 12 bytes per token per vocabulary entry, as measured (the CUDA fit's single fp32
#   factor scales this term too, which overestimates it on CPU);
# * a layer's term is larger than CUDA's, in every precision: torch's CPU dropout is
#   input * (bernoulli noise / (1 - p)) and keeps that noise as a tensor of the activation's
#   dtype (4 bytes in fp32, 2 in bf16/fp16) where CUDA's fused native_dropout keeps a 1-byte
#   mask: 2 dropouts of tokens x width per encoder layer, 3 per decoder layer, so in half
#   precision 1 byte more each, 2.5 more per token per layer per width unit on average, which
#   is the difference between the bf16 term measured on CPU and CUDA's fp16 term (attention is
#   no difference: torch's fused attention runs on CPU too and keeps q, k, v, its output and
#   the log-sum-exp);
# * fp32 keeps exactly the same tensors as bf16 at twice the bytes, so its term is a little
#   under twice bf16's (the 1-byte boolean masks and the fp32 softmax statistics are the same
#   in both);
# * fp16 on CPU (fairseq_train_compat's lifted CUDA calls) runs fairseq's FP16Optimizer as on a
#   GPU and torch's CPU half kernels keep no extra copies: measured equal to bf16 (resident
#   bytes included) at 2L, so it takes bf16's terms.
CPU_OUTPUT_BYTES = 12.4           # per token per vocabulary entry, every precision
CPU_LAYER_BYTES = {"fp32": 71.0, "bf16": 36.6, "fp16": 36.6}  # per token per layer per width unit

# Bytes per parameter of each resident component. fp16/bf16 use fairseq's FP16Optimizer:
# half weights and gradients, an fp32 master copy with its own fp32 gradient, Adam m and v in
# fp32 (20 bytes); memory-efficient fp16 keeps no master copy (12); fp32 (16). Each count is
# what was measured after the first update (docs/reproducing.md).
WEIGHT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
MASTER_BYTES = {"fp32": 0, "fp16": 8, "bf16": 8}   # fp32 copy + its gradient; 0 when memory-efficient
ADAM_BYTES = 8                                      # m and v, fp32

MIN_TOKENS = 512  # the plan lowers --max-tokens no further: a batch must still hold a long sentence

FULL_SHARDING = "fully_sharded"  # fairseq's --ddp-backend name, which the plugin runs on FSDP2
LAYERS_GATHERED = 2  # FSDP2 gathers the next layer while this one runs (its prefetch)


def parameter_count(enc_layers: int, dec_layers: int, embed_dim: int, ffn_dim: int, vocab: int,
                    shared_embeddings: bool = True, final_layer_norm: bool = False) -> int:
    """Parameters of fairseq's transformer (Post-LN; DeepNet has the same): sinusoidal positions,
    output projection tied to the embedding. ``final_layer_norm``: Pre-LN's last LayerNorm."""
    d, f = embed_dim, ffn_dim
    attention = 4 * (d * d + d)              # q, k, v, out projections with biases
    ffn = d * f + f + f * d + d
    norm = 2 * d
    encoder = attention + ffn + 2 * norm
    decoder = 2 * attention + ffn + 3 * norm  # self- and cross-attention
    embeddings = vocab * d * (1 if shared_embeddings else 3)  # else: enc, dec, output each
    finals = 2 * norm if final_layer_norm else 0
    return embeddings + enc_layers * encoder + dec_layers * decoder + finals


def layer_parameters(embed_dim: int, ffn_dim: int) -> int:
    """Parameters of the largest layer, a decoder layer (self- and cross-attention, the FFN,
    three LayerNorms): what FSDP2 gathers whole at a time."""
    return (parameter_count(0, 1, embed_dim, ffn_dim, 0)
            - parameter_count(0, 0, embed_dim, ffn_dim, 0))


@dataclass
class Estimate:
    """Per-GPU bytes by component, and the peak they add up to."""
    components: Dict[str, float]
    peak: float


def estimate(params: int, layers: int, embed_dim: int, vocab: int, tokens: int, precision: str,
             checkpointing: bool = False, zero: bool = False, memory_efficient: bool = False,
             world: int = 1, device: str = "cuda", full_shard: bool = False,
             layer_params: int = 0) -> Estimate:
    """Peak bytes per GPU (per process on ``device`` "cpu") of one update (see the module
    docstring). The resident parts are the same on CPU (measured: docs/reproducing.md); the
    activations have the CPU terms above. ``full_shard``: FSDP2 over ``world`` processes,
    ``layer_params`` the largest layer's parameters (``layer_parameters``)."""
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    if device == "cpu" and checkpointing:
        raise ValueError("no CPU activation model with activation checkpointing (not measured)")
    weight = WEIGHT_BYTES[precision]
    master = 0 if memory_efficient else MASTER_BYTES[precision]
    # ZeRO-1 (--zero-sharding os: torch's ZeroRedundancyOptimizer, nn/zero.py) keeps and steps
    # Adam's m and v for this rank's share of the parameters only; FP16Optimizer's fp32 masters
    # and their gradients stay whole on every rank (built before sharding), one per tensor
    # (--fp16-no-flatten-grads, which the plan adds: ZeRO shards by tensor).
    if zero and full_shard:
        raise ValueError("ZeRO-1 and full sharding exclude each other")
    # Full sharding (FSDP2, nn/fsdp.py) divides the weights, their gradients, the fp32 masters
    # (one per shard: --fp16-no-flatten-grads) and Adam's state; there are no DDP buckets.
    # Whole for a while: the layers gathered (this one and the prefetched next, their parameters
    # and their gradients before the reduce-scatter), and the root group (the shared embedding,
    # the output projection) from its forward to the end of the backward pass, its gradient too.
    shards = world if full_shard else 1
    whole_root = vocab * embed_dim
    components = {
        "weights": weight * params / shards,
        "gradients": weight * params / shards,
        "fp32 master + its gradient": master * params / shards,
        "Adam m and v": ADAM_BYTES * params / (world if zero or full_shard else 1),
        "DDP gradient buckets": weight * params if world > 1 and not full_shard else 0,
        **({"FSDP2 gathered (whole)": 2 * weight * (LAYERS_GATHERED * layer_params + whole_root)}
           if full_shard else {}),
        "activations": tokens * PRECISION_FACTOR[precision] * (
            OUTPUT_BYTES * vocab
            + layers * embed_dim * (LAYER_BYTES_CHECKPOINTED if checkpointing else LAYER_BYTES)),
    }
    if device == "cpu":
        components["activations"] = tokens * (CPU_OUTPUT_BYTES * vocab
                                              + layers * embed_dim * CPU_LAYER_BYTES[precision])
    flat = master and not (zero or full_shard)
    # Adam's temporaries: its denominator (4 bytes) over the one flat fp32 tensor, or per tensor
    # (largest: the embedding, or its shard), where memory-efficient fp16 also makes fp32
    # copies of the half weight and gradient (12 bytes).
    largest = vocab * embed_dim / shards
    components["optimizer-step temporaries"] = (
        4 * params if flat else (12 if memory_efficient else 4) * largest)
    if full_shard:  # validation gathers the whole model on every process (nn/fsdp.py: beam
        # search calls layers unevenly across processes), beside the sharded state
        components["validation: whole weights"] = weight * params
    resident = sum(v for k, v in components.items() if k not in TRANSIENT)
    peak = resident + max(components["activations"] - components["gradients"],
                          components["optimizer-step temporaries"],
                          components.get("validation: whole weights", 0))
    return Estimate(components, peak)


TRANSIENT = ("activations", "optimizer-step temporaries", "validation: whole weights")


@dataclass
class Choice:
    checkpointing: bool
    zero: bool
    memory_efficient: bool
    max_tokens: int
    update_freq: int
    full_shard: bool = False

    @property
    def name(self) -> str:
        parts = ["activation checkpointing"] if self.checkpointing else []
        parts += ["ZeRO-1"] if self.zero else []
        parts += ["full sharding (FSDP2)"] if self.full_shard else []
        parts += ["memory-efficient fp16"] if self.memory_efficient else []
        return " + ".join(parts) or "plain DDP"


@dataclass
class Plan:
    """The layout chosen, its fairseq-train flags and estimate, and what was tried."""
    choice: Choice
    estimate: Estimate
    gpu_memory_gb: float
    margin: float
    world: int
    params: int
    precision: str
    fits: bool = True
    tried: List[str] = field(default_factory=list)
    warning: str = ""

    @property
    def usable(self) -> float:
        return self.gpu_memory_gb * self.margin * GB

    def ddp_backend(self, otherwise: str) -> str:
        """fairseq's --ddp-backend: full sharding's where the plan chose it, else OTHERWISE."""
        return FULL_SHARDING if self.choice.full_shard else otherwise

    @property
    def extra_flags(self) -> List[str]:
        """fairseq-train options beyond --max-tokens, --update-freq, --checkpoint-activations
        and --ddp-backend (``ddp_backend``)."""
        flags = []
        if self.choice.zero:
            flags += ["--zero-sharding", "os"]
        if ((self.choice.zero or self.choice.full_shard) and self.precision in ("fp16", "bf16")
                and not self.choice.memory_efficient):
            flags.append("--fp16-no-flatten-grads")  # both shard per tensor: one master each
        if self.choice.memory_efficient:
            flags.append("--memory-efficient-fp16")
        return flags

    @property
    def flags(self) -> List[str]:
        return ((["--checkpoint-activations"] if self.choice.checkpointing else [])
                + (["--ddp-backend", FULL_SHARDING] if self.choice.full_shard else [])
                + self.extra_flags + ["--max-tokens", str(self.choice.max_tokens),
                                      "--update-freq", str(self.choice.update_freq)])

    def short(self) -> str:
        return (f"{self.choice.name}, {self.choice.max_tokens} tokens per GPU: est. "
                f"{self.estimate.peak / GB:.1f} of {self.usable / GB:.1f} GB usable"
                + ("" if self.fits else " (DOES NOT FIT)"))

    def describe(self) -> str:
        lines = [f"memory plan: {self.params / 1e6:,.0f}M parameters, {self.precision}, "
                 f"{self.world} process(es), {self.gpu_memory_gb:g} GB per GPU, "
                 f"{self.margin:.0%} usable = {self.usable / GB:.1f} GB (GB = 1e9 bytes)"]
        lines += [f"  {name:<28} {value / GB:7.2f} GB"
                  for name, value in self.estimate.components.items()]
        lines.append(f"  {'peak (estimated)':<28} {self.estimate.peak / GB:7.2f} GB = resident + "
                     "max(activations - gradients, optimizer-step temporaries"
                     + (", validation: whole weights)" if self.choice.full_shard else ")"))
        lines += [f"  tried: {line}" for line in self.tried]
        lines.append(f"  choice: {self.choice.name}: {' '.join(self.flags)}")
        if self.warning:
            lines.append(f"  warning: {self.warning}")
        return "\n".join(lines)


class MemoryPlanError(ValueError):
    """No layout fits; the message gives the numbers and what would fit."""


def _candidates(world: int, precision: str, checkpointing: Optional[bool],
                full_shard: bool = False):
    """(checkpointing, zero, memory_efficient, full_shard), cheapest first: full sharding after
    every ZeRO-1 layout (it gathers each layer twice an update, where ZeRO-1 broadcasts the
    weights once); only full sharding's with ``full_shard`` (DDP_BACKEND=fully_sharded) where
    there are several processes to shard over."""
    steps = [(False, False, False, False), (True, False, False, False)]
    if world >= 2:
        steps.append((True, True, False, False))
    if precision == "fp16":
        steps.append((True, world >= 2, True, False))
    if world >= 2:
        steps += [(False, False, False, True), (True, False, False, True)]
        if precision == "fp16":
            steps.append((True, False, True, True))
    if full_shard and world >= 2:
        steps = [step for step in steps if step[3]]
    if checkpointing is not None:
        steps = [(checkpointing, z, m, f) for _, z, m, f in steps]
    return list(dict.fromkeys(steps))


def _search(model: dict, world: int, gpu_memory_gb: float, tokens_per_gpu: int,
            tokens_per_update: int, precision: str, margin: float,
            checkpointing: Optional[bool], tried: List[str], full_shard: bool = False):
    """The first (choice, estimate) that fits, else None; ``tried`` gets one line per try."""
    usable = gpu_memory_gb * margin * GB
    steps = _candidates(world, precision, checkpointing, full_shard)
    trials = [(step, tokens_per_gpu) for step in steps]
    tokens = tokens_per_gpu
    while tokens // 2 >= MIN_TOKENS:  # then fewer tokens per GPU, with the last (leanest) step
        tokens //= 2
        trials.append((steps[-1], tokens))
    for (ckpt, zero, mem_eff, full), tokens in trials:
        est = estimate(world=world, tokens=tokens, precision=precision, checkpointing=ckpt,
                       zero=zero, memory_efficient=mem_eff, full_shard=full, **model)
        choice = Choice(ckpt, zero, mem_eff, tokens,
                        max(1, math.ceil(tokens_per_update / (tokens * world))), full)
        fits = est.peak <= usable
        tried.append(f"{choice.name}, {tokens} tokens: {est.peak / GB:.1f} GB"
                     f"{'' if fits else ' > ' + format(usable / GB, '.1f')}")
        if fits:
            return choice, est
    return None


def plan(enc_layers: int, dec_layers: int, embed_dim: int, ffn_dim: int, vocab: int, *,
         gpus_per_node: int, nodes: int, gpu_memory_gb: float, tokens_per_gpu: int,
         tokens_per_update: int, precision: str, margin: float = MARGIN,
         checkpointing: Optional[bool] = None, shared_embeddings: bool = True,
         full_shard: bool = False) -> Plan:
    """The cheapest layout that fits: plain DDP, + activation checkpointing, + ZeRO-1 (several
    processes), + memory-efficient fp16 (fp16), then full sharding instead of ZeRO-1 (FSDP2,
    several processes; + memory-efficient fp16), then halving --max-tokens (raising
    --update-freq so the tokens per update stay). ``checkpointing`` True/False: the user's fixed
    choice; when no layout fits with it but one fits without, the plan keeps it and warns.
    ``full_shard``: the user chose full sharding (DDP_BACKEND=fully_sharded): only its layouts."""
    params = parameter_count(enc_layers, dec_layers, embed_dim, ffn_dim, vocab, shared_embeddings)
    model = {"params": params, "layers": enc_layers + dec_layers, "embed_dim": embed_dim,
             "vocab": vocab, "layer_params": layer_parameters(embed_dim, ffn_dim)}
    world = gpus_per_node * nodes
    args = (tokens_per_gpu, tokens_per_update, precision, margin)
    tried: List[str] = []
    found = _search(model, world, gpu_memory_gb, *args, checkpointing, tried, full_shard)
    if found:
        return Plan(found[0], found[1], gpu_memory_gb, margin, world, params, precision,
                    tried=tried)
    if checkpointing is not None:
        free = _search(model, world, gpu_memory_gb, *args, None, [], full_shard)
        if free:
            leanest = _leanest(model, world, args, checkpointing, full_shard)
            return Plan(*leanest, gpu_memory_gb, margin, world, params, precision, fits=False,
                        tried=tried, warning=(
                            f"CHECKPOINT_ACTIVATIONS={int(checkpointing)} does not fit (est. "
                            f"{leanest[1].peak / GB:.1f} GB > {gpu_memory_gb * margin:.1f} GB "
                            f"usable); CHECKPOINT_ACTIVATIONS=auto would choose "
                            f"{free[0].name} at {free[0].max_tokens} tokens per GPU"))
    raise MemoryPlanError(_refusal(model, enc_layers, dec_layers, gpus_per_node, nodes,
                                   gpu_memory_gb, args, checkpointing, full_shard))


def _leanest(model, world, args, checkpointing, full_shard):
    """The least-memory candidate (last step, fewest tokens) and its estimate."""
    tokens_per_gpu, tokens_per_update, precision, margin = args
    ckpt, zero, mem_eff, full = _candidates(world, precision, checkpointing, full_shard)[-1]
    tokens = tokens_per_gpu
    while tokens // 2 >= MIN_TOKENS:
        tokens //= 2
    est = estimate(world=world, tokens=tokens, precision=precision, checkpointing=ckpt,
                   zero=zero, memory_efficient=mem_eff, full_shard=full, **model)
    return (Choice(ckpt, zero, mem_eff, tokens,
                   max(1, math.ceil(tokens_per_update / (tokens * world))), full), est)


def _refusal(model, enc_layers, dec_layers, gpus_per_node, nodes, gpu_memory_gb, args,
             checkpointing, full_shard) -> str:
    world = gpus_per_node * nodes
    choice, est = _leanest(model, world, args, checkpointing, full_shard)
    margin = args[3]
    text = (f"{enc_layers}L-{dec_layers}L ({model['params'] / 1e9:.2f}B parameters, {args[2]}) "
            f"does not fit {world} x {gpu_memory_gb:g} GB GPU(s): the smallest estimate, "
            f"{choice.name} at {choice.max_tokens} tokens per GPU, is {est.peak / GB:.1f} GB per "
            f"GPU against {gpu_memory_gb * margin:.1f} GB usable ({margin:.0%} of the card).")
    text += f" It would fit on {world} GPU(s) of at least {math.ceil(est.peak / GB / margin)} GB"
    for more in range(nodes + 1, 1025):  # more nodes of this kind divide the sharded state
        found = _search(model, gpus_per_node * more, gpu_memory_gb, *args, checkpointing, [],
                        full_shard)
        if found:
            text += (f", or on {more * gpus_per_node} GPUs of {gpu_memory_gb:g} GB "
                     f"({more} node(s) of {gpus_per_node}; {found[0].name}).")
            break
    else:
        text += (f"; no number of {gpu_memory_gb:g} GB GPUs fits it (what stays whole on each "
                 "GPU, the activations and the gathered layers, does not).")
    text += " Set GPU_MEMORY_GB if the card's size was misread."
    return text
