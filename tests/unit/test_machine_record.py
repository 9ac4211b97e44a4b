"""What a run records of its machine (``machine.describe``, in every run's config.json): the
facts that move its figures beyond its settings, checked against torch's own answers."""

import torch

from deepnet_fairseq.recipes.base import machine

# torch's names for the kernels it dispatches to, as describe names the CPUs that run them
TORCH_KERNELS = {"AVX512": "AVX512", "AVX512_BF16": "AVX512", "AVX2": "AVX2"}


def test_the_vector_unit_is_the_one_torch_picks_kernels_for(monkeypatch):
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)  # a user's cap would lower torch's
    picked = torch.backends.cpu.get_cpu_capability()
    assert machine.describe({})["vector_unit"] == TORCH_KERNELS.get(picked, "other")


def test_describe_reads_the_cpu_the_threads_and_torch(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU 9000\n"
                    "flags\t\t: fpu sse2 avx fma avx2 avx512f avx512bw\n\n"
                    "processor\t: 1\nmodel name\t: Some CPU 9000\nflags\t\t: fpu\n")
    record = machine.describe({"OMP_NUM_THREADS": "3"}, cpuinfo=str(info))
    assert record == {"cpu": "Some CPU 9000", "vector_unit": "AVX2", "cores": machine.cores(),
                      "threads": "3", "torch": torch.__version__}
    assert machine.describe({}, cpuinfo=str(tmp_path / "none"))["threads"] == "unset"


def test_the_vector_units():
    assert machine.vector_unit("avx2 fma avx512f avx512bw avx512vl avx512dq".split()) == "AVX512"
    assert machine.vector_unit("avx2 fma avx512f".split()) == "AVX2"  # torch's needs all four
    assert machine.vector_unit(["avx2"]) == "other" and machine.vector_unit([]) == "other"
