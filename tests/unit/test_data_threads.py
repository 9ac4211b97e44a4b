"""fairseq's batch thread at exit (deepnet_fairseq/data_threads.py): a process that ends while
fairseq's BufferedIterator is collating a batch in torch aborts at finalization without the
plugin, and exits cleanly with it. The batch here is a matrix product long enough (a fraction
of a second on one thread) that the exit always finds the thread inside it."""

import os
import subprocess
import sys

import pytest

from support import REPO

PROGRAM = """
import sys
import torch
from fairseq.data import iterators
if sys.argv[1] == "plugin":
    import deepnet_fairseq
    deepnet_fairseq.register()
    deepnet_fairseq.register()  # registering twice installs the exit step once
a = torch.randn(2000, 2000)


class Batches:
    def __iter__(self):
        while True:
            yield torch.mm(a, a).sum()

    def __len__(self):
        return 10 ** 6


batches = iterators.BufferedIterator(10, Batches())
next(batches)
print("trained", flush=True)
"""


@pytest.mark.parametrize("plugin, status", [("plugin", 0), ("fairseq", -6)])
def test_exit_during_a_batch_is_clean_with_the_plugin(plugin, status):
    proc = subprocess.run([sys.executable, "-c", PROGRAM, plugin], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.stdout == "trained\n"
    assert proc.returncode == status, proc.stderr[-2000:]
    if status:
        assert "terminate called without an active exception" in proc.stderr

