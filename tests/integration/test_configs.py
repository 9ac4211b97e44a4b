"""Experiments as files (configs/, recipes/spec/configfile.py): every committed config runs as it is
(each step as a dry run), its settings say they come from it, the environment wins with a
note, a command's settings saved with --save-config resolve the same when run from the file,
and a sweep's runs get the file's settings."""

import glob
import os
import re
import subprocess
import sys

import pytest

from deepnet_fairseq.recipes import __main__ as recipes_cli
from deepnet_fairseq.recipes.spec import configfile
from deepnet_fairseq.recipes.spec.settings import resolve
from deepnet_fairseq.recipes.pipeline import sweeps as sweep_module
from deepnet_fairseq.recipes.pipeline.sweeps import sweep as run_sweep
from deepnet_fairseq.recipes.spec.paths import paths
from support import REPO

CONFIGS = sorted(glob.glob(os.path.join(REPO, "configs", "*.toml")))


def test_the_configs_folder_holds_the_reported_experiments():
    names = {os.path.basename(path) for path in CONFIGS}
    assert {"quickstart.toml", "wmt17-mini.toml", "table1-mini.toml", "depth-transfer.toml",
            "figure5-realtext.toml", "t-fixup-schedule.toml", "depth-study.toml",
            "depth-study-ln.toml"} <= names
    for path in CONFIGS:  # each file names its result page, and a results page names its file
        config = configfile.load(path)
        assert config.description, path
        pages = re.findall(r"(?:results|docs)/[\w./-]*[\w/]|README\.md", config.description)
        assert pages, f"{path}: its description names no results/ or docs/ page, nor README.md"
        for page in pages:
            assert os.path.exists(os.path.join(REPO, page)), (path, page)
            readme = os.path.join(REPO, page, "README.md")
            if page.startswith("results/") and os.path.exists(readme):
                with open(readme, encoding="utf-8") as f:
                    assert "configs/" + os.path.basename(path) in f.read(), (readme, path)


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_every_config_runs_as_it_is(tmp_path, path):
    relative = os.path.relpath(path, REPO)
    proc = subprocess.run(
        [sys.executable, "-m", "deepnet_fairseq.recipes", "run", relative, "--dry-run"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "DEVICE": "cpu", "DEEPNET_WORK": str(tmp_path / "work")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = configfile.load(path)
    for step in config.steps:
        assert f"[{config.dataset}/{step}]" in proc.stderr + proc.stdout
    for name in config.settings:  # every setting of the file, said to come from it
        assert any(line.strip().startswith(name + " ") and f"(config {relative})" in line
                   for line in proc.stderr.splitlines()), name
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").rglob("*.pt"))


def test_the_environment_wins_over_the_file_and_says_so(tmp_path):
    path = tmp_path / "x.toml"
    configfile.save(str(path), "wmt17", ["train"], {"SIZE": "mini", "LR": "0.002"})
    config = configfile.load(str(path))
    given = {name: (value, f"config {path}") for name, value in config.settings.items()}
    cfg = resolve("wmt17", {"DEVICE": "cpu", "LR": "0.004", "DEEPNET_WORK": str(tmp_path)},
                  REPO, lambda: 0, given=given)
    assert (cfg["SIZE"], cfg.sources["SIZE"]) == ("mini", f"config {path}")
    assert (cfg["LR"], cfg.sources["LR"]) == ("0.004", "environment LR")
    assert f"LR: the environment LR (0.004) wins over config {path} (0.002)" in cfg.notes


def test_saved_settings_resolve_the_same_from_the_file(tmp_path, monkeypatch):
    env = {"DEVICE": "cpu", "DEEPNET_WORK": str(tmp_path / "work"), "SIZE": "mini",
           "METHOD": "admin", "LAYERS": "18", "LR": "0.0005", "SEED": "3",
           "TRAIN_ARGS": "--no-save-optimizer-state"}
    for name in list(os.environ):
        if name.startswith("DEEPNET_") or name in ("SIZE", "LR", "SEED", "METHOD", "LAYERS"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    saved = tmp_path / "saved.toml"
    assert recipes_cli.main(["wmt17", "train", "--dry-run", "--save-config", str(saved)]) == 0
    config = configfile.load(str(saved))
    assert config.steps == ("train",) and "WORK" not in config.settings
    assert dict(config.settings) == {k: v for k, v in env.items() if k != "DEEPNET_WORK"}
    from_env = resolve("wmt17", env, REPO, lambda: 0)
    machine = {"DEVICE": "cpu", "DEEPNET_WORK": str(tmp_path / "work")}
    from_file = resolve("wmt17", machine, REPO, lambda: 0,
                        given={n: (v, "config") for n, v in config.settings.items()})
    assert from_file.values == from_env.values


def test_a_sweeps_runs_get_the_files_settings(tmp_path, monkeypatch):
    """The sweep resolves each run from its own inputs (the file, the environment) plus the
    run's entry, with no environment rewritten for the run: LR from the file reaches both
    runs, one RUNS entry overriding it, and each value says where it came from."""
    work = tmp_path / "work"
    given = {"SIZE": ("smoke", "config f"), "LR": ("0.0025", "config f"),
             "RUNS": ("deepnet:1:1 deepnet:2:2:LR=0.001", "config f")}
    env = {"DEVICE": "cpu", "DEEPNET_WORK": str(work)}
    cfg = resolve("wmt17", env, REPO, lambda: 0, given=given)
    bin_dir = paths(cfg).bin
    os.makedirs(bin_dir)
    open(os.path.join(bin_dir, ".done"), "w").close()
    trained = {}

    def train(run_cfg, run_env):  # what each run would train with; 3: diverged, so no evaluation
        trained[run_cfg["RUN_NAME"]] = (run_cfg["LR"], run_cfg.sources["LR"])
        return 3

    monkeypatch.setattr(sweep_module, "train", train)
    monkeypatch.setattr(sweep_module, "report_main", lambda argv: 0)
    assert run_sweep(cfg, env) == 0
    assert trained == {"deepnet-1L-1L": ("0.0025", "config f"),
                       "deepnet-2L-2L+LR=0.001": ("0.001",
                                                  "sweep RUNS entry deepnet:2:2:LR=0.001")}
