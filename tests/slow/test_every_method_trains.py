"""End to end through fairseq's training (its own main, in this process): a few updates of every compared method on the
generated translation data, DeepNorm encoder-only / decoder-only training on generated text,
and an invalid combination stopping before anything is written."""

import math
import os
import re

import pytest

from deepnet_fairseq import methods
from support import USER_DIR, fairseq_train, width_args


# every method with a layer rule of its own but DeepNet (trained by every recipe test), plus
# the optimizer-aware form that changes the layer placement and a depth-transfer rule
CLI_METHODS = [name for name, m in methods.METHODS.items() if m.layers and name != "deepnet"] \
    + ["deepnet_pre_ln_adam", "pre_ln_completep"]
# half the tiny width: 20 methods x 3 updates
HALF_TINY = width_args(1 / 2)
COMMON = ["--user-dir", USER_DIR, "--cpu", "--optimizer", "adam", "--lr", "1e-3",
          "--max-update", "3", "--max-tokens", "400", "--log-format", "simple",
          "--log-interval", "1", "--no-epoch-checkpoints", "--num-workers", "0"]


def train(data, save_dir, *args):
    log = fairseq_train([data, *COMMON, "--save-dir", save_dir, *args])
    assert "num_updates 3" in log, log[-3000:]
    losses = [float(v) for v in re.findall(r"\| loss ([0-9.a-z]+) \|", log)]
    assert losses and all(math.isfinite(v) for v in losses), log[-3000:]
    assert (save_dir / "checkpoint_last.pt").exists()
    return log


@pytest.mark.parametrize("name", CLI_METHODS)
def test_fairseq_train_three_updates(toy_data, tmp_path, name):
    log = train(toy_data, tmp_path / name, *methods.get(name).train_args(3, 2), *HALF_TINY,
                "--share-all-embeddings", "--criterion", "label_smoothed_cross_entropy",
                "--label-smoothing", "0.1")
    assert f"{LAYER_CLASS[name]}(" in log  # fairseq-train prints the model it built


# the encoder layer class each method builds (fairseq logs the model); a method missing here
# fails its test
LAYER_CLASS = {"post_ln": "StandardEncoderLayer", "pre_ln": "StandardEncoderLayer",
               "pre_ln_completep": "StandardEncoderLayer", "deepscalelm": "DeepScaleLMEncoderLayer",
               "ds_init": "DSInitEncoderLayer", "admin": "AdminEncoderLayer",
               "rezero": "ReZeroEncoderLayer", "r_fixup": "RFixupEncoderLayer",
               "t_fixup": "TFixupEncoderLayer", "dlcl": "DLCLEncoderLayer",
               "normformer": "NormFormerEncoderLayer", "lipschitz": "LipschitzEncoderLayer",
               "deepnet_pre_ln_adam": "DeepNormEncoderLayer",
               "subln": "SubLNEncoderLayer", "peri_ln": "PeriLNEncoderLayer",
               "ln_scaling": "LNScalingEncoderLayer", "dyt": "DyTEncoderLayer",
               "mix_ln": "MixLNEncoderLayer", "b2t": "B2TEncoderLayer",
               "resi_dual": "ResiDualEncoderLayer"}


@pytest.mark.parametrize("task,arch,extra", [
    ("masked_lm", "deepnet_roberta_tiny", ["--encoder-layers", "6", "--criterion", "masked_lm"]),
    ("language_modeling", "deepnet_lm_tiny", ["--decoder-layers", "6",
                                              "--criterion", "cross_entropy"]),
    ("language_modeling", "deepnet_lm_tiny", ["--decoder-layers", "6", "--criterion",
                                              "cross_entropy", "--deepnorm-ln-lr-multiplier",
                                              "auto"]),
])
def test_encoder_only_and_decoder_only_train_end_to_end(mono_data, tmp_path, task, arch, extra):
    log = train(mono_data, tmp_path / "run", "--task", task, "--arch", arch,
                "--tokens-per-sample", "32", *extra)
    assert "alpha=1.8612, beta=0.3799" in log  # (2*6)^(1/4), (8*6)^(-1/4): printed by fairseq
    assert "valid on 'valid' subset" in log
    if "--deepnorm-ln-lr-multiplier" in extra:  # reached the model's config (its effect: unit test)
        assert "'deepnorm_ln_lr_multiplier': 'auto'" in log


def test_invalid_combination_stops_before_writing_anything(toy_data, tmp_path):
    save_dir = tmp_path / "never"
    with pytest.raises(ValueError, match="--checkpoint-activations cannot be used with --arch "
                                         "dlcl_transformer"):
        fairseq_train([toy_data, *COMMON, "--save-dir", save_dir,
                       *methods.get("dlcl").train_args(2, 2), "--checkpoint-activations"])
    assert not os.path.exists(save_dir)
