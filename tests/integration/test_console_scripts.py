"""The plugin's console scripts and its loading by fairseq in a fresh process: what a user's
shell sees."""

import subprocess
import sys

import pytest

from deepnet_fairseq import methods
from support import REPO, USER_DIR, run


def test_pure_modules_import_without_torch_or_fairseq():
    code = ("import sys, deepnet_fairseq.constants, deepnet_fairseq.methods, "
            "deepnet_fairseq.recipes.spec.settings, deepnet_fairseq.recipes.reporting.paper; "
            "print(sorted(m for m in ('torch', 'fairseq') if m in sys.modules))")
    out = run([sys.executable, "-c", code]).stdout
    assert out.strip() == "[]"


def test_planning_a_run_of_any_method_imports_neither_torch_nor_fairseq():
    """The recipes' planning (layout, activation checkpointing, memory plan, commands) reads the
    method's declaration, not its layers: torch comes in only with a machine probe (GPUs, their
    memory: set here) and fairseq with the TRAIN_ARGS check (no TRAIN_ARGS here)."""
    code = """
import sys
from deepnet_fairseq.methods import METHODS
from deepnet_fairseq.recipes.run.commands import (evaluate_command, method_args, task_args,
                                                 train_command)
from deepnet_fairseq.recipes.run.layout import plan_layout
from deepnet_fairseq.recipes.spec.settings import SettingError, resolve
refused = []
for name in METHODS:
    for forced in ("auto", "1"):
        env = {"METHOD": name, "LAYERS": "100", "DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": "0",
               "GPU_MEMORY_GB": "80", "CHECKPOINT_ACTIVATIONS": forced, "DEEPNET_WORK": "w"}
        cfg = resolve("wmt17", env, sys.argv[1], lambda: 0)
        try:
            layout = plan_layout(cfg, env)
        except SettingError:
            refused.append(name)
            continue
        train_command(cfg, layout, method_args(cfg), task_args(cfg, True))
        evaluate_command(cfg, dry_run=True)
print(sorted(refused), sorted(m for m in ('torch', 'fairseq') if m in sys.modules))
"""
    out = run([sys.executable, "-c", code, REPO]).stdout
    # refused: CHECKPOINT_ACTIVATIONS=1 with the methods whose layers pass state on (that the
    # declarations say which: tests/unit/test_methods.py, against the layer rules)
    refused = sorted(name for name, m in methods.METHODS.items() if m.stack_state)
    assert refused and out.strip() == f"{refused} []"


@pytest.mark.parametrize("how", ["user-dir", "register"])
def test_loading_the_plugin_imports_neither_recipes_nor_diagnostics(how):
    load = ("from fairseq import utils; from argparse import Namespace; "
            f"utils.import_user_module(Namespace(user_dir={USER_DIR!r}))"
            if how == "user-dir" else "import fairseq, deepnet_fairseq; deepnet_fairseq.register()")
    probe = (f"{load}\nimport sys\n"
             "print(sorted(m for m in sys.modules if m.startswith('deepnet_fairseq')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout
    loaded = eval(out.strip().splitlines()[-1])
    assert "deepnet_fairseq.models" in loaded and "deepnet_fairseq.tasks.monitored" in loaded
    assert not [m for m in loaded if m.split(".")[1:2] in (["recipes"], ["diagnostics"])], loaded


def test_console_script_is_installed():
    assert "deepnet-model-update" in run(["deepnet-model-update", "--help"]).stdout


def test_the_lift_changes_exactly_the_two_cuda_calls():
    """In a process with --cpu --fp16 and no CUDA: current_device() is None (a CPU tensor's
    device index) and Tensor.cuda() is the identity; every other torch.cuda call still fails."""
    probe = ("import sys, torch; from deepnet_fairseq import fairseq_train_compat as c\n"
             "print(c.install(sys.argv[1:]))\n"
             "t = torch.ones(2)\n"
             "for call in (lambda: repr(torch.cuda.current_device()), lambda: t.cuda() is t,\n"
             "             lambda: torch.cuda.synchronize()):\n"
             "    try:\n        print(call())\n"
             "    except Exception as e:\n        print(type(e).__name__)\n")
    run = [sys.executable, "-c", probe]
    lifted = subprocess.run(run + ["--cpu", "--fp16"], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    # a CPU-only torch fails a CUDA call with AssertionError ("not compiled with CUDA"), a CUDA
    # build on a machine without a GPU with RuntimeError (measured on 3.12 and 3.13's wheels)
    fails = {"AssertionError", "RuntimeError"}
    assert lifted[:3] == ["['fp16-on-cpu']", "None", "True"] and lifted[3] in fails, lifted
    plain = subprocess.run(run + ["--cpu"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert plain[0] == "[]" and set(plain[1:]) <= fails and len(plain) == 4, plain


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
