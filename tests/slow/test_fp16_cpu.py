"""fairseq's fp16 training path on CPU (fairseq_train_compat): FP16Optimizer flattened
and not, MemoryEfficientFP16Optimizer, the dynamic loss scaler and its overflow handling, with
the two CUDA-only calls lifted. Real fairseq-train processes through the compat launcher,
which patches fairseq process-wide (that it changes only those two calls:
integration/test_console_scripts.py)."""

import os
import re
import subprocess
import sys

import pytest

from deepnet_fairseq import USER_DIR
from deepnet_fairseq.recipes.run.runlog import UPDATES


LOSS = re.compile(r"\| train_inner \|.* loss=([\d.]+),.*loss_scale=([\d.]+)")


def train(data, save_dir, *extra, layers=3, updates=30, arch="deepnet_transformer_tiny"):
    """fairseq-train (through the compat launcher) in fp16 on CPU; (exit code, log text)."""
    cmd = [sys.executable, "-m", "deepnet_fairseq.fairseq_train_compat", str(data),
           "--user-dir", USER_DIR, "--cpu", "--arch", arch,
           "--encoder-layers", str(layers), "--decoder-layers", str(layers),
           "--optimizer", "adam", "--lr", "2e-3", "--lr-scheduler", "inverse_sqrt",
           "--warmup-updates", "5", "--max-tokens", "500", "--max-update", str(updates),
           "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
           "--save-dir", str(save_dir), "--no-epoch-checkpoints", "--log-format", "simple",
           "--log-interval", "1", "--fp16-init-scale", "128", "--fp16-scale-window", "10",
           "--seed", "1", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    return proc.returncode, proc.stdout + proc.stderr


def losses(log):
    return [(float(loss), float(scale)) for loss, scale in LOSS.findall(log)]


def mean(values):
    return sum(values) / len(values)


@pytest.mark.parametrize("mode", [["--fp16"], ["--fp16", "--fp16-no-flatten-grads"],
                                  ["--memory-efficient-fp16"]],
                         ids=["flattened", "no-flatten", "memory-efficient"])
def test_each_fp16_optimizer_trains_a_deepnet_on_cpu(toy_data, tmp_path, mode):
    code, log = train(toy_data, tmp_path / "ck", *mode)
    assert code == 0, log[-3000:]
    steps = losses(log)
    assert len(steps) >= 25 and all(scale >= 1 for _, scale in steps)
    first, last = mean([l for l, _ in steps[:5]]), mean([l for l, _ in steps[-5:]])
    assert last < 0.85 * first, (first, last)
    assert "Minimum loss scale reached" not in log


def test_overflows_are_skipped_and_the_scale_recovers(toy_data, tmp_path):
    """A start scale far too large: fairseq's overflow handling (its CUDA-only path, lifted)
    halves the scale and skips those updates, then training goes on."""
    code, log = train(toy_data, tmp_path / "ck", "--fp16", "--fp16-init-scale", str(2 ** 24),
                      updates=20)
    assert code == 0, log[-3000:]
    assert "gradient overflow detected" in log
    assert int(UPDATES.findall(log)[-1]) == 20


def fp16_100l(data, save_dir, arch):
    """16 updates of a 100L-100L tiny model in fp16, batches of 200 tokens (at 500 an update
    takes 7 s on CPU, at 200 3 s, and the loss falls as well); (exit code, the logged
    (loss, scale)s, log)."""
    code, log = train(data, save_dir, "--fp16", "--max-tokens", "200", layers=100, updates=16,
                      arch=arch)
    return code, losses(log), log


def test_a_100l_deepnet_trains_in_fp16(toy_data, tmp_path):
    """100L-100L tiny: DeepNet's loss goes down and the loss scale never cascades to the
    minimum."""
    code, steps, log = fp16_100l(toy_data, tmp_path / "deepnet", "deepnet_transformer_tiny")
    assert code == 0, log[-3000:]
    first, last = mean([l for l, _ in steps[:5]]), mean([l for l, _ in steps[-5:]])
    assert last < first and "Minimum loss scale reached" not in log
    assert min(scale for _, scale in steps) >= 1


@pytest.mark.costly  # a report, no assertion: 110 s of the suite's time for a printed line
def test_a_100l_post_ln_in_fp16_is_reported(toy_data, tmp_path, capsys):
    """Post-LN under the 100L DeepNet's settings, reported as it behaves, beside DeepNet."""
    rows = []
    for arch in ("deepnet_transformer_tiny", "post_ln_transformer_tiny"):
        code, steps, log = fp16_100l(toy_data, tmp_path / arch, arch)
        row = f"{arch}: exit {code}, {len(steps)} updates logged"
        if len(steps) >= 10:
            row += (f", loss {mean([l for l, _ in steps[:5]]):.2f} -> "
                    f"{mean([l for l, _ in steps[-5:]]):.2f}, smallest loss scale "
                    f"{min(s for _, s in steps)}")
        rows.append(row + (", minimum loss scale reached"
                           if "Minimum loss scale reached" in log else ""))
    with capsys.disabled():
        print("\n100L-100L fp16 on CPU, 16 updates:\n  " + "\n  ".join(rows))


def test_an_fp16_run_resumes_with_its_loss_scale(toy_data, tmp_path):
    save = tmp_path / "ck"
    code, first = train(toy_data, save, "--fp16", updates=10, layers=2)
    assert code == 0, first[-3000:]
    code, second = train(toy_data, save, "--fp16", updates=20, layers=2)
    assert code == 0, second[-3000:]
    assert re.search(r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 10 updates\)", second)
    resumed = losses(second)
    assert resumed and int(UPDATES.findall(second)[-1]) == 20
    # the scaler's state travels in the checkpoint: the resumed run does not restart at 128
    # when the first run had grown it
    scale_at_10 = losses(first)[-1][1]
    assert resumed[0][1] in (scale_at_10, scale_at_10 * 2, scale_at_10 / 2)
