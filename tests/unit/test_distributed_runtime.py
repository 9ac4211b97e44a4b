"""The distributed runtime in this process: the allowlist of what rank 0 broadcasts, the
collective's device, Admin's profiling reduced through a process group, the monitors through
fairseq's DDP wrappers."""

import io
import os
import pickle

import pytest
import torch

from deepnet_fairseq.nn.method_layers import Admin, collective_device, profile_admin_
from deepnet_fairseq.storage import checkpoint_compat
from support import build, sample_batch


class _RunsCode:
    def __reduce__(self):
        return (os.getenv, ("HOME",))  # harmless, but a call the unpickler must refuse


def test_the_broadcast_allowlist_refuses_code():
    buffer = io.BytesIO()
    torch.save({"cfg": _RunsCode()}, buffer)
    with torch.serialization.safe_globals(checkpoint_compat.broadcast_globals()):
        with pytest.raises(pickle.UnpicklingError, match="getenv"):
            torch.load(io.BytesIO(buffer.getvalue()))


def test_fairseq_broadcast_is_wrapped_once_and_the_allowlist_is_scoped():
    from fairseq.distributed import utils as distributed_utils

    assert checkpoint_compat.allow_broadcast_globals()  # idempotent: register() did it
    wrapped = distributed_utils._broadcast_object_slow
    assert wrapped._deepnet_allowlisted
    assert wrapped.__wrapped__.__module__ == distributed_utils.__name__  # fairseq's own function
    assert not hasattr(wrapped.__wrapped__, "_deepnet_allowlisted")  # one wrapper, not two
    from omegaconf import DictConfig
    assert DictConfig not in torch.serialization.get_safe_globals()  # files: Namespace only


def test_collective_device_follows_the_backend(monkeypatch):
    cpu, gpu1 = torch.device("cpu"), torch.device("cuda", 1)
    assert collective_device(cpu, "gloo") == cpu
    assert collective_device(gpu1, "gloo") == cpu  # gloo reduces CPU tensors everywhere
    assert collective_device(gpu1, "nccl") == gpu1  # NCCL: the model's own GPU
    # NCCL with a CPU model: the process's current GPU (no GPU here: the index is stubbed)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert collective_device(cpu, "nccl") == torch.device("cuda", 3)
    assert collective_device(gpu1, "cpu:gloo,cuda:nccl") == gpu1
    assert collective_device(cpu, "mpi") == cpu


def _omegas(model):
    return torch.cat([m.omega_init.flatten() for m in model.modules() if isinstance(m, Admin)])


def test_admin_profiling_reduces_through_a_process_group(toy_data, tmp_path):
    """A 1-process gloo group: the reduction path runs and must leave omega as without one."""
    model, task, _ = build(toy_data, "admin_transformer_tiny")
    net_input = sample_batch(task)["net_input"]
    profile_admin_(model, net_input)
    alone = _omegas(model).clone()
    assert not torch.allclose(alone, torch.ones_like(alone))  # profiled, not the init
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0,
                                         world_size=1)
    try:
        profile_admin_(model, net_input)
    finally:
        torch.distributed.destroy_process_group()
    torch.testing.assert_close(_omegas(model), alone)


def test_monitors_find_the_layers_through_fairseqs_ddp_wrappers(toy_data, tmp_path):
    from fairseq.distributed import LegacyDistributedDataParallel, ModuleProxyWrapper
    from deepnet_fairseq.tasks.monitored import LayerMonitor, unwrap

    model, _, _ = build(toy_data, "deepnet_transformer_tiny")
    alone = LayerMonitor(model)
    assert sorted(alone.params) == [("dec", 0), ("dec", 1), ("enc", 0), ("enc", 1)]
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0,
                                         world_size=1)
    try:  # what fairseq's trainer hands the task with --ddp-backend legacy_ddp
        wrapped = ModuleProxyWrapper(LegacyDistributedDataParallel(model, process_group=None))
    finally:
        torch.distributed.destroy_process_group()
    assert next(iter(dict(wrapped.named_parameters()))).startswith("module.module.")
    assert unwrap(wrapped) is model
    monitor = LayerMonitor(wrapped)
    assert monitor.params.keys() == alone.params.keys()
    for layer, params in alone.params.items():
        assert all(a is b for a, b in zip(params, monitor.params[layer]))
    assert [m for _, m in monitor.norms] == [m for _, m in alone.norms] and monitor.norms


def test_monitors_refuse_a_model_without_layers():
    from deepnet_fairseq.tasks.monitored import LayerMonitor

    with pytest.raises(RuntimeError, match="found no trainable parameter named 'encoder.layers"):
        LayerMonitor(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_monitors_refuse_a_fully_sharded_model(toy_data, tmp_path):
    """Under FSDP2 (--ddp-backend fully_sharded) each process holds shards of every layer's
    tensors: norms of those would be the shard's, so the monitors refuse rather than log them."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from deepnet_fairseq.nn.fsdp import layers_of
    from deepnet_fairseq.tasks.monitored import LayerMonitor

    model, _, _ = build(toy_data, "deepnet_transformer_tiny")
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0,
                                         world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        for layer in layers_of(model):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        with pytest.raises(RuntimeError, match="does not run under full sharding"):
            LayerMonitor(model)
    finally:
        torch.distributed.destroy_process_group()
