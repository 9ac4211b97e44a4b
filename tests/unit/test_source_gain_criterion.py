"""``--criterion label_smoothed_cross_entropy_with_source_gain``: fairseq's label-smoothed loss
in training, unchanged; at validation also the source gain, which must agree with
``deepnet-source-use``'s (its own forward passes and nll, not the criterion's), be 0 for a
decoder that cannot see its source, and reach fairseq-train's validation line."""

import pytest
import torch
from fairseq import metrics
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

from deepnet_fairseq.criterions.source_gain import NAME, SourceGainCriterion
from deepnet_fairseq.diagnostics.source_use import measure
from deepnet_fairseq.recipes.run.commands import method_args, task_args, train_command
from deepnet_fairseq.recipes.run.layout import plan_layout
from deepnet_fairseq.recipes.spec.settings import resolve
from support import REPO, build, sample_batch, train


@pytest.fixture
def model_task_batch(toy_data):
    model, task, _cfg = build(toy_data, "deepnet_transformer_tiny", "--share-all-embeddings")
    return model, task, sample_batch(task, size=8)


def _gain(criterion, model, batch):
    """The source gain the criterion logs for BATCH, reduced as fairseq reduces a validation."""
    with torch.no_grad():
        _loss, _size, logging_output = criterion(model, batch)
    with metrics.aggregate() as aggregate:
        type(criterion).reduce_metrics([logging_output])
    return aggregate.get_smoothed_values().get("source_gain")


def test_training_is_fairseqs_label_smoothed_loss_and_measures_nothing(model_task_batch):
    model, task, batch = model_task_batch
    ours = SourceGainCriterion(task, sentence_avg=False, label_smoothing=0.1)
    fairseqs = LabelSmoothedCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)
    model.train()
    torch.manual_seed(0)
    loss, size, logging_output = ours(model, batch)
    torch.manual_seed(0)  # the same dropout masks
    reference, reference_size, _ = fairseqs(model, batch)
    assert torch.equal(loss, reference) and size == reference_size
    assert "nll_shuffled" not in logging_output


def test_the_validation_gain_agrees_with_source_use(model_task_batch):
    model, task, batch = model_task_batch
    criterion = SourceGainCriterion(task, sentence_avg=False, label_smoothing=0.1)
    model.eval()
    expected = measure(model, batch, task.target_dictionary.pad())["source_gain"]
    assert abs(expected) > 1e-3  # an untrained model's output still depends on its source
    assert _gain(criterion, model, batch) == pytest.approx(expected, abs=1e-3)  # logged at 3 places


def test_a_decoder_blind_to_its_source_gains_nothing(model_task_batch):
    model, task, batch = model_task_batch
    with torch.no_grad():  # the cross-attention's output map is the source's only way in
        for layer in model.decoder.layers:
            layer.encoder_attn.out_proj.weight.zero_()
            layer.encoder_attn.out_proj.bias.zero_()
    model.eval()
    criterion = SourceGainCriterion(task, sentence_avg=False, label_smoothing=0.1)
    assert _gain(criterion, model, batch) == pytest.approx(0.0, abs=1e-6)
    # a batch of one sentence has no other source to give it: not measured, nothing logged,
    # yet its output has the measured batches' keys (fairseq sums them across workers)
    single = sample_batch(task, size=1)
    assert _gain(criterion, model, single) is None
    with torch.no_grad():
        keys = {name: set(criterion(model, batch)[2]) for name, batch in
                (("one", single), ("eight", batch))}
    assert keys["one"] == keys["eight"]


def test_fairseq_train_logs_it_at_every_validation(toy_data, tmp_path):
    log = train(toy_data, tmp_path / "checkpoints", "--criterion", NAME, "--max-update", "4",
                "--validate-interval-updates", "2", "--share-all-embeddings")
    valid = [line for line in log.splitlines() if "valid on 'valid' subset" in line]
    assert len(valid) >= 2 and all("| source_gain " in line for line in valid)
    train_lines = [line for line in log.splitlines() if "train_inner" in line]
    assert train_lines and not any("source_gain" in line for line in train_lines)


@pytest.mark.parametrize("setting,criterion", [(None, "label_smoothed_cross_entropy"),
                                               ("0", "label_smoothed_cross_entropy"),
                                               ("1", NAME)])
def test_the_recipes_train_with_it_when_source_gain_is_1(setting, criterion):
    settings = {"DEVICE": "cpu", "SIZE": "smoke", "DEEPNET_WORK": "/nonexistent",
                **({"SOURCE_GAIN": setting} if setting else {})}
    cfg = resolve("wmt17", settings, REPO)
    command = train_command(cfg, plan_layout(cfg, {}), method_args(cfg), task_args(cfg, True))
    assert command[command.index("--criterion") + 1] == criterion
    assert command[command.index("--label-smoothing") + 1] == cfg.text.optim.label_smoothing
