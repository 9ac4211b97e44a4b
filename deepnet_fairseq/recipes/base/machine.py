"""The machine the recipes run on: its cores, its memory, and how many GPUs this process may
use, decided the way torch and CUDA decide it.

The answer comes from the first of these that is set (so that a scheduler's binding, or a
user's ``CUDA_VISIBLE_DEVICES=2,3``, is obeyed without touching a GPU):

1. ``CUDA_VISIBLE_DEVICES``, read as CUDA reads it: a comma-separated list of ordinals or of
   ``GPU-`` / ``MIG-`` UUIDs; an entry that is not a non-negative ordinal ends the list
   (``-1`` hides every GPU), a repeated entry makes the list empty (CUDA sees no device);
2. SLURM's binding of the job step or job: ``SLURM_STEP_GPUS``, then ``SLURM_GPUS_ON_NODE``
   (a count), then ``SLURM_JOB_GPUS`` (lists of GPU indices on this node);
3. only when nothing says: ``torch.cuda.device_count()`` (NVML), the ``probe`` argument.
"""

import glob
import os
import re
from typing import Callable, Mapping, Optional, Tuple


def _visible_list(value: str) -> int:
    """Length of the device list CUDA builds from a CUDA_VISIBLE_DEVICES value."""
    entries = [entry.strip() for entry in value.split(",")]
    uuid = entries[0][:4] if entries[0][:4] in ("GPU-", "MIG-") else None
    kept = []
    for entry in entries:
        if uuid:
            if not entry.startswith(uuid):
                break  # a UUID list ends at the first entry of another kind
        else:
            digits = entry[1:] if entry.startswith("+") else entry
            end = len(digits) - len(digits.lstrip("0123456789"))
            if end == 0:
                break  # not an ordinal (or negative): CUDA stops reading here
            entry = str(int(digits[:end]))  # CUDA reads the leading number ("1gpu" is 1)
        if entry in kept:
            return 0  # a repeated device makes CUDA see none
        kept.append(entry)
    return len(kept)


def _slurm_list(value: str) -> Optional[int]:
    """Number of GPU indices in a SLURM list such as "0,1,2,3" (None if unreadable)."""
    value = value.strip()
    if value in ("", "N/A", "(null)"):
        return None
    return len([entry for entry in value.split(",") if entry.strip()])


def count_gpus(env: Mapping[str, str],
               probe: Optional[Callable[[], int]] = None) -> Tuple[int, str]:
    """(number of usable GPUs, which variable or probe said so)."""
    if "CUDA_VISIBLE_DEVICES" in env:
        return _visible_list(env["CUDA_VISIBLE_DEVICES"]), \
            f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}"
    for name in ("SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS"):
        value = env.get(name)
        if value is None:
            continue
        if name != "SLURM_GPUS_ON_NODE":
            count = _slurm_list(value)
        else:  # ASCII digits only: int() reads "٣", and "²".isdigit() is true
            count = int(value) if re.fullmatch(r"\s*[0-9]+\s*", value) else None
        if count is not None:
            return count, f"{name}={value}"
    probe = probe or torch_device_count
    return probe(), "torch.cuda.device_count()"


# Where a GPU driver shows its devices: NVIDIA's (/proc/driver/nvidia/gpus holds one entry a
# GPU, /dev/nvidia0... its device files, in containers too), AMD's ROCm (/dev/kfd), and WSL's
# (/dev/dxg). torch.cuda (CUDA and ROCm builds alike) can see a GPU only through one of them.
GPU_DRIVER_SIGNS = ("/proc/driver/nvidia/gpus/*", "/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")


def torch_device_count() -> int:
    """torch.cuda.device_count(), without importing torch where no GPU driver is there: 0 then,
    as torch would say, and planning a step (a dry run, --help) saves torch's seconds of
    import on every CPU machine."""
    if not any(glob.glob(sign) for sign in GPU_DRIVER_SIGNS):
        return 0
    import torch

    return torch.cuda.device_count()


def cores() -> int:
    """The cores this process may run on (a scheduler's CPU set, else every core)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def gpu_memory_gb() -> Optional[float]:
    """Memory of the first visible GPU in GB (1e9 bytes), or None when torch sees none."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / 1e9


def machine_memory_gb() -> float:
    """This machine's physical memory in GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30


def vector_unit(flags) -> str:
    """The widest x86 vector instructions among the CPU's FLAGS ("AVX512", "AVX2"; "other"
    otherwise): which of its kernels torch picks, and so the last digits of every float sum."""
    flags = set(flags)
    # torch's AVX512 kernels need all four
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "AVX512"
    return "AVX2" if {"avx2", "fma"} <= flags else "other"


def describe(env: Mapping[str, str], cpuinfo: str = "/proc/cpuinfo") -> dict:
    """What a run's figures depend on beyond its settings, for its records: the CPU (model and
    vector unit), the cores this process may use, the threads each process was given and torch's
    version; read without importing torch (planning must stay light)."""
    from importlib import metadata

    model, flags = "", []
    if os.path.isfile(cpuinfo):
        with open(cpuinfo, encoding="utf-8", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not model:
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = value.split()
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    return {"cpu": model, "vector_unit": vector_unit(flags), "cores": cores(),
            "threads": env.get("OMP_NUM_THREADS") or "unset", "torch": torch_version}
