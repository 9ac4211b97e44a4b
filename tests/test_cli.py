"""The plugin through the stock fairseq CLIs: options, errors, train -> generate -> BLEU,
resume, checkpoint averaging, source-tree and installed-package --user-dir."""

import os
import re

import pytest
import torch

from conftest import PY, REPO, USER_DIR, run

TINY_TRAIN = [
    "--cpu", "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "10", "--max-tokens", "2000", "--criterion",
    "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--seed", "1",
    "--log-format", "simple", "--log-interval", "1", "--no-epoch-checkpoints",
]


def train(data, save_dir, *extra, user_dir=USER_DIR, arch="deepnet_transformer_tiny", check=True):
    return run(["fairseq-train", str(data), "--user-dir", user_dir, "--arch", arch,
                "--save-dir", str(save_dir), *TINY_TRAIN, *map(str, extra)], check=check)


def generate_bleu(data, checkpoint, user_dir=USER_DIR):
    proc = run(["fairseq-generate", str(data), "--user-dir", user_dir, "--path", str(checkpoint),
                "--cpu", "--beam", "4", "--batch-size", "40", "--gen-subset", "test",
                # fairseq 0.12 drops a last batch whose size is not a multiple of this (8)
                "--required-batch-size-multiple", "1",
                # toy targets have at most 9 words: an untrained deep model would decode to 200
                "--max-len-a", "0", "--max-len-b", "12"])
    assert len(re.findall(r"^H-", proc.stdout, flags=re.M)) == 40, "a test sentence was not decoded"
    match = re.search(r"BLEU4 = ([0-9.]+)", proc.stdout)
    assert match, f"no BLEU in fairseq-generate output:\n{proc.stdout[-2000:]}"
    return float(match.group(1))


def last_num_updates(log):
    return int(re.findall(r"num_updates[ =](\d+)", log)[-1])


def test_model_options_help_lists_the_deepnorm_options():
    proc = run(["deepnet-model-options", "--arch", "deepnet_transformer_18_18"])
    for flag in ("--deepnorm-encoder-alpha", "--deepnorm-encoder-beta",
                 "--deepnorm-decoder-alpha", "--deepnorm-decoder-beta"):
        assert flag in proc.stdout
    assert "0.81 (N^4 M)^(1/16)" in " ".join(proc.stdout.split())


@pytest.mark.parametrize("arch,flag", [("post_ln_transformer", "--encoder-layers"),
                                       ("ds_init_transformer_tiny", "--ds-init-alpha")])
def test_model_options_accepts_every_arch_the_plugin_registers(arch, flag):
    """post_ln_transformer is built by fairseq's own model class, yet registered by the plugin."""
    assert flag in run(["deepnet-model-options", "--arch", arch]).stdout


@pytest.mark.parametrize("extra,message", [
    (["--encoder-normalize-before"], "deepnet is a Post-LN method"),
    (["--decoder-normalize-before"], "deepnet is a Post-LN method"),
    (["--encoder-layers", "0"], "--encoder-layers must be a positive number of layers"),
    (["--decoder-layers", "-2"], "--decoder-layers must be a positive number of layers"),
    (["--deepnorm-encoder-alpha", "0"], "--deepnorm-encoder-alpha must be positive"),
    (["--deepnorm-decoder-beta", "-0.1"], "--deepnorm-decoder-beta must be positive"),
], ids=["enc-pre-ln", "dec-pre-ln", "enc-depth", "dec-depth", "alpha", "beta"])
def test_bad_settings_fail_clearly_and_write_nothing(toy_data, tmp_path, extra, message):
    save_dir = tmp_path / "checkpoints"
    proc = train(toy_data, save_dir, "--max-update", 2, *extra, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert not save_dir.exists()


@pytest.mark.slow
def test_train_generate_resume_average_from_source_tree(toy_data, tmp_path):
    save = tmp_path / "checkpoints"
    first = train(toy_data, save, "--max-update", 30, "--save-interval-updates", 10)
    assert last_num_updates(first.stdout + first.stderr) == 30
    assert "DeepNormEncoderLayer" in first.stdout + first.stderr
    assert generate_bleu(toy_data, save / "checkpoint_best.pt") >= 0.0

    # restart: fairseq resumes from checkpoint_last.pt (a torch>=2.6 weights-only load)
    resumed = train(toy_data, save, "--max-update", 40, "--save-interval-updates", 10)
    log = resumed.stdout + resumed.stderr
    assert "Loaded checkpoint" in log and "@ 30 updates" in log
    assert last_num_updates(log) == 40
    # and an explicit --restore-file of another run's checkpoint
    other = train(toy_data, tmp_path / "other", "--max-update", 45,
                  "--restore-file", save / "checkpoint_last.pt")
    assert last_num_updates(other.stdout + other.stderr) == 45

    averaged = tmp_path / "averaged.pt"
    run(["deepnet-average-checkpoints", "--inputs", str(save), "--num-update-checkpoints", "3",
         "--output", str(averaged)])
    inputs = sorted(save.glob("checkpoint_*_*.pt"))[-3:]
    models = [torch.load(p, weights_only=True)["model"] for p in inputs]
    avg = torch.load(averaged, weights_only=True)["model"]
    name = "encoder.layers.0.fc1.weight"
    assert torch.allclose(avg[name], sum(m[name] for m in models) / 3, atol=1e-6)
    assert generate_bleu(toy_data, averaged) >= 0.0


@pytest.mark.slow
def test_averaging_too_few_checkpoints_is_a_clear_error(tmp_path):
    (tmp_path / "checkpoint_1_10.pt").write_bytes(b"")
    proc = run(["deepnet-average-checkpoints", "--inputs", str(tmp_path),
                "--num-update-checkpoints", "3", "--output", str(tmp_path / "avg.pt")], check=False)
    assert proc.returncode != 0 and "holds 1" in proc.stderr
    assert not (tmp_path / "avg.pt").exists()


@pytest.mark.slow
def test_installed_package_as_user_dir(toy_data, tmp_path):
    """A non-editable install (pip --target) used through --user-dir, not the source tree."""
    site = tmp_path / "site"
    run([PY, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(site), REPO])
    installed = site / "deepnet_fairseq"
    assert (installed / "models" / "deepnet_transformer.py").is_file()
    save = tmp_path / "checkpoints"
    proc = train(toy_data, save, "--max-update", 5, user_dir=str(installed))
    assert f"'user_dir': '{installed}'" in proc.stdout + proc.stderr
    assert generate_bleu(toy_data, save / "checkpoint_last.pt", user_dir=str(installed)) >= 0.0


@pytest.mark.slow
def test_named_100l_100l_trains_and_generates(toy_data, tmp_path):
    save = tmp_path / "checkpoints"
    train(toy_data, save, "--max-update", 2, "--encoder-embed-dim", 16,
          "--encoder-ffn-embed-dim", 32, arch="deepnet_transformer_100_100")
    state = torch.load(save / "checkpoint_last.pt", weights_only=True)
    assert state["cfg"]["model"].arch == "deepnet_transformer_100_100"
    assert sum(k.endswith("fc1.weight") for k in state["model"]) == 200
    assert generate_bleu(toy_data, save / "checkpoint_last.pt") >= 0.0


@pytest.mark.slow
def test_checkpoint_of_an_eval_bleu_run_resumes_and_generates(toy_data, tmp_path):
    # --eval-bleu (fairseq's translation example) stores its n-gram counts as numpy arrays in
    # the checkpoint: torch's weights-only unpickler must accept them, and nothing more
    save = tmp_path / "checkpoints"
    bleu_args = ["--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 12}',
                 "--validate-interval-updates", 5, "--save-interval-updates", 5]
    train(toy_data, save, "--max-update", 5, *bleu_args)
    state = torch.load(save / "checkpoint_last.pt", weights_only=True)  # the plugin's allowlist
    metrics = repr(state["extra_state"]["metrics"])
    assert "array(" in metrics, "no numpy array in the saved metrics: the test lost its point"
    resumed = train(toy_data, save, "--max-update", 6, *bleu_args)
    assert "@ 5 updates" in resumed.stdout + resumed.stderr
    assert generate_bleu(toy_data, save / "checkpoint_last.pt") >= 0.0
