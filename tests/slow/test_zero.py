"""ZeRO-1 (``--zero-sharding os``) on torch's ZeroRedundancyOptimizer (deepnet_fairseq/nn/zero.py):
the same training as fairseq's fairscale OSS, and checkpoints that are those of an unsharded run,
so that a run saved by 2 processes resumes on 1 and on 3, and one saved by 1 on 2.

Real torchrun processes (gloo, CPU) running fairseq-train through tests/distributed_driver.py,
in four launches, and a fifth recorded once:

0. the reference, two processes with fairscale 0.4.13 on their path alone (it is not part of
   the install: tests/reference_fairscale.py fetches it): each precision fairseq allows with
   ZeRO, sharded by fairscale's OSS (fairseq's own ``shard_``), 6 updates each. Recorded in
   tests/data/zero_reference.json (tests/zero_reference.py says how, and how it is compared);
   the marked job ``-m costly`` launches it afresh and compares it with the record and with
   the plugin's runs;
1. two processes, the plugin's path: the same runs sharded by torch's; memory-efficient fp16
   saved at update 3 and resumed; then A (ZeRO-1) and W (unsharded) train epoch 1, and R
   (unsharded) resumes W for epoch 2, as R3 does with ``--update-freq 3``;
2. one process: B (unsharded) resumes A for epoch 2, C trains epoch 1 (unsharded), E gives
   --zero-sharding os to one process. ``--update-freq 2``: an update takes the two batches two
   processes take, so one process trains as two do;
3. two processes: D (ZeRO-1) resumes C for epoch 2;
4. three processes: F (ZeRO-1, ``--update-freq 2``) resumes A for epoch 2.

The resumed runs are compared with R, W resumed at the same point: fairseq's epoch 2 after a
resume at the epoch's end is not the uninterrupted one (B, D and R agree with each other and
differ from W alike, sharded or not, on 1 or 2 processes), which is fairseq's resume, not
sharding's business.

F is compared with R3 instead: three processes cannot take R's updates, two batches each. fairseq
deals the epoch's shuffled batches round-robin (batch i to process i mod N, the last ones padded
with empty, zero-weighted batches) and each process takes its next U of them an update, so update
k takes batches kNU to (k+1)NU - 1, whatever N and U are with the same product: 2 processes with
``--update-freq 3`` (R3) and 3 with ``--update-freq 2`` (F) take the same 6 batches an update,
the epoch's short last update too (checked: the same sentence and token counts, update by
update), and sum the same gradients in another order. So F's losses must be R3's at every update
(to the logged precision), and its weights and moments R3's within float rounding, but for the
attention key biases, whose gradient is rounding noise (KEY_BIAS). Before its first update, F's
three shards must hold A's saved Adam moments and step counts, each parameter's on exactly one
process, to the bit.

The plugin's runs (launches 1 to 4) must not import fairscale: the install has none, and nothing
on the plugin's path may bring it (fairseq imports it, in ``try`` blocks, whenever it is there).
"""

import json
import os

import pytest
import torch

import zero_reference
from support import REPO
from test_distributed import TWO_PROCESSES, by_update, torchrun, train_inner
from zero_reference import KEY_BIAS, NOISE  # rounding noise, explained there

PRECISIONS = {"fp32": [],
              # fairseq refuses ZeRO with fp16's flat master copy: one master per parameter
              "fp16": ["--fp16", "--fp16-no-flatten-grads", "--fp16-init-scale", "128"],
              "memeff": ["--memory-efficient-fp16", "--fp16-init-scale", "128"],
              "bf16": ["--bf16", "--fp16-no-flatten-grads"]}
ZERO = ["--zero-sharding", "os"]
DISTRIBUTED = ["--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp",
               "--distributed-world-size", "2"]  # (3 for THREE)
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
THREE = [*DISTRIBUTED[:-1], "3", *ONE_PROCESS]


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
def reference(toy_data, tmp_path_factory, fairscale_reference):
    """Launch 0 (module docstring): fairscale's OSS, from the reference copy."""
    root = tmp_path_factory.mktemp("zero-reference")
    launch(root, "reference", {
        f"{precision}-fairscale": ([str(toy_data), *TWO, *ZERO, *flags, "--max-update", "6",
                                    "--no-epoch-checkpoints"],
                                   {"sharding": "fairscale",
                                    "steps": str(root / f"{precision}-fairscale")})
        for precision, flags in PRECISIONS.items()}, pythonpath=[fairscale_reference])
    return root


@pytest.fixture(scope="module")
def runs(toy_data, tmp_path_factory):
    """Launches 1 to 4 (module docstring): the plugin's path, without fairscale."""
    root = tmp_path_factory.mktemp("zero")
    data = str(toy_data)
    first = {}
    for precision, flags in PRECISIONS.items():
        name = f"{precision}-torch"
        first[name] = ([data, *TWO, *ZERO, *flags, "--max-update", "6", "--no-epoch-checkpoints"],
                       {"steps": str(root / name)})
    for name, sharding in (("memeff", ZERO), ("memeff-unsharded", [])):
        memeff = [data, *TWO, *sharding, *PRECISIONS["memeff"], "--no-epoch-checkpoints"]
        first[f"{name}-3"] = ([*memeff, "--max-update", "3"], {})
        first[f"{name}-3to6"] = ([*memeff, "--max-update", "6", "--restore-file",
                                  str(root / f"{name}-3" / "checkpoint_last.pt")], {})
    first.update(epoch_runs(root, data, ZERO))
    launch(root, "first", first)
    launch(root, "one", one_process_runs(root, data, ZERO), nproc=1)

    launch(root, "two-after-one", {
        "D": ([data, *TWO, *ZERO, "--max-epoch", "2", "--restore-file",
               str(root / "C" / "checkpoint1.pt")], {})})

    launch(root, "three", three_process_run(root, data, ZERO,
                                            {"restored": str(root / "F.restored")}), nproc=3)
    return root


# The resume plan test_zero.py and test_fsdp.py share, for SHARDING's flags (module docstring)
def epoch_runs(root, data, sharding):
    """Launch 1's A (sharded) and W (unsharded) training epoch 1, R and R3 resuming W."""
    resume_w = ["--max-epoch", "2", "--restore-file", str(root / "W" / "checkpoint1.pt")]
    return {"A": ([data, *TWO, *sharding, "--max-epoch", "1"], {}),
            "W": ([data, *TWO, "--max-epoch", "1"], {}),
            "R": ([data, *TWO, *resume_w], {}),
            "R3": ([data, *TWO, "--update-freq", "3", *resume_w], {})}


def one_process_runs(root, data, sharding):
    """Launch 2: B resumes A, C trains epoch 1, E gives the sharding to one process."""
    one = [data, *ONE_PROCESS, "--update-freq", "2"]
    return {"B": ([*one, "--max-epoch", "2", "--restore-file", str(root / "A" / "checkpoint1.pt")],
                  {}),
            "C": ([*one, "--max-epoch", "1"], {}),
            "E": ([*one, *sharding, "--max-update", "2", "--no-save"], {})}


def three_process_run(root, data, sharding, extra=None):
    """F: three sharded processes resume A for epoch 2 (compared with R3)."""
    return {"F": ([data, *THREE, *sharding, "--update-freq", "2", "--max-epoch", "2",
                   "--restore-file", str(root / "A" / "checkpoint1.pt")], extra or {})}


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




def assert_same_training(a, b, rtol, atol, summed_alike=True):
    """Two checkpoints' weights and Adam moments (equal where rtol = atol = 0). Without
    ``summed_alike`` (the same gradients summed in another order), the attention key biases'
    weights need only both be noise (KEY_BIAS)."""
    (moments_a, steps_a), (moments_b, steps_b) = adam_moments(a), adam_moments(b)
    assert steps_a == steps_b and len(steps_a) == 1
    assert moments_a.keys() == moments_b.keys() and moments_a
    for key, value in moments_a.items():
        assert value.dtype == torch.float32, key  # fp32 moments, also beside fp16 weights
        torch.testing.assert_close(value, moments_b[key], rtol=rtol, atol=atol, msg=str(key))
    assert a["model"].keys() == b["model"].keys()
    for name, value in a["model"].items():
        if not summed_alike and name.endswith(KEY_BIAS):
            assert max(value.abs().max(), b["model"][name].abs().max()) < NOISE, name
        else:
            torch.testing.assert_close(value, b["model"][name], rtol=rtol, atol=atol, msg=name)


OUTER = {"fp32": "FairseqAdam", "memeff": "MemoryEfficientFP16Optimizer"}  # else FP16Optimizer


def assert_sharded_by(root, name, precision, wrapper):
    for rank in (0, 1):  # what sharded the state, on both processes
        record = torch.load(root / f"{name}.rank{rank}.pt", weights_only=False)
        assert record["optimizers"] == [OUTER.get(precision, "FP16Optimizer"), wrapper, "Adam"]


def recorded(root, name):
    return zero_reference.record_run(by_update(train_inner(log(root, name))),
                                     checkpoint(root / name / "checkpoint_last.pt"))


@pytest.mark.parametrize("precision", sorted(PRECISIONS))
def test_torch_zero1_trains_as_fairscale_oss_did(runs, precision):
    """Update by update the losses, gradient norms and loss scales fairseq logged, and at the
    end the weights and Adam moments, of the recorded fairscale run (tests/zero_reference.py:
    to the bit on the machine class it was recorded on): both step each tensor on its owner
    with the same optimizer and broadcast it."""
    assert_sharded_by(runs, f"{precision}-torch", precision, "FairseqZeRO")
    golden = zero_reference.load()
    observed = recorded(runs, f"{precision}-torch")
    assert sorted(map(int, observed["updates"])) == list(range(1, 7))
    assert len({r["loss"] for r in observed["updates"].values()}) == 6  # it trains
    zero_reference.assert_same_run(observed, golden["runs"][precision],
                                   exact=zero_reference.on_the_recorded_machine(golden),
                                   what=f"{precision}: torch ZeRO-1 against recorded fairscale",
                                   precision=precision)


@pytest.mark.costly
@pytest.mark.parametrize("precision", sorted(PRECISIONS))
def test_fairscale_oss_trains_as_recorded_and_as_torch_zero1_side_by_side(runs, reference,
                                                                         precision):
    """The re-derivation: a fresh launch of fairscale's OSS gives the recorded reference, and
    the plugin's runs equal it side by side, to the bit."""
    assert_sharded_by(reference, f"{precision}-fairscale", precision, "FairseqOSS")
    golden = zero_reference.load()
    zero_reference.assert_same_run(recorded(reference, f"{precision}-fairscale"),
                                   golden["runs"][precision],
                                   exact=zero_reference.on_the_recorded_machine(golden),
                                   what=f"{precision}: fresh fairscale against recorded",
                                   precision=precision)
    fairscale = by_update(train_inner(log(reference, f"{precision}-fairscale")))
    torch_runs = by_update(train_inner(log(runs, f"{precision}-torch")))
    for update, figures in fairscale.items():
        for key in zero_reference.LOGGED:
            assert torch_runs[update].get(key) == figures.get(key), (update, key)
    assert_same_training(checkpoint(runs / f"{precision}-torch" / "checkpoint_last.pt"),
                         checkpoint(reference / f"{precision}-fairscale" / "checkpoint_last.pt"),
                         rtol=0, atol=0)


@pytest.mark.costly
def test_the_reference_ran_on_the_reference_fairscale(reference, fairscale_reference):
    for precision in PRECISIONS:
        for rank in (0, 1):
            finished = json.loads((reference / f"{precision}-fairscale.log.rank{rank}.json")
                                  .read_text())
            assert finished["fairscale_imported"] is True
            assert finished["fairscale_file"].startswith(str(fairscale_reference) + os.sep)


def test_the_plugins_runs_import_no_fairscale(runs):
    """Every rank of every run of launches 1 to 4 finished without fairscale in sys.modules.
    fairseq imports it (in ``try`` blocks) whenever it is importable, so this holds where the
    environment is the install (scripts/install.sh), which has none, and nothing on the plugin's
    path brings it."""
    finished = {path.name: json.loads(path.read_text()) for path in runs.glob("*.log.rank*.json")}
    assert {name.partition(".log.")[0] for name in finished} >= {"A", "B", "C", "D", "E", "F",
                                                                  "R", "R3", "W"}
    imported = {name: record["fairscale_file"] for name, record in finished.items()
                if record["fairscale_imported"]}
    assert not imported, (
        f"fairscale imported on the plugin's path, from {sorted(set(imported.values()))}, by "
        f"the runs {sorted({name.partition('.log.')[0] for name in imported})}. If this Python "
        f"has fairscale installed (earlier versions of scripts/install.sh installed it; the "
        f"install no longer does), fairseq imports it: uninstall it to test the install as "
        f"it is.")


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


def check_resumed(runs, name, source, reference="R", updates=10, summed_alike=True):
    """``name`` loaded ``source`` at update 10 and trained epoch 2 (``updates`` updates) as
    ``reference`` did."""
    loaded = f"Loaded checkpoint {runs / source / 'checkpoint1.pt'} (epoch 2 @ 10 updates)"
    assert loaded in log(runs, name)
    resumed, expected = losses(runs, name), losses(runs, reference)
    assert sorted(resumed) == sorted(expected) == list(range(11, 11 + updates))
    for update in resumed:
        assert abs(resumed[update] - expected[update]) <= 2e-3, update
    ours, theirs = (checkpoint(runs / n / "checkpoint2.pt") for n in (name, reference))
    assert adam_moments(ours)[1] == {10 + updates}
    # another number of processes sums an update's batch gradients grouped otherwise: one
    # process's two against two processes' one each, the same sums here (measured: to the bit);
    # three processes' two each against two's three each, not (summed_alike=False)
    assert_same_training(ours, theirs, rtol=1e-5, atol=1e-7, summed_alike=summed_alike)


def test_two_processes_zero1_checkpoint_resumes_on_one(runs):
    check_resumed(runs, "B", "A")
    finished = json.loads((runs / "B.log.rank0.json").read_text())
    assert finished["world_size"] == 1


def test_one_process_checkpoint_resumes_on_two_with_zero1(runs):
    # C, one process with --update-freq 2, trained epoch 1 as the two processes of W did
    assert_same_training(checkpoint(runs / "C" / "checkpoint1.pt"),
                         checkpoint(runs / "W" / "checkpoint1.pt"), rtol=1e-5, atol=1e-7)
    check_resumed(runs, "D", "C")
    assert "shards Adam's state over 2 processes" in log(runs, "D")
    for rank in (0, 1):
        finished = json.loads((runs / f"D.log.rank{rank}.json").read_text())
        assert finished["world_size"] == 2


def test_two_processes_zero1_checkpoint_resumes_on_three_with_zero1(runs):
    """F's three shards hold A's saved optimizer state, intact, and F trains epoch 2 as R3 (two
    processes, unsharded, the same 6 batches an update: module docstring) does."""
    saved = checkpoint(runs / "A" / "checkpoint1.pt")["last_optimizer_state"]["state"]
    shards = [torch.load(runs / f"F.restored.rank{rank}.pt", weights_only=False)
              for rank in range(3)]
    for shard in shards:
        assert shard["world_size"] == 3 and shard["num_updates"] == 10
        assert shard["optimizers"] == ["FairseqAdam", "FairseqZeRO"]
        assert shard["parameters"] == len(saved) and 0 < len(shard["state"]) == shard["owned"]
    owned = [set(shard["state"]) for shard in shards]
    assert sum(map(len, owned)) == len(set.union(*owned))  # each parameter on one process
    assert set.union(*owned) == set(saved)  # and every one on some process
    for shard in shards:
        for index, state in shard["state"].items():
            assert state.keys() == saved[index].keys() and state["step"] == 10, index
            for key in ("exp_avg", "exp_avg_sq"):
                assert state[key].dtype == saved[index][key].dtype == torch.float32
                assert torch.equal(state[key], saved[index][key]), (index, key)
    assert "shards Adam's state over 3 processes" in log(runs, "F")
    # epoch 2's 10 updates of 2 batches are 4 of 6, the last one short; each the same batches
    # as R3's (the same sentences and target tokens), their gradients summed in another order
    check_resumed(runs, "F", "A", reference="R3", updates=4, summed_alike=False)
    ours, theirs = (by_update(train_inner(log(runs, name))) for name in ("F", "R3"))
    for update in ours:
        assert [ours[update][key] for key in ("bsz", "wpb")] == [theirs[update][key]
                                                                for key in ("bsz", "wpb")]
    for rank in range(3):
        assert json.loads((runs / f"F.log.rank{rank}.json").read_text())["world_size"] == 3


def test_zero1_on_one_process_has_nothing_to_shard(runs):
    text = log(runs, "E")
    assert "--zero-sharding os with one process: nothing to shard" in text
    assert sorted(losses(runs, "E")) == [1, 2]


def test_fairseq_train_with_the_user_dir_shards_with_torch(toy_data, tmp_path):
    """The recipes' GPU launch is fairseq-train itself with --user-dir: fairseq imports the
    plugin (register) before it builds the trainer, so its shard_ is the plugin's (one CPU
    process: the plugin's one-process line)."""
    import subprocess

    proc = subprocess.run(
        ["fairseq-train", str(toy_data),
         *ONE_PROCESS, *ZERO, "--max-update", "1", "--no-save"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,  # its ./checkpoints there
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--zero-sharding os with one process: nothing to shard" in proc.stdout + proc.stderr
