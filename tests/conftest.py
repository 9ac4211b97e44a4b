"""Shared fixtures: a generated toy translation corpus and in-process model building."""

import os
import random
import subprocess
import sys

import pytest
import torch

import deepnet_fairseq

deepnet_fairseq.register()  # the tests build models through fairseq in this process
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = deepnet_fairseq.USER_DIR


def write_reverse_corpus(directory, sizes=(("train", 600), ("valid", 40), ("test", 40)), seed=0):
    """Sentences of random words and their reversal: learnable in a few hundred updates."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30)]
    for split, count in sizes:
        with open(os.path.join(directory, f"{split}.src"), "w") as src, open(
            os.path.join(directory, f"{split}.tgt"), "w"
        ) as tgt:
            for _ in range(count):
                sentence = [rng.choice(words) for _ in range(rng.randint(3, 9))]
                src.write(" ".join(sentence) + "\n")
                tgt.write(" ".join(reversed(sentence)) + "\n")


def run(cmd, cwd=None, check=True):
    """Run a CLI, returning the CompletedProcess; on an unexpected status show its output."""
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory):
    """A binarised fairseq dataset (src -> tgt, joined dictionary) built by fairseq-preprocess."""
    root = tmp_path_factory.mktemp("toy")
    write_reverse_corpus(str(root))
    run([
        "fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
        "--trainpref", str(root / "train"), "--validpref", str(root / "valid"),
        "--testpref", str(root / "test"), "--destdir", str(root / "bin"),
        "--joined-dictionary", "--workers", "1",
    ])
    return root / "bin"


@pytest.fixture(scope="session")
def mono_data(toy_data):
    """The toy corpus's source side as monolingual data (masked_lm, language_modeling)."""
    root = toy_data.parent
    run(["fairseq-preprocess", "--only-source", "--trainpref", str(root / "train.src"),
         "--validpref", str(root / "valid.src"), "--destdir", str(root / "mono"),
         "--workers", "1"])
    return root / "mono"


def build(data_dir, arch, *extra, seed=1):
    """Build a model through fairseq's own option parsing, arch hook and task, as fairseq-train does."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, [str(data_dir), "--user-dir", USER_DIR, "--arch", arch, "--cpu", *map(str, extra)]
    )
    cfg = convert_namespace_to_omegaconf(args)
    torch.manual_seed(seed)
    task = tasks.setup_task(cfg.task)
    return task.build_model(cfg.model), task, cfg


def sample_batch(task, size=4, seed=0):
    """A fixed batch of the toy training set (net_input dict and target)."""
    task.load_dataset("train")
    dataset = task.dataset("train")
    generator = torch.Generator().manual_seed(seed)
    indices = torch.randperm(len(dataset), generator=generator)[:size].tolist()
    return dataset.collater([dataset[i] for i in indices])


PY = sys.executable
