"""The recipes as a user runs them (bash scripts/DATASET/STEP.sh): shellcheck, --help, dry runs
and the clear failures of bad settings, each through the shell script."""

import glob
import os
import re
import subprocess

import pytest
import torch

from deepnet_fairseq.recipes.datasets import DATASETS
from support import REPO

SCRIPTS = sorted(glob.glob(os.path.join(REPO, "scripts", "*", "*.sh")))
RECIPES = [s for s in SCRIPTS
           if os.path.basename(os.path.dirname(s)) in DATASETS]
GPU_CHECK = os.path.join(REPO, "benchmarks", "gpu_check.sh")


def bash(script, env=None, *args):
    return subprocess.run(["bash", script, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=REPO)


def test_shellcheck_every_script():
    shells = SCRIPTS + glob.glob(os.path.join(REPO, "scripts", "lib", "*.sh"))
    proc = subprocess.run(["shellcheck", "-x", *shells], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", RECIPES, ids=lambda s: os.path.relpath(s, REPO))
def test_recipe_header_and_help(script):
    text = open(script).read()
    assert "set -euo pipefail" in text
    header = text.split("set -euo pipefail")[0]
    assert "Table" in header or "Figure" in header or "no paper table" in header, \
        "header must name the paper table/figure, or say it has none"
    assert "Hardware" in header and ("Time" in header or "time" in header)
    proc = subprocess.run(["bash", script, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "Environment" in proc.stdout


def test_missing_data_is_a_clear_error(tmp_path):
    proc = bash(os.path.join(REPO, "scripts", "wmt17", "train.sh"),
                {"SIZE": "smoke", "DEVICE": "cpu", "DEEPNET_WORK": str(tmp_path)})
    assert proc.returncode != 0 and "run scripts/wmt17/prepare.sh first" in proc.stderr
    proc = bash(os.path.join(REPO, "scripts", "opus100", "prepare.sh"),
                {"SIZE": "smoke", "SOURCE": "local", "LOCAL_DIR": str(tmp_path / "nowhere"),
                 "LANGS": "de", "DEEPNET_WORK": str(tmp_path)})
    assert proc.returncode != 0 and "LOCAL_DIR" in proc.stderr
    assert not os.path.exists(tmp_path / "data" / "bin")


def test_missing_gpu_is_a_clear_error(tmp_path):
    proc = bash(os.path.join(REPO, "scripts", "iwslt14", "train.sh"),
                {"DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": "", "DEEPNET_WORK": str(tmp_path)})
    assert proc.returncode != 0 and "DEVICE=cuda but no GPU is visible" in proc.stderr


def test_a_misspelled_setting_stops_the_script(tmp_path):
    proc = bash(os.path.join(REPO, "scripts", "wmt17", "train.sh"),
                {"LAYER": "18", "DEVICE": "cpu", "DEEPNET_WORK": str(tmp_path)})
    assert proc.returncode == 2
    assert "LAYER=18 is not a recipe setting (did you mean LAYERS?)" in proc.stderr
    assert not os.path.exists(tmp_path / "runs")


@pytest.mark.parametrize("script,env,line", [
    ("train.sh", {"TRAIN_ARGS": "-a transformer"},
     "error: TRAIN_ARGS: -a (--arch) is set by the recipe from METHOD: set that instead"),
    ("train.sh", {"TRAIN_ARGS": "--patience 7"}, None),  # the plugin's parser, in a new process
    ("train.sh", {"NPROC": "\u00b2"}, "error: NPROC='\u00b2' (from environment NPROC): expected "
                                       "ASCII digits (0-9)"),
    ("prepare.sh", {"SRC": "en-gb"}, "error: SRC='en-gb' (from environment SRC): expected a "
                                     "language code"),
    ("sweep.sh", {"RUNS": "deepnet:6:6:ENC_LAYERS=50"},
     "error: RUNS entry 'deepnet:6:6:ENC_LAYERS=50': ENC_LAYERS cannot differ between runs"),
])
def test_a_bad_setting_is_one_line_and_status_2_with_nothing_written(tmp_path, script, env, line):
    """Issue 32's refusals as a user meets them: a fresh process (no plugin registered before
    the check), one line saying what was wrong and what to do, exit status 2, nothing made."""
    proc = bash(os.path.join(REPO, "scripts", "wmt17", script),
                {"DEVICE": "cpu", "DEEPNET_WORK": str(tmp_path / "w"), **env}, "--dry-run")
    if line is None:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 2 and proc.stderr.splitlines()[-1].startswith(line), proc.stderr
    assert not os.path.exists(tmp_path / "w")


def test_dry_run_prints_settings_and_command_and_runs_nothing(tmp_path):
    env = {"CUDA_VISIBLE_DEVICES": "2,3", "LAYERS": "18", "DEEPNET_WORK": str(tmp_path / "w")}
    proc = bash(os.path.join(REPO, "scripts", "wmt17", "train.sh"), env, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "TOKENS_PER_UPDATE" in proc.stderr and "(dataset wmt17 [admin-torch])" in proc.stderr
    assert "2 GPU(s) per node: CUDA_VISIBLE_DEVICES=2,3" in proc.stderr
    command = proc.stdout.strip()
    assert command.startswith("torchrun --standalone --nproc_per_node 2 -m deepnet_fairseq.fairseq_train_compat ")
    assert "--update-freq 64 " in command and "--encoder-layers 18 " in command
    assert not os.path.exists(tmp_path / "w")  # nothing created
    proc = bash(os.path.join(REPO, "scripts", "wmt17", "prepare.sh"),
                {"SOURCE": "multi30k", "SIZE": "smoke", "DEVICE": "cpu",
                 "DEEPNET_WORK": str(tmp_path / "w")}, "--dry-run")
    assert proc.returncode == 0 and "LOCAL_VALID" in proc.stderr and "val " in proc.stderr
    assert not os.path.exists(tmp_path / "w")


def test_prepare_refuses_to_delete_what_it_did_not_create(tmp_path):
    # DEEPNET_WORK pointed at a directory whose data/ (the recipes') holds someone's raw.tmp;
    # a data/ the recipes did not create is refused before anything is written
    # (test_hostile_runtime.py::test_quickstart_leaves_a_directory_it_did_not_create_alone)
    precious = tmp_path / "data" / "raw.tmp"
    precious.mkdir(parents=True)
    (tmp_path / "data" / ".deepnet-recipes").write_text("")
    (precious / "notes.txt").write_text("not the recipes'")
    proc = bash(os.path.join(REPO, "scripts", "wmt17", "prepare.sh"),
                {"SIZE": "smoke", "SOURCE": "multi30k", "DEVICE": "cpu",
                 "DEEPNET_WORK": str(tmp_path)})
    assert proc.returncode != 0 and "refusing to delete" in proc.stderr
    assert (precious / "notes.txt").read_text() == "not the recipes'"


def test_every_recipe_script_is_its_directorys_dataset_and_step():
    """scripts/<dataset>/ is optional (``python -m deepnet_fairseq.recipes DATASET STEP`` runs
    every declared dataset, docs/running.md): a script that hands over to the recipes sits in
    the directory of a declared dataset, named for the step it runs, and a dataset's directory
    holds all four steps."""
    steps = ("prepare", "train", "evaluate", "sweep")
    for script in SCRIPTS:
        with open(script, encoding="utf-8") as f:
            calls = re.findall(r"^recipe_exec (\S+) (\S+) ", f.read(), re.M)
        where = os.path.relpath(script, os.path.join(REPO, "scripts"))
        if calls or script in RECIPES:
            dataset, step = os.path.dirname(where), os.path.basename(where)[:-len(".sh")]
            assert calls == [(dataset, step)] and dataset in DATASETS and step in steps, where
    for dataset in {os.path.basename(os.path.dirname(s)) for s in RECIPES}:
        assert all(os.path.isfile(os.path.join(REPO, "scripts", dataset, f"{step}.sh"))
                   for step in steps), dataset


@pytest.mark.parametrize("run_name", ["/tmp/victim", "../../victim", ".."])
def test_train_sh_refuses_a_run_name_outside_the_work_directory(run_name, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "mine.txt").write_text("x")
    env = {**os.environ, "DEVICE": "cpu", "SIZE": "smoke", "DEEPNET_WORK": str(tmp_path / "work"),
           "RUN_NAME": run_name}
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "wmt17", "train.sh")], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "plain directory name" in proc.stderr
    assert (victim / "mine.txt").read_text() == "x" and os.listdir(victim) == ["mine.txt"]
    assert not (tmp_path / "work").exists()


def test_quickstart_help_dry_run_and_thin_wrapper(tmp_path):
    """scripts/quickstart.sh hands over to the recipes' program; --help lists its settings,
    --dry-run shows the wmt17 recipe at the quickstart size without running anything, and an
    unexpected argument is refused."""
    script = os.path.join(REPO, "scripts", "quickstart.sh")
    shown = subprocess.run(["bash", script, "--help"], capture_output=True, text=True)
    assert shown.returncode == 0
    for name in ("SIZE", "DEVICE", "DEEPNET_WORK", "SOURCE", "MAX_UPDATE"):
        assert name in shown.stdout
    env = {**os.environ, "DEEPNET_WORK": str(tmp_path / "work")}
    dry = subprocess.run(["bash", script, "--dry-run"], capture_output=True, text=True, env=env)
    assert dry.returncode == 0, dry.stderr
    assert re.search(r"SIZE += quickstart", dry.stderr)
    assert "fairseq-train" in dry.stdout and "--encoder-embed-dim 128" in dry.stdout
    assert not os.path.exists(tmp_path / "work")
    refused = subprocess.run(["bash", script, "now"], capture_output=True, text=True)
    assert refused.returncode == 2 and "unrecognized arguments: now" in refused.stderr


def test_shell_wrapper_help_and_bad_value():
    help_ = subprocess.run(["bash", GPU_CHECK, "--help"], capture_output=True, text=True)
    assert help_.returncode == 0
    text = " ".join(help_.stdout.split())
    assert "Overflow cascade (fp16)" in text and "fp16 training runs as well" in text
    bad = subprocess.run(["bash", GPU_CHECK, "--device", "cpu", "--updates", "-3"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--updates: expected a positive integer" in bad.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_shell_wrapper_cuda_without_a_gpu_exits_2(tmp_path):
    proc = subprocess.run(["bash", GPU_CHECK, "--out", str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "no CUDA GPU is visible" in proc.stderr
    assert not (tmp_path / "out").exists()
