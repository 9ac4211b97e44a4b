"""The recorded fairscale reference of tests/slow/test_zero.py: what two processes running
fairseq's own ZeRO-1 (fairscale 0.4.13's OSS, fairseq's ``shard_``) logged and saved, 6 updates
in each precision fairseq allows with ZeRO, on the suite's toy data (support.make_toy_data).

Recorded once (``python tests/data/record_zero_reference.py``, which installs the reference
fairscale as tests/reference_fairscale.py does, runs that launch and writes GOLDEN), so that the
default suite compares the plugin's torch ZeRO with fairscale's without downloading fairscale
and without its launch; ``python -m pytest tests/slow/test_zero.py -m costly`` re-derives it
from a fresh fairscale launch and compares the two, and the plugin's runs with that launch side
by side, as the suite did before the reference was recorded.

A run is kept as the per-update figures fairseq logged (loss, gnorm, loss_scale, as logged) and,
for each tensor of its last checkpoint (weights and Adam moments), the SHA-256 of its bytes with
its dtype, shape, float64 sum and sum of squares. On the machine class the reference was
recorded on (the torch version, the CPU kernels torch picks and the CPU: ``machine()``) a
match is to the bit: hashes and logged figures equal. Elsewhere float rounding may differ in
the last digits, and the rounding noise that the attention key biases get for a gradient
(below) and that Adam's moments carry differs wholly, so there the logged figures must agree to
2e-3 and the weights but the key biases in their sums and sums of squares to DRIFT, the
precision's rounding (below); the costly job is the check to the bit."""

import hashlib
import json
import math
import os

import torch

from deepnet_fairseq.recipes.base.machine import describe

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "zero_reference.json")
LOGGED = ("loss", "gnorm", "loss_scale")
# Attention key biases get no gradient in exact arithmetic (adding q.b to all of a query's
# scores leaves their softmax as it is): what they get is rounding noise (about 1e-11 here),
# which Adam turns into steps of about lr * noise / eps (eps 1e-8), so that their weights are
# noise too (about 1e-5 here, against 0.1 for a trained weight), different for another order of
# the same sums (or another machine's rounding).
KEY_BIAS = ".k_proj.bias"
NOISE = 1e-4  # what such a weight stays below (measured: 3.1e-5 at most, after 14 updates)
# Off the recorded machine, how far a weight's sum of squares may be from the recording
# (relative) and its sum (in units of sqrt(size * sum of squares), the Cauchy-Schwarz bound on
# |sum|: a sum is the small difference of large terms, -2.8 from 4,096 weights of size 0.125),
# by precision. Measured on an AVX2 CPU against the AVX512 recording after 6 updates, over every
# weight but the key biases, at most: fp32 8.5e-8; fp16 3.9e-3 on a sum and 3.2e-3 on a sum of
# squares (memeff the same), both an attention output bias; bf16 7.2e-3 and 1.2e-2 (about 8 and
# 3 units of fp16's and bf16's rounding, 2^-11 and 2^-8). The bounds leave a margin of 2.5 to
# 4 (fp32 100). A shard's step lost or doubled moves half the model's weights by about the rate
# and the logged losses far beyond 2e-3.
DRIFT = {"fp32": 1e-5, "fp16": 1e-2, "memeff": 1e-2, "bf16": 5e-2}


def machine() -> dict:
    """What decides float rounding here: torch's version, the CPU kernels it picks and the CPU
    itself (its model name, as Linux gives it: what every run's config.json records)."""
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu": describe({})["cpu"]}


def _tensor(value: torch.Tensor) -> dict:
    flat = value.detach().contiguous().cpu()
    wide = flat.double()
    return {"sha256": hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest(),
            "dtype": str(flat.dtype), "shape": list(flat.shape),
            "sum": wide.sum().item(), "sumsq": (wide * wide).sum().item()}


def fingerprint(state: dict) -> dict:
    """{"model/NAME" | "moment/INDEX/exp_avg(_sq)": _tensor} and the Adam step counts of a
    checkpoint as fairseq loads it."""
    tensors = {f"model/{name}": _tensor(value) for name, value in state["model"].items()}
    optimizer = state["last_optimizer_state"]["state"]
    for index, moments in optimizer.items():
        for key in ("exp_avg", "exp_avg_sq"):
            tensors[f"moment/{index}/{key}"] = _tensor(moments[key])
    return {"tensors": tensors, "steps": sorted({int(s["step"]) for s in optimizer.values()})}


def record_run(updates: dict, state: dict) -> dict:
    """One run's record: ``updates`` as test_distributed.by_update gives them, ``state`` its
    last checkpoint."""
    return {"updates": {str(u): {key: r.get(key) for key in LOGGED}
                        for u, r in sorted(updates.items())},
            **fingerprint(state)}


def load() -> dict:
    with open(GOLDEN, encoding="utf-8") as handle:
        return json.load(handle)


def on_the_recorded_machine(golden: dict) -> bool:
    return golden["machine"] == machine()


def assert_same_run(observed: dict, golden: dict, exact: bool, what: str, precision: str) -> None:
    """``observed`` trained as ``golden`` did: to the bit where ``exact`` (module docstring)."""
    assert observed["updates"].keys() == golden["updates"].keys(), what
    for update, figures in golden["updates"].items():
        for key, value in figures.items():
            seen = observed["updates"][update][key]
            if exact or value is None or seen is None:
                assert seen == value, (what, update, key, seen, value)
            else:
                assert abs(float(seen) - float(value)) <= 2e-3, (what, update, key, seen, value)
    assert observed["steps"] == golden["steps"], what
    assert observed["tensors"].keys() == golden["tensors"].keys(), what
    for name, expected in golden["tensors"].items():
        seen = observed["tensors"][name]
        assert (seen["dtype"], seen["shape"]) == (expected["dtype"], expected["shape"]), name
        if exact:
            assert seen["sha256"] == expected["sha256"], (what, name)
        elif name.startswith("model/") and not name.endswith(KEY_BIAS):
            assert math.isclose(seen["sumsq"], expected["sumsq"], rel_tol=DRIFT[precision],
                                abs_tol=1e-6), \
                (what, name, "sumsq", seen["sumsq"], expected["sumsq"])
            bound = math.sqrt(math.prod(expected["shape"]) * expected["sumsq"])
            assert abs(seen["sum"] - expected["sum"]) <= DRIFT[precision] * bound + 1e-6, \
                (what, name, "sum", seen["sum"], expected["sum"], DRIFT[precision] * bound)
