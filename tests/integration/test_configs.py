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
from deepnet_fairseq.recipes.pipeline import planned_train_command
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


# the probe's own options, not the sweep's: it saves nothing and logs every 10 updates
PROBE_ONLY = {"--no-save", "--save-dir", "--log-format", "--log-interval", "--user-dir"}
# the recipe's bookkeeping (where it saves and logs), and what each probe call adds itself
RECIPE_ONLY = {"--save-dir", "--tensorboard-logdir", "--save-interval-updates",
               "--keep-interval-updates", "--no-epoch-checkpoints", "--log-format",
               "--log-interval", "--user-dir", "--cpu", "--arch", "--encoder-layers",
               "--decoder-layers", "--lr", "--depth-transfer", "--depth-base",
               "--checkpoint-activations"}  # the probes measure without it; a small machine's
# recipe may turn it on


def _options(command):
    """{option: its value, or None for a flag} of a fairseq-train argument list."""
    options = {}
    for i, token in enumerate(command):
        if token.startswith("--"):
            following = command[i + 1] if i + 1 < len(command) else "--"
            options[token] = None if following.startswith("--") else following
    return options


def test_the_depth_probes_train_as_the_sweep_does(tmp_path):
    """results/multilingual-depth's gpu-probe.sh and cpu-pace.sh time the sweep's deep cells
    with fairseq-train directly, from sweep-args.sh: every option there has the value of the
    recipe's own command for those cells (built from configs/multilingual-depth.toml), the
    recipe sets nothing else but bookkeeping, and the probes' rates are those the depth rule
    gives the cells."""
    config = configfile.load(os.path.join(REPO, "configs", "multilingual-depth.toml"))
    given = {name: (value, "config") for name, value in config.settings.items()}
    runs = {"DEEPNET_500_LR": "deepnet:500:500:LR=0.002:LR_BASE_LAYERS=6",
            "DEEPNET_100_LR": "deepnet:100:100:LR=0.002:LR_BASE_LAYERS=6",
            "completep": "pre_ln_completep:500:500:LR=0.004"}
    given["RUNS"] = (" ".join(runs.values()), "test")
    env = {"DEVICE": "cpu", "DEEPNET_WORK": str(tmp_path / "work")}
    cfg = resolve(config.dataset, env, REPO, lambda: 0, given=given)
    bin_dir = paths(cfg).bin  # the lists prepare writes for the shipped Multi30k's three pairs
    os.makedirs(bin_dir)
    for name, text in (("langs.txt", "en,cs,de,fr"),
                       ("lang_pairs.txt", "cs-en,en-cs,de-en,en-de,fr-en,en-fr")):
        with open(os.path.join(bin_dir, name), "w") as f:
            f.write(text + "\n")
    _, _, run_cfgs = sweep_module._resolve_runs(cfg, env)
    recipe = {key: _options(planned_train_command(run_cfg, env))
              for key, run_cfg in zip(runs, run_cfgs)}
    shell = ("source results/multilingual-depth/sweep-args.sh && printf '%s\\n' "
             "\"${SWEEP_ARGS[@]}\" && echo \"DEEPNET_500_LR $DEEPNET_500_LR\" "
             "&& echo \"DEEPNET_100_LR $DEEPNET_100_LR\"")
    out = subprocess.run(["bash", "-c", shell], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    probe, rates = _options(out[:-2]), dict(line.split() for line in out[-2:])
    for options in recipe.values():
        for option, value in probe.items():
            if option not in PROBE_ONLY:
                assert options.get(option, "absent") == value, (option, value, options)
        assert set(options) - set(probe) <= RECIPE_ONLY, set(options) - set(probe)
    for name, rate in rates.items():
        assert float(rate) == pytest.approx(float(recipe[name]["--lr"]), rel=1e-5), name
