"""ZeRO-1 (``--zero-sharding os``) on torch's ZeroRedundancyOptimizer (deepnet_fairseq/nn/zero.py):
the same training as fairseq's fairscale OSS, and checkpoints that are those of an unsharded run,
so that a run saved by 2 processes resumes on 1 and the reverse.

Real torchrun processes (gloo, CPU) running fairseq-train through tests/distributed_driver.py,
in three launches:

1. two processes: each precision fairseq allows with ZeRO, sharded by fairscale's OSS (fairseq's
   own ``shard_``) and by torch's, 6 updates each; memory-efficient fp16 saved at update 3 and
   resumed; then A (ZeRO-1) and W (unsharded) train epoch 1, and R (unsharded) resumes W for
   epoch 2;
2. one process: B (unsharded) resumes A for epoch 2, C trains epoch 1 (unsharded), E gives
   --zero-sharding os to one process. ``--update-freq 2``: an update takes the two batches two
   processes take, so one process trains as two do;
3. two processes, with fairscale made unimportable: D (ZeRO-1) resumes C for epoch 2.

The resumed runs are compared with R, W resumed at the same point: fairseq's epoch 2 after a
resume at the epoch's end is not the uninterrupted one (B, D and R agree with each other and
differ from W alike, sharded or not, on 1 or 2 processes), which is fairseq's resume, not
sharding's business.
"""

import json
import os

import pytest
import torch

from support import REPO
from test_distributed import TWO_PROCESSES, by_update, torchrun, train_inner

PRECISIONS = {"fp32": [],
              # fairseq refuses ZeRO with fp16's flat master copy: one master per parameter
              "fp16": ["--fp16", "--fp16-no-flatten-grads", "--fp16-init-scale", "128"],
              "memeff": ["--memory-efficient-fp16", "--fp16-init-scale", "128"],
              "bf16": ["--bf16", "--fp16-no-flatten-grads"]}
ZERO = ["--zero-sharding", "os"]
DISTRIBUTED = ["--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp",
               "--distributed-world-size", "2"]
# the same options for one process; no dropout, whose masks would differ between one process's
# two batches of an update and two processes' one each
ONE_PROCESS = []
_args = iter(TWO_PROCESSES)
for _arg in _args:
    if _arg in DISTRIBUTED[::2]:
        next(_args)  # its value
    else:
        ONE_PROCESS.append(_arg)
ONE_PROCESS += ["--arch", "deepnet_transformer_tiny", "--dropout", "0"]
TWO = [*DISTRIBUTED, *ONE_PROCESS]


def launch(root, stage, runs, nproc=2, pythonpath=()):
    """Run ``runs`` ({name: (argv, extra keys)}) in one torchrun launch of the driver; each
    saves to root/name, logs to root/name.log."""
    spec = []
    for name, (argv, extra) in runs.items():
        spec.append({"name": name, "log": str(root / f"{name}.log"),
                     "argv": [*argv, "--save-dir", str(root / name)], **extra})
    (root / f"{stage}.json").write_text(json.dumps(spec))
    return torchrun(os.path.join(REPO, "tests", "distributed_driver.py"), root / f"{stage}.json",
                    nproc=nproc, pythonpath=pythonpath)


@pytest.fixture(scope="module")
def runs(toy_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("zero")
    data = str(toy_data)
    first = {}
    for precision, flags in PRECISIONS.items():
        for sharding in ("fairscale", "torch"):
            name = f"{precision}-{sharding}"
            first[name] = ([data, *TWO, *ZERO, *flags, "--max-update", "6",
                            "--no-epoch-checkpoints"],
                           {"sharding": sharding, "steps": str(root / name)})
    for name, sharding in (("memeff", ZERO), ("memeff-unsharded", [])):
        memeff = [data, *TWO, *sharding, *PRECISIONS["memeff"], "--no-epoch-checkpoints"]
        first[f"{name}-3"] = ([*memeff, "--max-update", "3"], {})
        first[f"{name}-3to6"] = ([*memeff, "--max-update", "6", "--restore-file",
                                  str(root / f"{name}-3" / "checkpoint_last.pt")], {})
    first["A"] = ([data, *TWO, *ZERO, "--max-epoch", "1"], {})
    first["W"] = ([data, *TWO, "--max-epoch", "1"], {})
    first["R"] = ([data, *TWO, "--max-epoch", "2", "--restore-file",
                   str(root / "W" / "checkpoint1.pt")], {})
    launch(root, "first", first)

    one = [data, *ONE_PROCESS, "--update-freq", "2"]
    launch(root, "one", {
        "B": ([*one, "--max-epoch", "2", "--restore-file", str(root / "A" / "checkpoint1.pt")], {}),
        "C": ([*one, "--max-epoch", "1"], {}),
        "E": ([*one, *ZERO, "--max-update", "2", "--no-save"], {})}, nproc=1)

    # fairscale made unimportable, as when it is not installed (fairseq imports it in a try)
    hidden = root / "no-fairscale" / "fairscale"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('fairscale hidden by test_zero.py')\n")
    launch(root, "without-fairscale", {
        "D": ([data, *TWO, *ZERO, "--max-epoch", "2", "--restore-file",
               str(root / "C" / "checkpoint1.pt")], {})}, pythonpath=[hidden.parent])
    return root


def log(root, name):
    return (root / f"{name}.log").read_text()


def losses(root, name):
    return {u: float(r["loss"]) for u, r in by_update(train_inner(log(root, name))).items()}


def checkpoint(path):
    from fairseq import checkpoint_utils

    return checkpoint_utils.load_checkpoint_to_cpu(str(path))


def adam_moments(state):
    """{(parameter index, "exp_avg" | "exp_avg_sq"): tensor} of a checkpoint's optimizer state,
    and its step counts."""
    optimizer = state["last_optimizer_state"]["state"]
    moments = {(i, key): s[key] for i, s in optimizer.items() for key in ("exp_avg", "exp_avg_sq")}
    return moments, {s["step"] for s in optimizer.values()}


def assert_same_training(a, b, rtol, atol):
    """Two checkpoints' weights and Adam moments (equal where rtol = atol = 0)."""
    (moments_a, steps_a), (moments_b, steps_b) = adam_moments(a), adam_moments(b)
    assert steps_a == steps_b and len(steps_a) == 1
    assert moments_a.keys() == moments_b.keys() and moments_a
    for key, value in moments_a.items():
        assert value.dtype == torch.float32, key  # fp32 moments, also beside fp16 weights
        torch.testing.assert_close(value, moments_b[key], rtol=rtol, atol=atol, msg=str(key))
    assert a["model"].keys() == b["model"].keys()
    for name, value in a["model"].items():
        torch.testing.assert_close(value, b["model"][name], rtol=rtol, atol=atol, msg=name)


@pytest.mark.parametrize("precision", sorted(PRECISIONS))
def test_torch_zero1_trains_as_fairscale_oss_did(runs, precision):
    """Update by update the same losses, and at the end the same weights and Adam moments, to
    the bit: both step each tensor on its owner with the same optimizer and broadcast it."""
    outer = {"fp32": "FairseqAdam", "memeff": "MemoryEfficientFP16Optimizer"}.get(precision,
                                                                                  "FP16Optimizer")
    records = {}
    for sharding, wrapper in (("fairscale", "FairseqOSS"), ("torch", "FairseqZeRO")):
        name = f"{precision}-{sharding}"
        for rank in (0, 1):  # what sharded the state, on both processes
            record = torch.load(runs / f"{name}.rank{rank}.pt", weights_only=False)
            assert record["optimizers"] == [outer, wrapper, "Adam"]
        records[sharding] = by_update(train_inner(log(runs, name)))
    assert sorted(records["torch"]) == list(range(1, 7))
    for update, fairscale in records["fairscale"].items():
        for key in ("loss", "gnorm", "loss_scale"):
            assert records["torch"][update].get(key) == fairscale.get(key), (update, key)
    assert len({r["loss"] for r in records["torch"].values()}) == 6  # it trains
    assert_same_training(checkpoint(runs / f"{precision}-torch" / "checkpoint_last.pt"),
                         checkpoint(runs / f"{precision}-fairscale" / "checkpoint_last.pt"),
                         rtol=0, atol=0)


def test_memory_efficient_fp16_zero1_resumes_with_its_fp32_moments(runs):
    """fp16 weights, fp32 Adam moments: the resumed shard keeps them fp32 (fairseq's loading
    hack is off for the ZeRO wrapper) and trains on to the bit as an unsharded resume does, and
    as the uninterrupted run to the logged precision. (fairseq's resume of memory-efficient fp16
    itself is not bitwise: sharded or not, the weights end up to 2 fp16 ulps away from the
    uninterrupted run's.)"""
    resumed, whole = losses(runs, "memeff-3to6"), losses(runs, "memeff-torch")
    assert "(epoch 1 @ 3 updates)" in log(runs, "memeff-3to6")
    assert sorted(resumed) == [4, 5, 6]
    for update in resumed:
        assert abs(resumed[update] - whole[update]) <= 1e-3, update
    assert_same_training(checkpoint(runs / "memeff-3to6" / "checkpoint_last.pt"),
                         checkpoint(runs / "memeff-unsharded-3to6" / "checkpoint_last.pt"),
                         rtol=0, atol=0)


def test_a_zero1_checkpoint_is_the_unsharded_one(runs):
    """A (ZeRO-1) and W (unsharded) at the end of epoch 1: the same file contents, the
    optimizer state consolidated from both shards whole."""
    sharded = checkpoint(runs / "A" / "checkpoint1.pt")
    unsharded = checkpoint(runs / "W" / "checkpoint1.pt")
    assert "shards Adam's state over 2 processes" in log(runs, "A")
    assert_same_training(sharded, unsharded, rtol=0, atol=0)
    assert (sharded["last_optimizer_state"]["param_groups"]
            == unsharded["last_optimizer_state"]["param_groups"])
    assert adam_moments(sharded)[1] == {10}  # an epoch is 10 updates of 2 processes


def check_resumed(runs, name, source):
    """``name`` loaded ``source`` at update 10 and trained epoch 2 as R did."""
    loaded = f"Loaded checkpoint {runs / source / 'checkpoint1.pt'} (epoch 2 @ 10 updates)"
    assert loaded in log(runs, name)
    resumed, reference = losses(runs, name), losses(runs, "R")
    assert sorted(resumed) == sorted(reference) == list(range(11, 21))
    for update in resumed:
        assert abs(resumed[update] - reference[update]) <= 2e-3, update
    ours, theirs = (checkpoint(runs / n / "checkpoint2.pt") for n in (name, "R"))
    assert adam_moments(ours)[1] == {20}
    # one process sums the two batches' gradients where two processes all-reduce them: the same
    # sums here (measured: to the bit), and within float rounding in general
    assert_same_training(ours, theirs, rtol=1e-5, atol=1e-7)


def test_two_processes_zero1_checkpoint_resumes_on_one(runs):
    check_resumed(runs, "B", "A")
    finished = json.loads((runs / "B.log.rank0.json").read_text())
    assert finished["world_size"] == 1


def test_one_process_checkpoint_resumes_on_two_with_zero1_without_fairscale(runs):
    # C, one process with --update-freq 2, trained epoch 1 as the two processes of W did
    assert_same_training(checkpoint(runs / "C" / "checkpoint1.pt"),
                         checkpoint(runs / "W" / "checkpoint1.pt"), rtol=1e-5, atol=1e-7)
    check_resumed(runs, "D", "C")
    assert "shards Adam's state over 2 processes" in log(runs, "D")
    for rank in (0, 1):
        finished = json.loads((runs / f"D.log.rank{rank}.json").read_text())
        assert finished["world_size"] == 2 and finished["fairscale_imported"] is False
    # where fairscale is installed, fairseq imports it (in a try), though nothing uses it
    assert json.loads((runs / "A.log.rank0.json").read_text())["fairscale_imported"] is True


def test_zero1_on_one_process_has_nothing_to_shard(runs):
    text = log(runs, "E")
    assert "--zero-sharding os with one process: nothing to shard" in text
    assert sorted(losses(runs, "E")) == [1, 2]


def test_fairseq_train_with_the_user_dir_shards_with_torch(toy_data):
    """The recipes' GPU launch is fairseq-train itself with --user-dir: fairseq imports the
    plugin (register) before it builds the trainer, so its shard_ is the plugin's (one CPU
    process: the plugin's one-process line)."""
    import subprocess

    proc = subprocess.run(
        ["fairseq-train", str(toy_data),
         *ONE_PROCESS, *ZERO, "--max-update", "1", "--no-save"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--zero-sharding os with one process: nothing to shard" in proc.stdout + proc.stderr
