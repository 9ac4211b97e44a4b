"""The ZeRO-1 wrapper (deepnet_fairseq/nn/zero.py) as fairseq's optimizers use it, in this
process with a gloo group of one: what it saves and loads, what it keeps, what it answers.
Two processes, fairseq's trainer and fairscale's OSS beside it: tests/slow/test_zero.py."""

import pytest
import torch
from omegaconf import OmegaConf


def adam(seed):
    """fairseq's Adam (FairseqAdam over its torch Adam) on a small model built from ``seed``."""
    from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Linear(4, 3))
    return model, FairseqAdam(FairseqAdamConfig(lr=[1e-2], adam_betas="(0.9, 0.98)"),
                              list(model.parameters()))


def step(model, optimizer, seed):
    torch.manual_seed(seed)
    optimizer.zero_grad()
    model(torch.randn(7, 5)).pow(2).sum().backward()
    optimizer.step()


@pytest.fixture
def group(tmp_path):
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0,
                                         world_size=1)
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()


def test_the_plugin_is_what_fairseqs_trainer_calls():
    from fairseq import optim

    from deepnet_fairseq.nn import zero

    assert optim.shard_ is zero.shard_  # installed by register() (conftest registers)


def test_zero1_saves_the_unsharded_state_and_loads_it_keeping_one_copy(group):
    from fairseq.optim.fp16_optimizer import MemoryEfficientFP16Optimizer

    from deepnet_fairseq.nn import zero

    plain_model, plain = adam(0)
    model, sharded = adam(0)
    zero.shard_(sharded, None)  # fairseq's data-parallel group; None: the default one
    wrapper = sharded.optimizer
    assert type(wrapper).__name__ == "FairseqZeRO" and type(wrapper.optim).__name__ == "Adam"
    # fairseq's wrappers ask what the torch optimizer supports: the shard's optimizer answers
    assert sharded.supports_memory_efficient_fp16 and sharded.supports_flat_params
    with pytest.raises(AttributeError):
        wrapper.no_such_attribute
    for seed in (1, 2):
        step(plain_model, plain, seed)
        step(model, sharded, seed)

    wrapper.consolidate_state_dict()  # as fairseq's save_checkpoint, on every rank
    saved = sharded.state_dict()
    expected = plain.state_dict()
    assert saved["param_groups"] == expected["param_groups"]
    assert saved["state"].keys() == expected["state"].keys()
    for index, state in expected["state"].items():
        for key, value in state.items():
            assert torch.equal(torch.as_tensor(saved["state"][index][key]),
                               torch.as_tensor(value)), (index, key)
    with pytest.raises(RuntimeError, match="not been consolidated"):
        sharded.state_dict()  # the gathered state is not kept after the save
    assert wrapper.broadcast_global_state_dict(saved) is not None

    # loading through memory-efficient fp16's wrapper: its after-load copy of the whole
    # state is off, and torch's base class keeps none beside the shard's optimizer
    resumed_model, resumed = adam(3)
    resumed_model.load_state_dict(model.state_dict())
    zero.shard_(resumed, None)
    cfg = OmegaConf.create({"optimizer": None, "common": {"fp16_scale_window": 128, "bf16": True}})
    MemoryEfficientFP16Optimizer(cfg, list(resumed_model.parameters()), resumed).load_state_dict(
        saved)
    assert len(resumed.optimizer.state) == 0
    assert len(resumed.optimizer.optim.state) == len(expected["state"])
    step(plain_model, plain, 4)
    step(resumed_model, resumed, 4)
    for ours, theirs in zip(resumed_model.parameters(), plain_model.parameters()):
        assert torch.equal(ours, theirs)


def test_zero1_on_one_process_without_a_group_leaves_the_optimizer():
    from deepnet_fairseq.nn import zero

    assert not torch.distributed.is_initialized()
    _, optimizer = adam(0)
    torch_optimizer = optimizer.optimizer
    zero.shard_(optimizer, None)
    assert optimizer.optimizer is torch_optimizer
