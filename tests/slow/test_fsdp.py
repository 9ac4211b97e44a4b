"""Full sharding (``--ddp-backend fully_sharded``) on torch's FSDP2 (deepnet_fairseq/nn/fsdp.py):
the training of the unsharded data-parallel run (``legacy_ddp``, fairseq's all-reduce), update by
update within float rounding, in fp32, fp16 and bf16, and checkpoints that are those of an
unsharded run, so that a run saved by 2 sharded processes resumes on 1 and on 3, and one saved
by 1 on 2.

Real torchrun processes (gloo, CPU) running fairseq-train through tests/distributed_driver.py,
in four launches:

1. two processes: each precision, sharded by FSDP2 and unsharded, 6 updates each; the same with
   ``--update-freq 2``, ``--checkpoint-activations`` and ``--deepnorm-ln-lr-multiplier auto``,
   and with validation (``--eval-bleu``'s beam search) after updates 3 and 6;
   memory-efficient fp16 saved at update 3 and resumed; then A (FSDP2) and W (unsharded) train
   epoch 1, and R (unsharded) resumes W for epoch 2, as R3 does with ``--update-freq 3``;
2. one process: B (unsharded) resumes A for epoch 2, C trains epoch 1 (unsharded), E gives
   --ddp-backend fully_sharded to one process (``--update-freq 2``: an update takes the two
   batches two processes take);
3. two processes, with fairscale made unimportable: D (FSDP2) resumes C for epoch 2;
4. three processes: F (FSDP2, ``--update-freq 2``) resumes A for epoch 2, every parameter split
   over 3 (unevenly where its first dimension is not a multiple of 3).

As in test_zero.py, the resumed runs are compared with R (W resumed at the same point), and F
with R3: 3 processes taking 2 batches an update and 2 taking 3 take the same 6 batches an update
(test_zero.py's docstring says why).
"""

import json

import pytest
import torch

from test_zero import (TWO, adam_moments, checkpoint, epoch_runs, launch, log, losses,
                       one_process_runs, three_process_run)

PRECISIONS = {"fp32": [],
              "fp16": ["--fp16", "--fp16-no-flatten-grads", "--fp16-init-scale", "128"],
              "memeff": ["--memory-efficient-fp16", "--fp16-init-scale", "128"],
              "bf16": ["--bf16", "--fp16-no-flatten-grads"],
              "membf16": ["--bf16", "--memory-efficient-bf16"]}
VARIANTS = {"update-freq": ["--update-freq", "2"],
            "checkpoint-activations": ["--checkpoint-activations"],
            "ln-lr": ["--deepnorm-ln-lr-multiplier", "auto", "--fp16", "--fp16-no-flatten-grads",
                      "--fp16-init-scale", "128"]}
# How close the sharded run's end is to the unsharded one's: (elementwise tolerance of the
# weights, normwise relative tolerance of each Adam moment), measured x 3 or more. fp32 is float
# rounding (the first update of 2 processes differs by 3e-7); --update-freq's 6 updates let it
# grow more where Adam divides small gradients by their small root mean square; the half
# precisions' weights within 2 units in their last place.
TOLERANCES = {"fp32": (1e-5, 1e-5), "checkpoint-activations": (1e-5, 1e-5),
              "update-freq": (2e-4, 5e-3), "resumed": (1e-4, 1e-3),
              "fp16": (2 * 2 ** -10, 3e-2), "memeff": (2 * 2 ** -10, 3e-2),
              "ln-lr": (2 * 2 ** -10, 3e-2),
              "bf16": (2 * 2 ** -7, 7e-2), "membf16": (2 * 2 ** -7, 7e-2)}
FSDP = ["--ddp-backend", "fully_sharded"]  # after TWO's legacy_ddp: the last one counts
CLIP = ["--clip-norm", "1.0"]  # clipped on the norm aggregated over the shards


@pytest.fixture(scope="module")
def runs(toy_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("fsdp")
    data = str(toy_data)
    first = {}
    for name, flags in {**PRECISIONS, **VARIANTS}.items():
        for sharding, backend in (("fsdp", FSDP), ("ddp", [])):
            first[f"{name}-{sharding}"] = ([data, *TWO, *backend, *CLIP, *flags,
                                            "--max-update", "6", "--no-epoch-checkpoints"], {})
    # validation, with generation (BLEU), after update 3 and 6, then training on
    validating = [data, *[a for a in TWO if a != "--disable-validation"], *CLIP,
                  "--save-interval-updates", "3", "--max-update", "6", "--no-epoch-checkpoints",
                  "--eval-bleu", "--eval-bleu-args", '{"beam": 2}']
    first["valid-fsdp"] = ([*validating, *FSDP], {})
    first["valid-ddp"] = (validating, {})
    memeff = [data, *TWO, *FSDP, *CLIP, *PRECISIONS["memeff"], "--no-epoch-checkpoints"]
    first["memeff-3"] = ([*memeff, "--max-update", "3"], {})
    first["memeff-3to6"] = ([*memeff, "--max-update", "6", "--restore-file",
                             str(root / "memeff-3" / "checkpoint_last.pt")], {})
    first.update(epoch_runs(root, data, FSDP))
    launch(root, "first", first)
    launch(root, "one", one_process_runs(root, data, FSDP), nproc=1)

    hidden = root / "no-fairscale" / "fairscale"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('fairscale hidden by test_fsdp.py')\n")
    launch(root, "without-fairscale", {
        "D": ([data, *TWO, *FSDP, "--max-epoch", "2", "--restore-file",
               str(root / "C" / "checkpoint1.pt")], {})}, pythonpath=[hidden.parent])

    launch(root, "three", three_process_run(root, data, FSDP), nproc=3)
    return root


def records(root, name):
    from test_distributed import by_update, train_inner

    return by_update(train_inner(log(root, name)))


def parameter_names(state):
    """The names of a checkpoint's parameters in the optimizer's order (the model's
    ``named_parameters()``, shared ones once), from the model its configuration builds."""
    from fairseq import tasks

    task = tasks.setup_task(state["cfg"]["task"])
    return [name for name, _ in task.build_model(state["cfg"]["model"]).named_parameters()]


def assert_close_training(a, b, weights, moments):
    """Two checkpoints' weights (elementwise, within ``weights``) and Adam moments (each
    tensor's difference within ``moments`` of its norm), the same step counts. The attention's
    key biases are left out: softmax does not change when every key moves alike, so their
    gradient is float rounding alone, which Adam's normalised step turns into steps of the
    learning rate's size either way."""
    names = parameter_names(a)
    (moments_a, steps_a), (moments_b, steps_b) = adam_moments(a), adam_moments(b)
    assert steps_a == steps_b and len(steps_a) == 1
    assert moments_a.keys() == moments_b.keys() and len(moments_a) == 2 * len(names)
    for (index, key), value in moments_a.items():
        assert value.dtype == torch.float32, key  # fp32 moments, also beside fp16 weights
        if not names[index].endswith("k_proj.bias"):
            error = (value - moments_b[index, key]).norm() / moments_b[index, key].norm()
            assert error <= moments, (names[index], key, float(error))
    assert list(a["model"]) == list(b["model"])
    for name, value in a["model"].items():
        assert value.dtype == b["model"][name].dtype, name
        if not name.endswith("k_proj.bias"):
            torch.testing.assert_close(value, b["model"][name], rtol=weights, atol=weights,
                                       msg=name)


SHARDED = "FSDP2: 4 layers and the rest of the model fully sharded over 2 processes"


@pytest.mark.parametrize("name", [*PRECISIONS, *VARIANTS])
def test_fsdp2_trains_as_the_unsharded_run(runs, name):
    """Update by update the logged loss, gradient norm and loss scale of the unsharded run (to
    the logged precision; fp32's to its last digit), and at the end its weights and Adam
    moments within float rounding (TOLERANCES): FSDP2's reduce-scatter and the norm summed over
    the shards add in another order than fairseq's all-reduce."""
    assert SHARDED in log(runs, f"{name}-fsdp")
    sharded, unsharded = records(runs, f"{name}-fsdp"), records(runs, f"{name}-ddp")
    assert sorted(sharded) == sorted(unsharded) == list(range(1, 7))
    tolerance = 0 if name in ("fp32", "update-freq", "checkpoint-activations") else 2e-3
    for update, reference in unsharded.items():
        for key in ("loss", "gnorm", "loss_scale"):
            if key in reference:
                assert abs(float(sharded[update][key]) - float(reference[key])) <= tolerance, \
                    (update, key, sharded[update][key], reference[key])
    assert len({r["loss"] for r in sharded.values()}) == 6  # it trains
    ours = checkpoint(runs / f"{name}-fsdp" / "checkpoint_last.pt")
    theirs = checkpoint(runs / f"{name}-ddp" / "checkpoint_last.pt")
    assert_close_training(ours, theirs, *TOLERANCES[name])
    assert ours["last_optimizer_state"]["param_groups"] == \
        theirs["last_optimizer_state"]["param_groups"]
    assert ours["last_optimizer_state"].get("loss_scale") == \
        theirs["last_optimizer_state"].get("loss_scale")


def test_fsdp2_validates_and_generates_as_the_unsharded_run(runs):
    """In eval mode the whole model is gathered on every process: validation's loss and its
    beam search (--eval-bleu calls the encoder and decoder directly, a different number of
    steps on each process) as unsharded, and training goes on as unsharded after it."""
    def valid(name):
        return [json.loads(line[line.index("{"):]) for line in log(runs, name).splitlines()
                if '"valid_loss"' in line]

    sharded, unsharded = valid("valid-fsdp"), valid("valid-ddp")
    assert [r["valid_num_updates"] for r in sharded] == ["3", "6"]
    for ours, theirs in zip(sharded, unsharded):
        assert abs(float(ours["valid_loss"]) - float(theirs["valid_loss"])) <= 1e-3
        assert ours["valid_bleu"] == theirs["valid_bleu"]
    trained, reference = losses(runs, "valid-fsdp"), losses(runs, "valid-ddp")
    assert sorted(trained) == list(range(1, 7))
    for update in trained:
        assert abs(trained[update] - reference[update]) <= 1e-3, update


def test_a_fsdp2_checkpoint_is_the_unsharded_one(runs):
    """A (FSDP2) and W (unsharded) at the end of epoch 1: the same keys, shapes and dtypes, the
    weights and the optimizer state gathered whole on rank 0."""
    sharded = checkpoint(runs / "A" / "checkpoint1.pt")
    unsharded = checkpoint(runs / "W" / "checkpoint1.pt")
    assert SHARDED in log(runs, "A")
    assert list(sharded["model"]) == list(unsharded["model"])
    for key, value in sharded["model"].items():
        assert value.shape == unsharded["model"][key].shape, key
        assert value.dtype == unsharded["model"][key].dtype, key
    assert_close_training(sharded, unsharded, *TOLERANCES["resumed"])
    assert (sharded["last_optimizer_state"]["param_groups"]
            == unsharded["last_optimizer_state"]["param_groups"])
    assert adam_moments(sharded)[1] == {10}  # an epoch is 10 updates of 2 processes
    assert "fsdp_metadata" not in sharded  # no fairscale shard metadata: nothing to recombine


def test_memory_efficient_fp16_fsdp2_resumes_with_its_fp32_moments(runs):
    resumed, whole = losses(runs, "memeff-3to6"), losses(runs, "memeff-fsdp")
    assert "(epoch 1 @ 3 updates)" in log(runs, "memeff-3to6")
    assert sorted(resumed) == [4, 5, 6]
    for update in resumed:
        assert abs(resumed[update] - whole[update]) <= 2e-3, update
    moments, _ = adam_moments(checkpoint(runs / "memeff-3to6" / "checkpoint_last.pt"))
    assert all(value.dtype == torch.float32 for value in moments.values())


def check_resumed(runs, name, source, reference="R", updates=10):
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
    assert_close_training(ours, theirs, *TOLERANCES["resumed"])


def test_two_processes_fsdp2_checkpoint_resumes_on_one(runs):
    check_resumed(runs, "B", "A")
    assert json.loads((runs / "B.log.rank0.json").read_text())["world_size"] == 1


def test_one_process_checkpoint_resumes_on_two_with_fsdp2_without_fairscale(runs):
    check_resumed(runs, "D", "C")
    assert SHARDED in log(runs, "D")
    for rank in (0, 1):
        finished = json.loads((runs / f"D.log.rank{rank}.json").read_text())
        assert finished["world_size"] == 2 and finished["fairscale_imported"] is False


def test_two_processes_fsdp2_checkpoint_resumes_on_three(runs):
    """Epoch 2's 10 updates of 2 batches are 4 of 6 (the last one short), each the same batches
    as R3's: the same sentence and token counts, update by update, and the same training."""
    assert "FSDP2: 4 layers and the rest of the model fully sharded over 3 processes" in log(
        runs, "F")
    check_resumed(runs, "F", "A", reference="R3", updates=4)
    ours, theirs = records(runs, "F"), records(runs, "R3")
    for update in ours:
        assert [ours[update][key] for key in ("bsz", "wpb")] == [theirs[update][key]
                                                                for key in ("bsz", "wpb")]
    for rank in range(3):
        assert json.loads((runs / f"F.log.rank{rank}.json").read_text())["world_size"] == 3


def test_fsdp2_on_one_process_has_nothing_to_shard(runs):
    assert "--ddp-backend fully_sharded with one process: nothing to shard" in log(runs, "E")
    assert sorted(losses(runs, "E")) == [1, 2]
