"""bash scripts/DATASET/STEP.sh --help: the script's header, then every setting (generated from
the declarations in recipes/spec/settings.py, so a setting such as GPU_MEMORY_GB cannot be left
out of it)."""

import os
import subprocess

from deepnet_fairseq.recipes.spec.settings import SETTINGS
from support import REPO


def test_a_recipe_script_help_lists_every_setting():
    script = os.path.join(REPO, "scripts", "opus100", "train.sh")
    proc = subprocess.run(["bash", script, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Train one many-to-many OPUS-100 model")  # the header first
    assert "GPU_MEMORY_GB" in proc.stdout and "memory plan" in proc.stdout
    names = [name for name, s in SETTINGS.items() if not s.prefix_only]
    assert [name for name in names if f"   {name} " not in proc.stdout] == []
