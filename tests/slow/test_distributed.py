"""The distributed runtime: multi-process resume, Admin's reduction, the monitors under DDP, and
every method trained by 2 processes.

Real torchrun processes (gloo, CPU, one thread each) through
``deepnet_fairseq.fairseq_train_compat``, as the recipes launch them: every run but the killed
one in a single launch of tests/distributed_driver.py, one after the other (``launched``),
resumes included (a new trainer loading the file its predecessor saved). What runs in one process
(the broadcast allowlist, Admin's reduction, the monitors through the DDP wrappers):
unit/test_distributed_runtime.py.
"""

import io
import json
import math
import os
import pickle
import re
import socket
import subprocess
import sys
import tempfile

import pytest
import torch

from deepnet_fairseq import methods
from deepnet_fairseq.storage import checkpoint_compat
from support import REPO, USER_DIR, wait_for


# Two gloo processes on CPU, fairseq's own all-reduce (torch's DDP refuses a CPU model with
# fairseq's device_ids), tiny batches, every update logged as JSON on rank 0.
TWO_PROCESSES = ["--user-dir", USER_DIR, "--cpu", "--distributed-backend", "gloo",
                 "--ddp-backend", "legacy_ddp", "--distributed-world-size", "2",
                 "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "1e-3",
                 "--max-tokens", "256", "--log-interval", "1", "--log-format", "json",
                 "--num-workers", "0", "--disable-validation", "--seed", "7"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun(*args, timeout=600, nproc=2, pythonpath=()) -> str:
    """``torchrun --nproc_per_node NPROC ARGS`` with one thread a process; its output (fairseq
    logs to stderr here). ``pythonpath``: folders searched after this checkout, before the
    installed packages."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *map(str, args)]
    # this checkout's package first, also for a script (tests/distributed_driver.py), whose
    # sys.path starts at its own folder rather than the working directory
    path = os.pathsep.join(filter(None, [REPO, *map(str, pythonpath),
                                         os.environ.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as scratch:  # the working directory: fairseq makes
        # its default ./checkpoints there even with --no-save
        proc = subprocess.run(cmd, cwd=scratch, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path})
    output = proc.stdout + proc.stderr
    errors = "\n".join(line for line in output.splitlines() if "Error" in line)
    assert proc.returncode == 0, (f"torchrun exited {proc.returncode}; its errors:\n{errors}\n"
                                  f"its last output:\n{output[-4000:]}")
    return output


TRAIN_INNER = r"\btrain_inner\b\W+\{"  # the start of a per-update record


def train_inner(log: str):
    """The per-update JSON records fairseq logged (--log-format json --log-interval 1)."""
    # "INFO:train_inner:{...}" or fairseq's own format "| INFO | train_inner | {...}",
    # depending on which logging configuration the process got first
    return [json.loads(line[line.index("{", line.index("train_inner")):])
            for line in log.splitlines() if re.search(TRAIN_INNER, line)]


def by_update(records):
    return {int(r["num_updates"]): r for r in records}


# --- one launch for the file's two-process runs ---------------------------------------------

DRIVER = os.path.join(REPO, "tests", "distributed_driver.py")


def resume_runs(root, data, prefix, extra=()):
    """PREFIX-first trains to update 3 and saves; PREFIX-resumed, the next run of the launch
    (a new trainer, model and optimizer, loaded from the file), resumes it to update 6;
    PREFIX-whole trains to update 6 without interruption."""
    def run(name, save_dir, max_update, *more):
        return {"name": f"{prefix}-{name}",
                "argv": [str(data), *TWO_PROCESSES, "--arch", "deepnet_transformer_tiny",
                         "--max-update", str(max_update), "--save-dir", str(save_dir),
                         "--no-epoch-checkpoints", *extra, *more]}

    return [run("first", root / prefix / "ck", 3), run("resumed", root / prefix / "ck", 6),
            run("whole", root / prefix / "whole", 6, "--no-save")]


@pytest.fixture(scope="module")
def launched(toy_data, tmp_path_factory):
    """Every two-process run of this file but the killed one, in one torchrun launch of
    tests/distributed_driver.py (a launch spends about 15 s of two CPU cores on imports and
    gloo's start before its first update): the resumes, plain and ZeRO-1 in each precision,
    the LayerNorm multiplier's and depth transfer's steps, the source gain's validation, and
    every method. The folder of their logs (NAME.log) and save folders."""
    root = tmp_path_factory.mktemp("two-processes")
    runs = [*resume_runs(root, toy_data, "resume"),
            *(run for precision in sorted(ZERO) for run in resume_runs(
                root, toy_data, f"zero-{precision}",
                ["--save-interval-updates", "3", *ZERO[precision]])),
            *zero_ln_lr_runs(root, toy_data), source_gain_run(toy_data, root),
            *method_runs(toy_data)]
    for run in runs:
        run["log"] = str(root / f"{run['name']}.log")
    spec = root / "runs.json"
    spec.write_text(json.dumps(runs))
    torchrun(DRIVER, spec)
    return root


def read_log(root, name) -> str:
    return (root / f"{name}.log").read_text()


@pytest.fixture(scope="module")
def resume(launched):
    """resume_runs' logs, unsharded, and the resumed save folder."""
    return {**{key: read_log(launched, f"resume-{key}") for key in ("first", "resumed", "whole")},
            "ckpt": launched / "resume" / "ck"}


def test_two_process_resume_continues_with_the_uninterrupted_losses(resume):
    assert "(epoch 1 @ 3 updates)" in resume["resumed"]  # fairseq's "Loaded checkpoint" line
    first, resumed, whole = (by_update(train_inner(resume[k]))
                             for k in ("first", "resumed", "whole"))
    assert sorted(first) == [1, 2, 3] and sorted(resumed) == [4, 5, 6]
    assert sorted(whole) == [1, 2, 3, 4, 5, 6]
    for update in range(1, 7):
        run = first if update <= 3 else resumed
        for key in ("loss", "gnorm"):  # logged to 3 decimals: equal up to that rounding
            assert abs(float(run[update][key]) - float(whole[update][key])) <= 1e-3, (update, key)
    # the check can tell: a resume that restarted from scratch would repeat updates 1-3
    assert [whole[u]["loss"] for u in (4, 5, 6)] != [whole[u]["loss"] for u in (1, 2, 3)]


def test_the_broadcast_state_needs_only_the_allowlisted_classes(resume):
    # what rank 0 sends: the checkpoint as fairseq loads it, tensors split off, torch.save'd
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as distributed_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(str(resume["ckpt"] / "checkpoint_last.pt"))
    obj = distributed_utils._split_tensors_from_obj(state, [])
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    found = set(torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(buffer.getvalue())))
    allowed = [*checkpoint_compat.broadcast_globals(),
               *checkpoint_compat.fairseq_checkpoint_globals()]
    allowed = {f"{g.__module__}.{g.__qualname__}" for g in allowed}
    assert "omegaconf.dictconfig.DictConfig" in found  # what made rank 1 fail before
    assert found <= allowed, found - allowed
    # outside fairseq's broadcast the weights-only unpickler still refuses OmegaConf ...
    with pytest.raises(pickle.UnpicklingError, match="DictConfig"):
        torch.load(io.BytesIO(buffer.getvalue()))
    # ... and with the broadcast's allowlist the state comes back whole
    with torch.serialization.safe_globals(checkpoint_compat.broadcast_globals()):
        loaded = torch.load(io.BytesIO(buffer.getvalue()))
    assert loaded["cfg"] == obj["cfg"] and loaded["extra_state"] == obj["extra_state"]


# --- Admin's reduction ---------------------------------------------------------------------


# --- monitors through fairseq's wrappers ----------------------------------------------------


# --- every method, and the monitors, with 2 processes -----------------------------------------

MONITORED = "deepnet+translation_monitored"


def method_runs(data):
    """Every registered method (tiny, 2L-2L) and one monitored run, 3 updates each."""
    runs = []
    for name, method in methods.METHODS.items():
        argv = method.train_args(2, 2)
        argv[argv.index("--arch") + 1] += "_tiny"
        runs.append({"name": f"method-{name}", "argv": argv})
    runs.append({"name": f"method-{MONITORED}", "argv": ["--arch", "deepnet_transformer_tiny",
                                                         "--task", "translation_monitored"]})
    for run in runs:
        run["argv"] = [str(data), *TWO_PROCESSES, "--max-update", "3", "--no-save", *run["argv"]]
    return runs


@pytest.fixture(scope="module")
def two_process_runs(launched):
    """name -> the path of rank 0's log of method_runs'."""
    return {name: str(launched / f"method-{name}.log") for name in [*methods.METHODS, MONITORED]}


def check_two_process_run(log_path):
    for rank in (0, 1):  # both processes finished this run, in a world of 2
        with open(f"{log_path}.rank{rank}.json") as handle:
            finished = json.load(handle)
            assert (finished["rank"], finished["world_size"]) == (rank, 2)
    log = open(log_path).read()
    assert "training on 2 devices" in log and "'distributed_world_size': 2" in log
    records = by_update(train_inner(log))
    assert sorted(records) == [1, 2, 3]
    assert all(math.isfinite(float(r["loss"])) for r in records.values())
    return records


@pytest.mark.parametrize("name", list(methods.METHODS))
def test_each_method_trains_with_two_processes(two_process_runs, name):
    check_two_process_run(two_process_runs[name])


def test_monitors_log_real_values_with_two_processes(two_process_runs):
    records = check_two_process_run(two_process_runs[MONITORED])
    expected = {f"mon_{stat}.{side}.{i}" for stat in ("grad", "lnin", "upd")
                for side in ("enc", "dec") for i in range(2)}
    for update, record in records.items():
        values = {k: float(v) for k, v in record.items() if k.startswith("mon_")}
        assert expected | {"mon_grad", "mon_lnin", "mon_upd"} == set(values), update
        assert all(math.isfinite(v) and v > 0 for v in values.values()), values


# --- ZeRO-1 (fairseq's --zero-sharding os: torch's ZeRO shards Adam's state, nn/zero.py) -----

ZERO = {"fp32": ["--zero-sharding", "os"],
        # fairseq refuses ZeRO with fp16's flattened master copy: one master per parameter
        "fp16": ["--zero-sharding", "os", "--fp16", "--fp16-no-flatten-grads",
                 "--fp16-init-scale", "128"]}


@pytest.fixture(scope="module", params=sorted(ZERO))
def zero(request, launched):
    """As ``resume``, with ZeRO-1 (and fp16 on CPU, fairseq_train_compat item 3), saving at
    update 3 too."""
    prefix = f"zero-{request.param}"
    return {**{key: read_log(launched, f"{prefix}-{key}") for key in ("first", "resumed", "whole")},
            "ckpt": launched / prefix / "ck", "root": launched / prefix,
            "precision": request.param}


def test_zero1_trains_saves_and_resumes_with_the_uninterrupted_losses(zero):
    assert "(epoch 1 @ 3 updates)" in zero["resumed"]
    first, resumed, whole = (by_update(train_inner(zero[k])) for k in ("first", "resumed", "whole"))
    assert sorted(first) == [1, 2, 3] and sorted(resumed) == [4, 5, 6]
    for update in range(1, 7):
        run = first if update <= 3 else resumed
        assert abs(float(run[update]["loss"]) - float(whole[update]["loss"])) <= 1e-3, update
    assert [whole[u]["loss"] for u in (4, 5, 6)] != [whole[u]["loss"] for u in (1, 2, 3)]


def test_a_zero1_checkpoint_averages_exports_and_decodes(zero, toy_data):
    root = zero["root"]
    subprocess.run(["deepnet-average-checkpoints", "--inputs", str(zero["ckpt"]),
                    "--num-update-checkpoints", "2", "--output", str(root / "avg.pt")],
                   check=True, capture_output=True)
    subprocess.run(["deepnet-export", str(root / "avg.pt"), "--output", str(root / "plain.pt")],
                   check=True, capture_output=True)
    decoded = subprocess.run(["fairseq-generate", str(toy_data), "--user-dir", USER_DIR,
                              "--path", str(root / "avg.pt"), "--gen-subset", "test", "--cpu",
                              "--beam", "2", "--batch-size", "64"],
                             capture_output=True, text=True, check=True)
    hypotheses = [line for line in decoded.stdout.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == 40  # every test sentence of the toy corpus


# --- the LayerNorm lr multiplier under ZeRO-1 -------------------------------

LN_LR_VARIANTS = ("plain", "scaled", "transfer", "transferddp")


def zero_ln_lr_runs(root, data):
    """One update of 2 processes with ZeRO-1, in fp32 and in fp16 (unflattened master copies),
    each without and with ``--deepnorm-ln-lr-multiplier auto``, and with depth transfer
    sharded and not; each records its first update's steps (distributed_driver.py)."""
    runs = []
    for precision in sorted(ZERO):
        transfer = ["--depth-transfer", "depth_mup", "--depth-base", "1"]
        options = {"plain": [], "scaled": ["--deepnorm-ln-lr-multiplier", "auto"],
                   "transfer": transfer, "transferddp": transfer}
        for variant in LN_LR_VARIANTS:
            name = f"lnlr-{precision}-{variant}"
            sharding = ZERO[precision][2:] if variant == "transferddp" else ZERO[precision]
            runs.append({"name": name, "steps": str(root / name),
                         "argv": [str(data), *TWO_PROCESSES, "--arch", "deepnet_transformer_tiny",
                                  "--dropout", "0", "--max-update", "1", "--no-save",
                                  *sharding, *options[variant]]})
    return runs


@pytest.fixture(scope="module")
def zero_ln_lr(launched):
    """(precision, variant) -> [rank 0's record, rank 1's] of zero_ln_lr_runs'."""
    return {(precision, variant): [torch.load(launched / f"lnlr-{precision}-{variant}.rank{rank}.pt")
                                   for rank in (0, 1)]
            for precision in sorted(ZERO) for variant in LN_LR_VARIANTS}


@pytest.mark.parametrize("precision", sorted(ZERO))
def test_zero1_scales_the_layernorm_steps_by_the_multiplier(zero_ln_lr, precision):
    """With ZeRO-1 (torch's ZeRO steps each rank's shard of the parameters, then broadcasts
    them), one update scales every tagged LayerNorm step by its stack's k on both ranks, the
    tagged parameters of either rank's shard alike, and changes no other step. In fp16 the
    steps compared are those of the fp32 master copies ZeRO shards (--fp16-no-flatten-grads)."""
    from deepnet_fairseq import constants
    from deepnet_fairseq.nn import layernorm_lr

    plain, scaled = zero_ln_lr[(precision, "plain")], zero_ln_lr[(precision, "scaled")]
    expected = layernorm_lr.stack_multipliers("auto", constants.encoder_decoder_for(2, 2, "paper"),
                                              "paper")
    layernorm = sorted(n for n in scaled[0]["steps"] if ".layers." in n and "layer_norm" in n)
    assert len(layernorm) == 2 * (2 * 2 + 2 * 3)  # gain and bias of 2x2 encoder, 2x3 decoder LNs
    optimizers = {"fp32": ["FairseqAdam", "FairseqZeRO", "Adam"],
                  "fp16": ["FP16Optimizer", "FairseqZeRO", "Adam"]}[precision]
    for records in (plain, scaled):
        assert [r["optimizers"] for r in records] == [optimizers, optimizers]
    # each rank's shard holds some of the tagged parameters, and together all of them
    own = [set(r["own_tagged"]) for r in scaled]
    assert own[0] and own[1] and not own[0] & own[1] and own[0] | own[1] == set(layernorm)
    assert plain[0]["own_tagged"] == []
    for key in ("steps", "masters") if precision == "fp16" else ("steps",):
        for name in scaled[0][key]:  # the replicas agree after ZeRO's broadcast
            for records in (plain, scaled):
                assert torch.equal(records[0][key][name], records[1][key][name]), (key, name)
    stepped = "masters" if precision == "fp16" else "steps"
    for name, step in scaled[0][stepped].items():
        base = plain[0][stepped][name]
        if name in layernorm:
            k = expected[name.split(".")[0]]
            assert base.abs().max() > 1e-4, name  # a real step to compare with
            # fp32 arithmetic next to values near 1: 2 ulps of 1.0 (fp16: on the masters too)
            torch.testing.assert_close(step, k * base, rtol=1e-4, atol=2.4e-7, msg=name)
        else:
            assert torch.equal(step, base), f"{name} changed"
    if precision == "fp16":  # and the fp16 model holds its masters' values, rounded
        for name in layernorm:
            assert not torch.equal(scaled[0]["steps"][name], plain[0]["steps"][name]), name


@pytest.mark.parametrize("precision", sorted(ZERO))
def test_zero1_steps_with_depth_transfer_are_those_without_sharding(zero_ln_lr, precision):
    """--depth-transfer tags every layer parameter (lr x k, Adam epsilon x e, applied as the
    gradient / e during the step): with ZeRO-1 one update of 2 processes gives the steps of
    the same update without sharding, whose values test_depth_transfer.py checks against
    Adam's formula; every layer parameter's step is tagged and real."""
    sharded, replicated = zero_ln_lr[(precision, "transfer")], zero_ln_lr[(precision, "transferddp")]
    stepped = "masters" if precision == "fp16" else "steps"
    layers = [n for n in sharded[0][stepped] if ".layers." in n]
    own = [set(r["own_tagged"]) for r in sharded]
    assert own[0] | own[1] == set(layers) and not own[0] & own[1]
    for name, step in sharded[0][stepped].items():
        assert step.abs().max() > 0, name
        torch.testing.assert_close(step, replicated[0][stepped][name], rtol=1e-5, atol=1e-7,
                                   msg=name)


# --- a killed torchrun -----------------------------------------------------------------------

def _children(pid: int):
    """The pids whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


def test_workers_die_with_a_killed_torchrun(toy_data, tmp_path):
    """SIGKILL of torchrun alone, which can pass nothing on: its two training workers (the
    recipes' torchrun command, deepnet_fairseq.fairseq_train_compat) end within seconds instead
    of training on as orphans."""
    import signal
    import time

    path = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    log = tmp_path / "torchrun.log"
    with open(log, "wb") as output:  # the child writes into its own copy
        proc = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
             "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "-m",
             "deepnet_fairseq.fairseq_train_compat", toy_data, *TWO_PROCESSES, "--arch",
             "deepnet_transformer_tiny", "--max-update", "1000000", "--no-save"],
            cwd=tmp_path, stdout=output, stderr=subprocess.STDOUT,  # its ./checkpoints there
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path})
    workers = []
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(workers) < 2:
            time.sleep(1)
            workers = [pid for pid in _children(proc.pid) if _running(pid)]
        assert len(workers) == 2, "torchrun did not start its 2 workers"
        # past start-up: an update logged (rank 0, every update) means both workers train
        wait_for(lambda: re.search(TRAIN_INNER, log.read_text()), "training update", procs=[proc])
        assert all(map(_running, workers))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.time() + 30
        while time.time() < deadline and any(map(_running, workers)):
            time.sleep(0.5)
        assert not any(map(_running, workers)), "torchrun's workers outlived it"
    finally:
        for pid in [proc.pid, *workers]:  # whatever the outcome, nothing left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# --- the source-gain criterion across workers ------------------------------------------------

def source_gain_run(data, root):
    """Validation at every update with the source-gain criterion, in batches of 13."""
    options = [option for option in TWO_PROCESSES if option != "--disable-validation"]
    return {"name": "source-gain",
            "argv": [str(data), *options, "--arch", "deepnet_transformer_tiny", "--max-update", "2",
                     "--criterion", "label_smoothed_cross_entropy_with_source_gain",
                     "--label-smoothing", "0.1", "--batch-size-valid", "13",
                     "--required-batch-size-multiple", "1", "--validate-interval-updates", "1",
                     "--save-dir", str(root / "source-gain"), "--no-save"]}


def test_the_source_gain_criterion_validates_with_two_processes(launched):
    """fairseq sums each validation batch's outputs across the workers key by key: in batches
    of 13, the 40 validation pairs end in a batch of one sentence, not measured, on one worker
    while the other's batch is, and both must still send the same keys (without them, gloo's
    all-reduce failed: "Connection reset by peer")."""
    log = read_log(launched, "source-gain")
    valid = [json.loads(line[line.index("{", line.index("valid")):]) for line in log.splitlines()
             if re.search(r"\bvalid\b\W+\{", line)]
    assert len(valid) >= 2
    assert all(math.isfinite(float(record["valid_source_gain"])) for record in valid)
