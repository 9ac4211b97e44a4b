"""The recipes' launch logic (deepnet_fairseq/recipes/spec/settings.py, recipes/base/machine.py
and recipes/run/{layout,commands,train_args,runner}.py): pure functions given an environment
dict, so every
layout is checked on a CPU machine with no scheduler. No training and no child process here
(live logs and signals: integration/test_signals.py)."""

import dataclasses
import os
import re
import signal
import sys
import time

import pytest

from deepnet_fairseq import processes
from deepnet_fairseq.corpora import multi30k_dir
from deepnet_fairseq.methods import METHODS
from deepnet_fairseq.recipes import quickstart
from deepnet_fairseq.recipes.datasets import DATASETS
from deepnet_fairseq.recipes.run import runlog, runner
from deepnet_fairseq.recipes.spec import presets, settings
from deepnet_fairseq.storage import directories as workdir
from deepnet_fairseq.recipes.base import machine
from deepnet_fairseq.recipes.base.machine import count_gpus
from deepnet_fairseq.recipes.spec.settings import SettingError
from deepnet_fairseq.recipes.pipeline.sweeps import results_dir
from deepnet_fairseq.recipes.run.commands import method_args, task_args, train_command
from deepnet_fairseq.recipes.run.layout import (CPU_RESIDENT_BYTES, cpu_need_gib, machine_problem,
                                                plan_layout)
from deepnet_fairseq.recipes.run.memory import parameter_count
from deepnet_fairseq.recipes.run.train_args import OUTSIDE, SETTING_OF_DEST, SPLITS, check_train_args, fairseq_train_parser, train_args_dests
from deepnet_fairseq.recipes.spec.paths import paths
from support import REPO


def no_probe():
    raise AssertionError("GPUs probed although the environment says how many there are")


def plan(env, dataset="wmt17", probe=no_probe, repo=REPO, ram_gib=24.0):
    """(settings, layout, command) as train.sh --dry-run computes them, for ENV, on a machine
    of RAM_GIB (CI's 24 by default, whatever this machine has)."""
    cfg = settings.resolve(dataset, env, repo, probe)
    layout = plan_layout(cfg, env, probe, ram_probe=lambda: ram_gib)
    command = train_command(cfg, layout, method_args(cfg),
                                   task_args(cfg, dry_run=True), python="PY")
    return cfg, layout, command


def option(command, name):
    return command[command.index(name) + 1]


GPUS8 = {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}


# ---- counting devices -----------------------------------------------------------------------

@pytest.mark.parametrize("env, count", [
    ({"CUDA_VISIBLE_DEVICES": "2,3"}, 2),
    ({"CUDA_VISIBLE_DEVICES": ""}, 0),
    ({"CUDA_VISIBLE_DEVICES": "-1"}, 0),
    ({"CUDA_VISIBLE_DEVICES": "0,1,-1,2"}, 2),       # a negative entry ends the list
    ({"CUDA_VISIBLE_DEVICES": "0,0"}, 0),            # a repeated device: CUDA sees none
    ({"CUDA_VISIBLE_DEVICES": "1gpu,2"}, 2),         # leading numbers, as CUDA reads them
    ({"CUDA_VISIBLE_DEVICES": "GPU-8a1b,GPU-77cd"}, 2),
    ({"CUDA_VISIBLE_DEVICES": "MIG-4f1a"}, 1),
    ({"CUDA_VISIBLE_DEVICES": "GPU-8a1b,3"}, 1),     # a UUID list ends at an ordinal
    ({"SLURM_STEP_GPUS": "0,1,2,3", "SLURM_GPUS_ON_NODE": "8"}, 4),
    ({"SLURM_GPUS_ON_NODE": "8"}, 8),
    ({"SLURM_JOB_GPUS": "4,5,6"}, 3),
    ({"CUDA_VISIBLE_DEVICES": "0", "SLURM_GPUS_ON_NODE": "8"}, 1),  # CUDA's view wins
])
def test_count_gpus_as_cuda_and_slurm_say(env, count):
    assert count_gpus(env, no_probe)[0] == count


def test_count_gpus_probes_only_when_nothing_says():
    assert count_gpus({}, lambda: 3) == (3, "torch.cuda.device_count()")


def test_the_gpu_probe_asks_torch_only_where_a_gpu_driver_shows(tmp_path, monkeypatch):
    """No driver's device files: 0 without torch (planning stays quick); one there: torch's
    own count, which a CPU build of torch gives as 0 beside a driver."""
    import torch

    monkeypatch.setattr(machine, "GPU_DRIVER_SIGNS", (str(tmp_path / "nvidia[0-9]*"),))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 5)
    assert machine.torch_device_count() == 0
    (tmp_path / "nvidia0").touch()
    assert machine.torch_device_count() == 5


# ---- layouts --------------------------------------------------------------------------------

def test_one_gpu():
    cfg, layout, cmd = plan({"CUDA_VISIBLE_DEVICES": "0"})
    assert (layout.device, layout.world, layout.launcher) == ("cuda", 1, "none")
    assert cmd[0] == "fairseq-train" and option(cmd, "--distributed-world-size") == "1"
    # the paper's 128 x 4,096 tokens on one GPU: update-freq 128
    assert option(cmd, "--update-freq") == "128" and layout.tokens_per_update == 524288


def test_train_args_come_last():
    """TRAIN_ARGS: more fairseq-train options, after the recipe's own."""
    _, _, cmd = plan({"CUDA_VISIBLE_DEVICES": "0",
                      "TRAIN_ARGS": "--no-save-optimizer-state --patience 7"})
    assert cmd[-3:] == ["--no-save-optimizer-state", "--patience", "7"]
    from fairseq import options

    parsed = options.parse_args_and_arch(options.get_training_parser(), cmd[1:])
    assert parsed.patience == 7 and parsed.no_save_optimizer_state


@pytest.mark.parametrize("extra,named", [
    ("--arch transformer", "--arch is set by the recipe from METHOD"),
    ("--save-dir /elsewhere", "--save-dir is set by the recipe from RUN_NAME or DEEPNET_WORK"),
    ("--lr=5e-4", "--lr is set by the recipe from LR"),
    ("--log-interval 7", "from LOG_INTERVAL"),
    ("--user-dir x", "--user-dir is set by the recipe"),
    ("--criterion cross_entropy", "--criterion is set by the recipe: the run's records"),
])
def test_train_args_may_not_set_what_the_recipe_sets(extra, named):
    """Every option of the recipe's own command is refused in TRAIN_ARGS, naming the setting
    that sets it: the run's records say what it trained."""
    with pytest.raises(SettingError, match=named):
        plan({"CUDA_VISIBLE_DEVICES": "0", "TRAIN_ARGS": extra})


@pytest.mark.parametrize("extra,named", [
    ("-a transformer", r"-a \(--arch\) is set by the recipe from METHOD"),
    ("-atransformer", r"-a \(--arch\) is set by the recipe from METHOD"),
    ("-s de -t en", r"-s \(--source-lang\) .* from SRC.*-t \(--target-lang\) .* from TGT"),
    ("--fp16", "--fp16 is set by the recipe from PRECISION"),  # fp32 here: still PRECISION's
    ("--tensorboard-logdir /tmp/tb", "--tensorboard-logdir moves the TensorBoard event files the recipe writes"),
    ("--restore-file /elsewhere/checkpoint.pt", "--restore-file starts from weights outside"),
    ("--disable-validation", "--disable-validation removes or cuts short the validation"),
    ("--train-subset valid", "--train-subset changes the split the run trains or validates"),
    ("--valid-subset=test", "--valid-subset changes the split"),
    # an option of a component chosen in TRAIN_ARGS itself is known too
    ("--bpe sentencepiece --sentencepiece-model /elsewhere/spm.model",
     "--sentencepiece-model reads a file outside the run"),
    ("--ar transformer", "fairseq-train would not accept --ar transformer"),  # no abbreviations
    ("--no-such-option", "fairseq-train would not accept --no-such-option"),
    ("--patience x", "fairseq-train would refuse it: argument --patience: invalid int"),
])
def test_train_args_are_read_by_destination_as_fairseq_reads_them(extra, named):
    """An alias, an attached value or another spelling of an option the recipe sets is the
    same option to fairseq-train: refused as the option it is; one fairseq-train would not take
    is refused here, before anything is written, not when training starts."""
    with pytest.raises(SettingError, match=f"TRAIN_ARGS: .*{named}"):
        plan({"DEVICE": "cpu", "TRAIN_ARGS": extra})


def _refused_spellings():
    """Every spelling fairseq-train's own parser (for the recipe's command) accepts for every
    destination TRAIN_ARGS may not set: each option string with its value apart, after '=',
    attached to a short option; a long option cut short (accepted only where the parser allows
    abbreviations, so refused either way). Generated from the parser, not a list."""
    _, _, cmd = plan({"DEVICE": "cpu", "NPROC": "2"})
    own = cmd[cmd.index("-m") + 2:]
    parser = fairseq_train_parser(own)
    ours = {dest for dest, _ in train_args_dests(own[1:], parser)}
    refused = ours | set(SETTING_OF_DEST) | set(OUTSIDE) | set(SPLITS)
    known = {option for action in parser._actions for option in action.option_strings}
    cases = []
    for action in parser._actions:
        if action.dest not in refused:
            continue
        for option in action.option_strings:
            value = [] if action.nargs == 0 else ["1"]
            cases.append((own, [option, *value], option))
            if value and option.startswith("--"):
                cases.append((own, [f"{option}=1"], option))
            elif value:
                cases.append((own, [f"{option}1"], option))
            if option.startswith("--") and option[:-1] not in known:
                cases.append((own, [option[:-1], *value], option[:-1]))
    return refused, cases


REFUSED, SPELLINGS = _refused_spellings()


def test_the_refused_destinations_cover_the_recipe_and_the_outside():
    assert {"arch", "source_lang", "target_lang", "save_dir", "user_dir", "tensorboard_logdir",
            "restore_file", "wandb_project", "fp16", "bf16", "criterion", "disable_validation",
            "train_subset", "valid_subset"} <= REFUSED
    assert len(SPELLINGS) > 2 * len(REFUSED)


@pytest.mark.parametrize("own,extra,option", SPELLINGS, ids=[" ".join(e) for _, e, _ in SPELLINGS])
def test_every_spelling_of_every_refused_destination_is_refused(own, extra, option):
    with pytest.raises(SettingError, match=f"TRAIN_ARGS: .*{re.escape(option)}"):
        check_train_args(extra, own)


def test_an_unbalanced_quote_in_train_args_is_one_setting_error():
    with pytest.raises(SettingError, match="TRAIN_ARGS=.*No closing quotation; quote it"):
        plan({"CUDA_VISIBLE_DEVICES": "0", "TRAIN_ARGS": "--patience '7"})


def test_eight_gpus_found_by_the_probe():
    cfg, layout, cmd = plan({}, probe=lambda: 8)
    assert "DEVICE" in cfg and cfg["DEVICE"] == "cuda"
    # fairseq-train's cli_main through the module that makes torchrun's workers die with it
    assert cmd[:6] == ["torchrun", "--standalone", "--nproc_per_node", "8", "-m",
                       "deepnet_fairseq.fairseq_train_compat"]
    assert option(cmd, "--update-freq") == "16" and option(cmd, "--distributed-world-size") == "8"


def test_cuda_visible_devices_2_3():
    _, layout, cmd = plan({"CUDA_VISIBLE_DEVICES": "2,3"})
    assert layout.nproc == 2 and layout.gpus_from == "CUDA_VISIBLE_DEVICES=2,3"
    assert option(cmd, "--nproc_per_node") == "2" and option(cmd, "--update-freq") == "64"


def test_four_nodes_of_eight_gpus_under_slurm():
    env = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "4", "SLURM_GPUS_ON_NODE": "8"}
    cfg, layout, cmd = plan(env)
    assert cfg["NNODES"] == "4" and cfg.sources["NNODES"].startswith("derived: SLURM_NNODES")
    assert (layout.launcher, layout.world, layout.update_freq) == ("srun", 32, 4)
    assert cmd[:6] == ["srun", "--nodes", "4", "--ntasks-per-node", "8", "fairseq-train"]
    assert option(cmd, "--distributed-world-size") == "32"
    assert cmd[-2:] == ["--distributed-port", "29500"] and layout.is_rank0


def test_two_nodes_by_torchrun():
    env = {**GPUS8, "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "node0"}
    _, layout, cmd = plan(env)
    assert cmd[:12] == ["torchrun", "--nnodes", "2", "--node_rank", "1", "--master_addr", "node0",
                        "--master_port", "29500", "--nproc_per_node", "8", "-m"]
    assert option(cmd, "--distributed-world-size") == "16" and option(cmd, "--update-freq") == "8"
    assert not layout.is_rank0 and layout.node_suffix == ".node1"
    _, layout, _ = plan({**env, "NODE_RANK": "0"})
    assert layout.is_rank0 and layout.node_suffix == ""


def test_two_nodes_without_node_rank_or_master_is_an_error_never_rank_0():
    with pytest.raises(SettingError, match="set NODE_RANK on every node.*never assumed to be rank"):
        plan({**GPUS8, "NNODES": "2", "MASTER_ADDR": "node0"})
    with pytest.raises(SettingError, match="set NODE_RANK and MASTER_ADDR"):
        plan({**GPUS8, "NNODES": "2"})
    with pytest.raises(SettingError, match="NODE_RANK=2 must be below NNODES=2"):
        plan({**GPUS8, "NNODES": "2", "NODE_RANK": "2", "MASTER_ADDR": "node0"})


def test_several_cpu_processes():
    env = {"DEVICE": "cpu", "SIZE": "smoke", "NPROC": "3"}
    cfg, layout, cmd = plan(env)
    assert cmd[:6] == ["torchrun", "--standalone", "--nproc_per_node", "3", "-m",
                       "deepnet_fairseq.fairseq_train_compat"]
    assert "--cpu" in cmd and option(cmd, "--distributed-backend") == "gloo"
    assert option(cmd, "--ddp-backend") == "legacy_ddp"
    assert option(cmd, "--distributed-world-size") == "3"
    assert "--fp16" not in cmd and "--bf16" not in cmd  # fp32 on CPU by default
    assert layout.tokens_per_update >= cfg.optim.tokens_per_update


def test_one_cpu_process_is_plain_fairseq_train():
    _, layout, cmd = plan({"DEVICE": "cpu", "SIZE": "smoke"})
    assert layout.launcher == "none" and cmd[0] == "fairseq-train"
    assert "--distributed-backend" not in cmd and option(cmd, "--distributed-world-size") == "1"


def test_precision_choices():
    _, _, fp16 = plan({"CUDA_VISIBLE_DEVICES": "0"})  # fp16 is the CUDA default
    assert fp16[fp16.index("--fp16"):fp16.index("--fp16") + 7] == [
        "--fp16", "--fp16-init-scale", "128", "--fp16-scale-window", "256",
        "--min-loss-scale", "0.0001"]
    _, layout, bf16 = plan({"CUDA_VISIBLE_DEVICES": "0", "PRECISION": "bf16"})
    # fairseq 0.12's CLI turns --bf16 into --tpu: the compat module undoes that
    assert bf16[:3] == ["PY", "-m", "deepnet_fairseq.fairseq_train_compat"]
    assert "--bf16" in bf16 and "--fp16" not in bf16
    _, _, fp32 = plan({"CUDA_VISIBLE_DEVICES": "0", "PRECISION": "fp32"})
    assert "--fp16" not in fp32 and "--bf16" not in fp32 and fp32[0] == "fairseq-train"
    # fp16 on CPU: fairseq's own fp16 path with its CUDA-only calls lifted (the compat module)
    _, _, cpu16 = plan({"DEVICE": "cpu", "PRECISION": "fp16"})
    assert cpu16[:3] == ["PY", "-m", "deepnet_fairseq.fairseq_train_compat"]
    assert "--fp16" in cpu16 and "--cpu" in cpu16


@pytest.mark.parametrize("env, on", [
    ({"LAYERS": "100"}, True),                          # N + M = 200 >= the threshold
    ({"LAYERS": "99"}, False),
    ({"ENC_LAYERS": "150", "DEC_LAYERS": "50"}, True),
    ({"LAYERS": "6", "CHECKPOINT_ACTIVATIONS": "1"}, True),
    ({"LAYERS": "100", "CHECKPOINT_ACTIVATIONS": "0"}, False),
    ({"LAYERS": "20", "CHECKPOINT_ACTIVATIONS_FROM": "40"}, True),
])
def test_activation_checkpointing_from_the_depth_threshold(env, on):
    _, layout, cmd = plan({"CUDA_VISIBLE_DEVICES": "0", **env})
    assert layout.checkpoint_activations is on and ("--checkpoint-activations" in cmd) is on


@pytest.mark.parametrize("env, message", [
    ({"CUDA_VISIBLE_DEVICES": "0,1", "LAUNCHER": "none"}, "LAUNCHER=none starts one process"),
    ({"CUDA_VISIBLE_DEVICES": "0", "LAUNCHER": "srun"}, "inside a SLURM allocation"),
    ({"CUDA_VISIBLE_DEVICES": "0,1", "NPROC": "4"}, "only 2 GPU"),
    ({"DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": ""}, "DEVICE=cuda but no GPU is visible"),
    ({"DEVICE": "cpu", "NPROC": "two"}, "NPROC='two'"),
    ({"DEVICE": "cpu", "NPROC": "\u00b2"}, "NPROC='\u00b2'.*ASCII digits"),  # "²".isdigit()
    ({"DEVICE": "cpu", "NPROC": "\u0663"}, "NPROC='\u0663'.*ASCII digits"),  # int("٣") == 3
    ({"DEVICE": "cpu", "NPROC": "0"}, "NPROC=0 .*must be >= 1"),
    ({"DEVICE": "cpu", "NPROC": "100000"}, "NPROC=100000 .*must be >= 1 and < 1025"),
])
def test_impossible_layouts_are_clear_errors(env, message):
    with pytest.raises(SettingError, match=message):
        plan(env)


# ---- settings -------------------------------------------------------------------------------

def test_environment_over_presets_and_prefix_over_bare_name():
    cfg = settings.resolve("wmt17", {"DEVICE": "cpu"}, REPO)
    assert (cfg["LR"], cfg.sources["LR"]) == ("1.5e-3", "dataset wmt17 [admin-torch]")
    cfg = settings.resolve("wmt17", {"DEVICE": "cpu", "LR": "1e-3"}, REPO)
    assert (cfg["LR"], cfg.sources["LR"]) == ("1e-3", "environment LR")
    cfg = settings.resolve("wmt17", {"DEVICE": "cpu", "LR": "1e-3", "DEEPNET_LR": "2e-3"}, REPO)
    assert (cfg["LR"], cfg.sources["LR"]) == ("2e-3", "environment DEEPNET_LR")
    # the size comes before the dataset
    cfg = settings.resolve("wmt17", {"DEVICE": "cpu", "SIZE": "smoke"}, REPO)
    assert cfg["LR"] == "0.002" and cfg.sources["LR"] == "size smoke [chosen]"


def test_work_is_read_only_with_its_prefix():
    cfg = settings.resolve("wmt17", {"DEVICE": "cpu", "WORK": "/scratch/someone"}, REPO)
    assert cfg["WORK"] == os.path.join(REPO, "runs", "wmt17")
    assert any("WORK is set in the environment but not read" in note for note in cfg.notes)
    cfg = settings.resolve("wmt17", {"DEVICE": "cpu", "SIZE": "smoke", "DEEPNET_WORK": "/w"}, REPO)
    assert cfg["WORK"] == "/w"
    assert paths(cfg).run_dir == "/w/runs/deepnet-6L-6L"


@pytest.mark.parametrize("env, message", [
    ({"LAYER": "18"}, r"LAYER=18 is not a recipe setting \(did you mean LAYERS\?\)"),
    ({"METHDO": "post_ln"}, "did you mean METHOD"),
    ({"DEEPNET_LAYRS": "2"}, r"DEEPNET_LAYRS is not a recipe setting \(did you mean LAYERS\?\)"),
    ({"DEEPNET_SOMETHING": "1"}, "DEEPNET_SOMETHING is not a recipe setting"),
    ({"LR": "fast"}, "LR='fast'.*expected a number"),
    ({"LAYERS": "-1"}, "expected a whole number"),
    ({"DEVICE": "gpu"}, "expected one of auto, cuda, cpu"),
    ({"ADAM_BETAS": "0.9,0.98"}, r"as \(0.9, 0.98\)"),
    ({"MODEL": "huge"}, "MODEL=huge: one of base, iwslt, tiny"),
    ({"SIZE": "tiny"}, "SIZE=tiny: one of mini, smoke, quickstart, quickstart-cuda or full"),
    ({"SIZE": "../smoke"}, "SIZE=../smoke: one of mini, smoke, quickstart, quickstart-cuda or full"),
])
def test_typos_and_bad_values_are_reported(env, message):
    with pytest.raises(SettingError, match=message):
        settings.resolve("wmt17", {"DEVICE": "cpu", **env}, REPO)


def test_common_system_variables_are_not_typos():
    env = {"DEVICE": "cpu", "LANG": "C.UTF-8", "HOME": "/root", "PATH": "/bin", "RANK": "0",
           "LOCAL_RANK": "0", "SLURM_NNODES": "2", "CUDA_HOME": "/usr/local/cuda"}
    assert settings.unknown_names(env) == []
    settings.resolve("wmt17", env, REPO)


def test_an_installed_copy_needs_no_checkout(tmp_path):
    """The presets are in the package: resolving from a directory with nothing in it works,
    and the runs go there."""
    cfg = settings.resolve("wmt17", {"DEVICE": "cpu", "SIZE": "mini"}, str(tmp_path))
    assert (cfg["MAX_UPDATE"], cfg.sources["MAX_UPDATE"]) == ("1000", "size mini [chosen]")
    assert cfg["WORK"] == str(tmp_path / "runs" / "wmt17-mini")


@pytest.mark.parametrize("preset", presets.every(), ids=lambda p: f"{p.kind}-{p.name}")
def test_every_preset_value_is_a_valid_setting_with_a_tag_and_a_reason(preset):
    for name, value in preset.values.items():
        assert name in settings.SETTINGS, f"{preset.kind} {preset.name}: {name}"
        settings._check(name, value.value, preset.source(name))  # raises on a bad value
        assert value.tag in (presets.PAPER, presets.ADMIN, presets.CHOSEN) and value.why


def test_the_paper_values_of_table_1_are_tagged_paper():
    """Hand-copied from the paper (Table 1, section 5.1): 512-2048-8, En->De, 6 to 100 layers
    per side; and fp16 on GPU."""
    expected = {("model", "base"): {"EMBED_DIM": "512", "FFN_DIM": "2048", "HEADS": "8"},
                ("dataset", "wmt17"): {"SRC": "en", "TGT": "de", "DEPTHS": "6 18 50 100"},
                ("machine", "cuda"): {"PRECISION": "fp16"}}
    for preset in presets.every():
        for name, value in expected.get((preset.kind, preset.name), {}).items():
            assert (preset.values[name].value, preset.values[name].tag) == (value, presets.PAPER)


def test_multi30k_source_needs_no_other_setting():
    cfg = settings.resolve("wmt17", {"DEVICE": "cpu", "SOURCE": "multi30k"}, REPO)
    assert cfg["LOCAL_DIR"] == multi30k_dir()
    assert (cfg["LOCAL_TRAIN"], cfg["LOCAL_VALID"], cfg["LOCAL_TEST"]) == \
        ("train", "val", "test_2016_flickr")
    cfg = settings.resolve("opus100", {"DEVICE": "cpu", "SOURCE": "multi30k"}, REPO)
    assert cfg["LANGS"] == "de fr cs"
    cfg = settings.resolve("opus100", {"DEVICE": "cpu", "SOURCE": "multi30k", "LANGS": "de"}, REPO)
    assert cfg["LANGS"] == "de"


def test_wmt17_defaults_are_the_papers_setting_from_admin_torch():
    cfg, layout, cmd = plan({**GPUS8})
    expected = {"TOKENS_PER_UPDATE": "524288", "LR": "1.5e-3", "ADAM_BETAS": "(0.9, 0.98)",
                "WARMUP": "4000", "WARMUP_INIT_LR": "1e-7", "DROPOUT": "0.4",
                "WEIGHT_DECAY": "0.0001", "LABEL_SMOOTHING": "0.1", "MAX_UPDATE": "100000",
                "FP16_SCALE_WINDOW": "256", "PRECISION": "fp16"}
    assert {name: cfg[name] for name in expected} == expected
    for name in expected:
        if name != "PRECISION":
            assert cfg.sources[name] == "dataset wmt17 [admin-torch]"
    assert option(cmd, "--lr-scheduler") == "inverse_sqrt"
    assert option(cmd, "--warmup-init-lr") == "1e-7" and option(cmd, "--fp16-scale-window") == "256"
    # 8 GPUs x 4,096 tokens x update-freq 16 = 128 x 4,096
    assert layout.tokens_per_update == 128 * 4096
    assert "FAILS with a regular 8 x 4,096-token batch" in DATASETS["wmt17"].preset.about


def test_docs_presets_md_is_the_presets_as_they_are():
    """docs/presets.md is generated:
    python -m deepnet_fairseq.recipes.spec.presets > docs/presets.md"""
    with open(os.path.join(REPO, "docs", "presets.md"), encoding="utf-8") as page:
        assert page.read() == presets.markdown()


def test_only_directories_the_recipes_created_are_deleted(tmp_path):
    mine = workdir.make_dirs(str(tmp_path / "work" / "data"))
    assert workdir.is_ours(mine) and workdir.is_ours(str(tmp_path / "work"))
    assert not workdir.is_ours(str(tmp_path))  # existed before: not marked
    workdir.remove_tree(mine)
    assert not os.path.exists(mine)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "precious.txt").write_text("keep me")
    with pytest.raises(workdir.NotOurs, match="refusing to delete .*theirs"):
        workdir.fresh(str(theirs))
    tmp = workdir.fresh(str(tmp_path / "work" / "out.tmp"))
    with pytest.raises(workdir.NotOurs):
        workdir.publish(tmp, str(theirs))
    assert (theirs / "precious.txt").read_text() == "keep me"
    workdir.publish(tmp, str(tmp_path / "work" / "out"))
    assert os.path.isfile(tmp_path / "work" / "out" / ".done")


# ---- statuses, live logs and signals --------------------------------------------------------

VALID = ("2026-01-01 10:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 6.5 | "
         "nll_loss 3 | num_updates 20\n")


def test_a_signalled_run_is_interrupted_not_failed():
    stopped = runlog.classify(VALID, -15, vocab_size=1024, signal="SIGTERM")
    assert stopped["status"] == "interrupted" and "SIGTERM at update 20" in stopped["reason"]
    assert runlog.classify(VALID, -9, vocab_size=1024)["status"] == "failed"  # SIGKILL: OOM killer
    nan = "FloatingPointError: Minimum loss scale reached (0.0001).\n"
    assert runlog.classify(nan, 1, 1024, signal="SIGTERM")["status"] == "diverged"


def test_a_truncated_checkpoint_last_is_replaced_by_the_newest_complete_one(tmp_path):
    import torch

    for updates in (3, 6):
        torch.save({"updates": updates}, tmp_path / f"checkpoint_1_{updates}.pt")
    whole = (tmp_path / "checkpoint_1_6.pt").read_bytes()
    (tmp_path / "checkpoint_last.pt").write_bytes(whole[: len(whole) // 2])  # copy cut short
    assert "replaced by checkpoint_1_6.pt" in runner.repair_last_checkpoint(str(tmp_path))
    assert torch.load(tmp_path / "checkpoint_last.pt") == {"updates": 6}
    assert runner.repair_last_checkpoint(str(tmp_path)) is None  # complete: left alone
    (tmp_path / "checkpoint_1_6.pt").write_bytes(whole[:100])    # newest one broken too
    (tmp_path / "checkpoint_last.pt").write_bytes(whole[:100])
    runner.repair_last_checkpoint(str(tmp_path))
    assert torch.load(tmp_path / "checkpoint_last.pt") == {"updates": 3}


def _learning_rates(command, updates):
    """The lr of each update as fairseq's own scheduler computes it from COMMAND's options."""
    from fairseq import options
    from fairseq.optim.lr_scheduler.inverse_square_root_schedule import (
        InverseSquareRootLRScheduleConfig, InverseSquareRootSchedule)

    args = options.parse_args_and_arch(options.get_training_parser(),
                                       command[command.index("--user-dir") - 1:])
    cfg = InverseSquareRootLRScheduleConfig(warmup_updates=args.warmup_updates,
                                            warmup_init_lr=args.warmup_init_lr, lr=args.lr)

    from fairseq.optim import FairseqOptimizer

    class Optimizer(FairseqOptimizer):  # what the scheduler touches: set_lr
        def __init__(self):
            pass

        def set_lr(self, lr):
            self.lr = lr

    schedule = InverseSquareRootSchedule(cfg, Optimizer())
    return [schedule.step_update(update) for update in updates]


def test_a_methods_declared_training_settings_reach_its_command():
    """T-Fixup trains without warmup: its lr is the peak from the first update, then decays as
    every other method's (fairseq's own scheduler, fed the command, says so). The user's
    setting wins; other methods keep the dataset's warmup."""
    cfg, _, cmd = plan({"DEVICE": "cpu", "SIZE": "mini", "METHOD": "t_fixup"})
    assert (option(cmd, "--warmup-init-lr"), option(cmd, "--lr")) == ("1e-3", "1e-3")
    assert cfg.sources["WARMUP_INIT_LR"].startswith("method t_fixup")
    lrs = _learning_rates(cmd, [0, 1, 200, 400, 1000])
    assert lrs[:4] == pytest.approx([1e-3] * 4)  # no ramp: the peak from update 0 to WARMUP
    assert lrs[4] == pytest.approx(1e-3 * (400 / 1000) ** 0.5)  # then the others' decay
    _, _, deepnet = plan({"DEVICE": "cpu", "SIZE": "mini", "METHOD": "deepnet"})
    assert _learning_rates(deepnet, [1000]) == pytest.approx([lrs[4]])
    assert _learning_rates(deepnet, [200])[0] < 0.6e-3  # a ramp
    cfg, _, cmd = plan({**GPUS8, "METHOD": "t_fixup", "WARMUP_INIT_LR": "1e-6"})
    assert option(cmd, "--warmup-init-lr") == "1e-6"
    cfg, _, cmd = plan({**GPUS8, "METHOD": "deepnet"})
    assert option(cmd, "--warmup-updates") == "4000" and option(cmd, "--warmup-init-lr") == "1e-7"
    with pytest.raises(SettingError, match="METHOD=t_fixp: unknown method"):
        plan({**GPUS8, "METHOD": "t_fixp"})


def valid_line(update, loss):
    return (f"2026-01-01 10:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | "
            f"loss {loss} | nll_loss 1 | num_updates {update}")


def test_divergence_watch_stops_after_patience_validations_past_the_warmup():
    watch = runlog.DivergenceWatch(vocab_size=1024, warmup=100, patience=3)  # uniform: 10 bits
    # during the warmup a uniform-guess loss is allowed; a good validation resets the count
    for update, loss in ((50, 11.0), (100, 10.5), (150, 10.2), (200, 10.1), (250, 9.9),
                         (300, 10.0), (350, 12.0)):
        assert not watch.feed(valid_line(update, loss)), update
    assert watch.feed(valid_line(400, "nan"))  # NaN is no better than a guess either
    assert watch.stopped["status"] == "diverged" and watch.stopped["num_updates"] == 400
    assert "stopped at update 400" in watch.stopped["reason"]
    assert "STOP_DIVERGED=3; 0 trains on" in watch.stopped["reason"]
    never = runlog.DivergenceWatch(vocab_size=1024, warmup=0, patience=0)
    assert not any(never.feed(valid_line(u, 20.0)) for u in range(1, 20))


def test_a_run_that_stays_at_a_uniform_guess_is_stopped_early():
    """A child that keeps logging hopeless validations is stopped at the third one, long
    before it would end by itself, and the stop is not taken for a scheduler's signal."""
    lines = "".join(f"print({valid_line(u, 13.0)!r}, flush=True); time.sleep(0.2); "
                    for u in (100, 200, 300, 400))
    child = [sys.executable, "-c", f"import time; {lines}time.sleep(60)"]
    watch = runlog.DivergenceWatch(vocab_size=1024, warmup=50, patience=3)
    start = time.time()
    code, signum = processes.run_forwarding(child, dict(os.environ), [], watch.feed)
    assert time.time() - start < 20 and code == -signal.SIGTERM and signum is None
    assert watch.stopped["num_updates"] == 300


def gain_line(update, gain, loss=6.0):
    return valid_line(update, loss).replace("| nll_loss 1 |",
                                            f"| nll_loss 1 | source_gain {gain} |")


def test_source_blind_watch_stops_at_the_first_validation_from_its_update_below_the_bar():
    watch = runlog.SourceBlindWatch(after=3000)
    # before its update a blind validation is allowed; a line without a gain is not judged
    for line in (gain_line(1000, 0.0), gain_line(2800, 0.02), valid_line(3000, 6.0),
                 gain_line(3000, 0.1), gain_line(3200, 1.7)):
        assert not watch.feed(line), line
    assert watch.feed(gain_line(3400, 0.099, loss=5.5))
    assert watch.stopped["status"] == "source-blind" and watch.stopped["num_updates"] == 3400
    assert watch.stopped["last_source_gain"] == 0.099 and watch.stopped["last_valid_loss"] == 5.5
    assert "stopped at update 3400: source gain 0.099 bits < 0.1" in watch.stopped["reason"]
    assert "STOP_SOURCE_BLIND=3000, 0 trains on" in watch.stopped["reason"]
    assert watch.feed(gain_line(3600, 2.0))  # stopped stays stopped
    # a gain that is not a number is no reading of the source either
    assert runlog.SourceBlindWatch(after=1).feed(gain_line(5, "nan"))
    never = runlog.SourceBlindWatch(after=0)
    assert not any(never.feed(gain_line(u, 0.0)) for u in range(1, 20))


def test_a_source_blind_stop_has_its_own_exit_status_and_finishes_the_run():
    assert processes.EXIT["source-blind"] not in {
        code for name, code in processes.EXIT.items() if name != "source-blind"}
    assert processes.ENDING[processes.EXIT["source-blind"]] == "source-blind"
    assert set(processes.FINISHED) == {"ok", "diverged", "source-blind"}


@pytest.mark.parametrize("given,refused", [
    ({"STOP_SOURCE_BLIND": "10"}, "only SOURCE_GAIN=1 logs"),
    ({"STOP_SOURCE_BLIND": "21", "SOURCE_GAIN": "1"}, "beyond MAX_UPDATE=20"),
    ({"STOP_SOURCE_BLIND": "20", "SOURCE_GAIN": "1"}, None),
    ({"STOP_SOURCE_BLIND": "0"}, None)])
def test_stop_source_blind_needs_the_gain_and_an_update_the_run_reaches(given, refused):
    env = {"DEVICE": "cpu", "SIZE": "smoke", **given}  # smoke: MAX_UPDATE=20
    if refused is None:
        assert settings.resolve("wmt17", env, REPO).run.stop_source_blind == int(
            given["STOP_SOURCE_BLIND"])
    else:
        with pytest.raises(SettingError, match=refused):
            settings.resolve("wmt17", env, REPO)


def test_stop_diverged_is_a_setting_with_a_default():
    cfg = settings.resolve("wmt17", {"DEVICE": "cpu", "SIZE": "smoke"}, REPO)
    assert cfg["STOP_DIVERGED"] == "3"
    off = settings.resolve("wmt17", {"DEVICE": "cpu", "SIZE": "smoke", "STOP_DIVERGED": "0"},
                           REPO)
    assert off.run.stop_diverged == 0


@pytest.mark.parametrize("env, adds", [
    ({"METHOD": "deepnet_ln"}, True),               # the GPU default, fp16: flattened otherwise
    ({"METHOD": "deepnet_adam_ln", "PRECISION": "bf16"}, True),
    ({"METHOD": "deepnet_ln", "PRECISION": "fp32"}, False),   # fp32 steps each tensor anyway
    ({"METHOD": "deepnet_ln", "LAYERS": "500", "GPU_MEMORY_GB": "80"}, False),  # ZeRO adds it
    ({"METHOD": "deepnet"}, False),                 # no multiplier: fairseq's flat fp16 stays
])
def test_the_layernorm_lr_multiplier_runs_under_the_gpu_defaults(env, adds):
    """The recipes choose the mode in which the multiplier works, and fairseq's
    own argument parser (which runs the plugin's check) accepts the command they build."""
    from fairseq import options

    cfg, layout, command = plan({**GPUS8, **env})
    assert command.count("--fp16-no-flatten-grads") <= 1
    added = "--fp16-no-flatten-grads" in command and "--zero-sharding" not in command
    assert added == adds
    args = command[command.index(paths(cfg).bin):]
    options.parse_args_and_arch(options.get_training_parser(), args)  # raises if refused


def test_one_tiny_size():
    """The tiny width is defined once (methods.TINY_SIZE): the recipes' tiny model, the
    quickstart's smoke size and the diagnostics' and GPU check's width options all read it."""
    from deepnet_fairseq import methods

    tiny = methods.TINY_SIZE
    width = (tiny["encoder_embed_dim"], tiny["encoder_ffn_embed_dim"],
             tiny["encoder_attention_heads"])
    assert width == (64, 128, 2)  # the paper's Figure 5 models, written out by hand
    cfg = settings.resolve("wmt17", {"DEVICE": "cpu", "SIZE": "smoke"}, REPO)
    assert (cfg.model.embed_dim, cfg.model.ffn_dim, cfg.model.heads) == width
    smoke = quickstart.quickstart_settings({"SIZE": "smoke"}, REPO)
    assert (smoke.model.embed_dim, smoke.model.ffn_dim, smoke.model.heads) == width
    args = methods.tiny_width_args()
    assert [int(args[args.index(flag) + 1]) for flag in (
        "--encoder-embed-dim", "--encoder-ffn-embed-dim", "--encoder-attention-heads")] == \
        list(width)


@pytest.mark.parametrize("name,value", [("SIZE", "full"), ("SIZE", "mini"), ("DEVICE", "tpu")])
@pytest.mark.parametrize("prefix", ["", settings.PREFIX])
def test_the_quickstart_checks_its_size_under_every_name_the_resolver_reads(name, value, prefix):
    """DEEPNET_SIZE=full wins over SIZE in the resolver, so the quickstart's check reads it
    too (settings.from_env): a size or device it does not have is refused however it is
    spelt, before anything runs."""
    with pytest.raises(SettingError, match=f"{name}={value}"):
        quickstart.quickstart_settings({f"{prefix}{name}": value}, REPO)


@pytest.mark.parametrize("prefix", ["", settings.PREFIX])
def test_the_quickstart_runs_the_size_it_checked(prefix):
    cfg = quickstart.quickstart_settings({f"{prefix}SIZE": "smoke", "DEEPNET_DEVICE": "cpu",
                                          "SIZE": "quickstart"}, REPO)
    expected = "smoke" if prefix else "quickstart"  # DEEPNET_SIZE wins, as in the resolver
    assert cfg["SIZE"] == expected and cfg["DEVICE"] == "cpu"


def test_the_quickstart_defaults_sit_below_the_environment():
    """Its own depth and work directory are defaults: the environment's win, with a note."""
    cfg = quickstart.quickstart_settings({"DEEPNET_LAYERS": "2"}, REPO)
    assert (cfg.run.enc_layers, cfg.run.method) == (2, "deepnet")
    assert cfg.where.work == os.path.join(REPO, "runs", "quickstart")
    assert any(note.startswith("LAYERS: the environment") for note in cfg.notes)
    assert cfg.sources["SIZE"] == "the quickstart (quickstart on cpu)"


def test_a_slurm_gpu_count_in_other_digits_is_not_read_as_a_number():
    assert count_gpus({"SLURM_GPUS_ON_NODE": "\u00b2"}, lambda: 1) == (1, "torch.cuda.device_count()")


def test_runs_differing_only_in_their_seed_share_a_table_row():
    """RUNS="deepnet:6:6:SEED=2 ...": each run its own directory, but one label (the report
    averages the seeds of a label and depth); other settings stay variants of the method."""
    assert settings.run_name("deepnet", "6", "6", ["SEED=2"]) == "deepnet-6L-6L+SEED=2"
    assert settings.run_label("deepnet", ["SEED=2"]) == "deepnet"
    assert settings.run_label("post_ln", ["LR=1e-3", "SEED=3"]) == "post_ln (LR=1e-3)"
    assert settings.run_label("post_ln", []) == "post_ln"


@pytest.mark.parametrize("method", sorted(METHODS))
def test_methods_that_pass_state_between_layers_are_never_checkpointed(method):
    """Their layer rules refuse --checkpoint-activations (tests/unit/test_methods.py checks the
    declarations against them): at a depth where auto turns it on for the others it stays off,
    and CHECKPOINT_ACTIVATIONS=1 is refused before anything runs, naming the method's state."""
    _, deep, cmd = plan({"CUDA_VISIBLE_DEVICES": "0", "LAYERS": "100", "METHOD": method})
    state = METHODS[method].stack_state
    assert deep.checkpoint_activations is not bool(state)
    assert ("--checkpoint-activations" in cmd) is not bool(state)
    forced = {"CUDA_VISIBLE_DEVICES": "0", "LAYERS": "6", "METHOD": method,
              "CHECKPOINT_ACTIVATIONS": "1"}
    if not state:
        assert plan(forced)[1].checkpoint_activations
        return
    with pytest.raises(SettingError, match=f"CHECKPOINT_ACTIVATIONS=1 cannot be used with "
                                           f"METHOD={method}: {state}"):
        plan(forced)


@pytest.mark.parametrize("kind", ["user's own", "link", "file"])
def test_a_sweep_writes_its_table_only_into_a_results_directory_it_made(tmp_path, kind):
    results = tmp_path / "results"
    where = paths(settings.resolve("wmt17", {"DEEPNET_WORK": str(tmp_path)}, REPO))
    if kind == "user's own":
        results.mkdir()
        (results / "table.md").write_text("mine")
    elif kind == "link":
        (tmp_path / "elsewhere").mkdir()
        results.symlink_to(tmp_path / "elsewhere")
    else:
        results.write_text("mine")
    with pytest.raises(SettingError, match="the recipes did not create it"):
        results_dir("wmt17", where)
    assert kind != "user's own" or (results / "table.md").read_text() == "mine"
    fresh = tmp_path / "new" / "results"
    elsewhere = dataclasses.replace(where, results=str(fresh))
    assert results_dir("wmt17", elsewhere) == str(fresh)
    assert workdir.is_ours(str(fresh))
    assert results_dir("wmt17", elsewhere) == str(fresh)  # again


@pytest.mark.parametrize("env,cores,memory_gb,expected", [
    ({"DEVICE": "cpu", "SIZE": "smoke", "NPROC": "3"}, 2, 24, "NPROC=3 CPU processes, but this "
                                                             "machine gives the run 2 core"),
    ({"DEVICE": "cpu", "SIZE": "smoke", "NPROC": "2"}, 2, 24, None),
    # 100,000 layers per side at 64 wide: about 10 G parameters, 150 GB before any activation
    ({"DEVICE": "cpu", "SIZE": "mini", "LAYERS": "100000"}, 2, 24, "more than this machine's 24"),
    ({"DEVICE": "cpu", "SIZE": "mini", "LAYERS": "500"}, 2, 24, None),  # the 1,000-layer run
    # activations: 50L-50L at 64 wide is 5M parameters, but 10M tokens a step need ~520 GB
    ({"DEVICE": "cpu", "SIZE": "mini", "LAYERS": "50", "CHECKPOINT_ACTIVATIONS": "0",
      "MAX_TOKENS": "10000000", "TOKENS_PER_UPDATE": "10000000"}, 2, 24, "MAX_TOKENS=10000000"),
    ({"DEVICE": "cpu", "SIZE": "mini", "LAYERS": "50", "CHECKPOINT_ACTIVATIONS": "0"}, 2, 24,
     None),
    ({"CUDA_VISIBLE_DEVICES": "0", "LAYERS": "100000"}, 2, 24, None),  # the memory plan's
])
def test_a_cpu_run_must_fit_the_machine(env, cores, memory_gb, expected):
    """Checked by train before a run (not by a dry run, which may plan another machine)."""
    cfg, layout, _ = plan(env)
    problem = machine_problem(cfg, layout, cores, memory_gb)
    if expected is None:
        assert problem is None
    else:
        assert expected in problem


MULTILINGUAL = {"DEVICE": "cpu", "SIZE": "mini"}  # 64 wide, 1,024 tokens: the study's cells


@pytest.mark.parametrize("env, ram_gib, on", [
    # 100L-100L: 12.2M parameters, 16 bytes each resident (0.18 GiB) plus the activations of
    # 1,024 tokens through 200 layers: about 1 GiB, far below 90% of 24 GiB
    ({**MULTILINGUAL, "LAYERS": "100"}, 24.0, False),
    ({**MULTILINGUAL, "LAYERS": "500"}, 24.0, False),  # the 1,000-layer cell: about 5 GiB
    ({**MULTILINGUAL, "LAYERS": "500"}, 4.0, True),
    ({**MULTILINGUAL, "LAYERS": "100"}, 0.5, True),
    ({**MULTILINGUAL, "LAYERS": "100", "NPROC": "2"}, 2.0, True),  # two processes, twice
    ({**MULTILINGUAL, "LAYERS": "100", "NPROC": "2"}, 4.0, False),
    ({**MULTILINGUAL, "LAYERS": "100", "CHECKPOINT_ACTIVATIONS": "1"}, 24.0, True),  # kept
    ({**MULTILINGUAL, "LAYERS": "500", "CHECKPOINT_ACTIVATIONS": "0"}, 4.0, False),  # kept
    ({**MULTILINGUAL, "LAYERS": "500", "METHOD": "dlcl"}, 4.0, False),  # refused by its layers
])
def test_cpu_auto_checkpoints_activations_only_when_the_run_would_not_fit(env, ram_gib, on):
    """On CPU, auto recomputes activations (a third to a half more time a step at 100L-100L) only where
    the run does not fit 90% of the machine's memory without it; 0 and 1 are kept, and so is
    a method whose layers cannot have it. The estimate is above the resident bytes (a hand
    count: 16 a parameter: fp32 weights, gradients, Adam's two moments)."""
    cfg, layout, cmd = plan(env, "opus100", ram_gib=ram_gib)
    assert layout.checkpoint_activations is on and ("--checkpoint-activations" in cmd) is on
    auto = env.get("CHECKPOINT_ACTIVATIONS", "auto") == "auto" and "METHOD" not in env
    assert bool(layout.cpu_memory) is auto
    if auto:
        need = cpu_need_gib(cfg, layout.nproc, "fp32", 1024, checkpointing=False)
        params = parameter_count(cfg.run.enc_layers, cfg.run.dec_layers, 64, 256,
                                 cfg.data.vocab + 4)
        assert CPU_RESIDENT_BYTES * params * layout.nproc / 2 ** 30 < need
        assert (need > 0.9 * ram_gib) is on
        assert f"{0.9 * ram_gib:,.1f} of this machine's {ram_gib:,.1f} GiB" in layout.summary()


def test_the_cpu_rule_flips_where_the_estimate_meets_90_percent_of_the_memory():
    cfg, _, _ = plan({**MULTILINGUAL, "LAYERS": "100"}, "opus100")
    need = cpu_need_gib(cfg, 1, "fp32", 1024, checkpointing=False)
    assert 0.5 < need < 2.0  # 100L-100L at 64 wide and 1,024 tokens: about 1 GiB
    for ram, on in ((need / 0.9 * 0.99, True), (need / 0.9 * 1.01, False)):
        assert plan({**MULTILINGUAL, "LAYERS": "100"}, "opus100", ram_gib=ram)[1] \
            .checkpoint_activations is on


def test_the_resident_bytes_are_a_lower_bound_of_the_cpu_estimate():
    """machine_problem counts 16 bytes a parameter, memory.estimate's resident part on CPU in
    fp32 (weights, gradients, Adam's m and v), so it refuses nothing the estimate admits."""
    from deepnet_fairseq.recipes.run import memory

    params = memory.parameter_count(50, 50, 64, 128, 8004)
    estimate = memory.estimate(params, 100, 64, 8004, 1024, "fp32", device="cpu")
    resident = sum(estimate.components[k] for k in ("weights", "gradients", "Adam m and v"))
    assert resident == CPU_RESIDENT_BYTES * params <= estimate.peak


def test_resolved_settings_are_frozen():
    """Resolved once: a step cannot change a setting behind the records' back."""
    cfg = settings.resolve("wmt17", {"DEVICE": "cpu"}, REPO)
    with pytest.raises(TypeError, match="frozen"):
        cfg.set("LR", "1", "a step")
    with pytest.raises(TypeError):
        cfg.values["LR"] = "1"
    assert cfg["LR"] == "1.5e-3"


def test_lr_base_layers_moves_the_peak_rate_by_docs_methods_rule():
    """LR_BASE_LAYERS=6: the rate tuned at 6L-6L, moved to each run's depth as docs/methods.md
    says for plain DeepNet, (6 / L)^(2/3); L the mean layers per side. Off (0), LR itself."""
    env = {"DEVICE": "cpu", "SIZE": "mini", "LR": "4e-3", "LR_BASE_LAYERS": "6"}
    # 4e-3 x (6/50)^0.667 = 4e-3 x exp(0.667 x ln 0.12) = 4e-3 x 0.24312, worked by hand
    _, _, cmd = plan({**env, "LAYERS": "50"})
    assert float(option(cmd, "--lr")) == pytest.approx(9.7246e-4, rel=1e-4)
    _, _, cmd = plan({**env, "LAYERS": "6"})
    assert float(option(cmd, "--lr")) == pytest.approx(4e-3)
    _, _, cmd = plan({**env, "ENC_LAYERS": "100", "DEC_LAYERS": "20"})  # L = 60: (1/10)^0.667
    assert float(option(cmd, "--lr")) == pytest.approx(4e-3 * 0.2153, rel=1e-3)
    _, _, cmd = plan({**env, "LAYERS": "50", "LR_DEPTH_POWER": "0.5"})  # sqrt(0.12) = 0.34641
    assert float(option(cmd, "--lr")) == pytest.approx(4e-3 * 0.34641, rel=1e-4)
    _, _, cmd = plan({"DEVICE": "cpu", "SIZE": "mini", "LR": "4e-3", "LAYERS": "50"})
    assert option(cmd, "--lr") == "4e-3"
    assert "--layers-lr-multiplier" not in cmd


def test_lr_depth_scope_layers_moves_the_layers_rate_alone():
    """LR_DEPTH_SCOPE=layers: the same factor, on the layers' parameters alone
    (--layers-lr-multiplier); --lr stays LR for the embeddings and output projection."""
    env = {"DEVICE": "cpu", "SIZE": "mini", "LR": "4e-3", "LR_BASE_LAYERS": "6",
           "LR_DEPTH_SCOPE": "layers", "LAYERS": "50"}
    _, _, cmd = plan(env)
    assert option(cmd, "--lr") == "4e-3"
    assert float(option(cmd, "--layers-lr-multiplier")) == pytest.approx(0.24312, rel=1e-4)
    _, _, cmd = plan({**env, "LR_DEPTH_SCOPE": "all"})
    assert "--layers-lr-multiplier" not in cmd
    with pytest.raises(settings.SettingError, match="LR_DEPTH_SCOPE"):
        plan({**env, "LR_DEPTH_SCOPE": "embeddings"})


@pytest.mark.parametrize("dataset", ["wmt17", "opus100"])
def test_every_run_writes_tensorboard_events_inside_its_own_directory(tmp_path, dataset):
    """fairseq's TensorBoard events go to RUN/tensorboard (made by the runner like its
    checkpoints), never outside the run, whatever the dataset."""
    cfg, _, command = plan({"DEEPNET_WORK": str(tmp_path), "DEVICE": "cpu",
                            "RUN_NAME": "r"}, dataset)
    assert option(command, "--tensorboard-logdir") == str(tmp_path / "runs" / "r" /
                                                          "tensorboard")
