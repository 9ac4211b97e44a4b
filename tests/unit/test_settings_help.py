"""The recipes' --help lists every setting, generated from its declaration (settings.SETTINGS):
a setting the recipes read (GPU_MEMORY_GB, which a dry run needs on a machine without a GPU)
cannot be missing from it."""

import pytest

from deepnet_fairseq.recipes import __main__ as recipes_cli
from deepnet_fairseq.recipes.spec.settings import PREFIX, SETTINGS, help_text


def test_every_setting_is_in_the_help_with_its_default():
    text = help_text()
    for name, setting in SETTINGS.items():
        shown = f"{PREFIX}{name}" if setting.prefix_only else name
        assert f"   {shown} " in text, name
    assert "[29500]" in text  # MASTER_PORT's default
    gpu = text[text.index("GPU_MEMORY_GB"):].split("\n   ")[0]
    assert "memory plan" in " ".join(gpu.split())
    assert max(map(len, text.splitlines())) <= 100


def test_the_recipes_help_lists_the_settings(capsys):
    with pytest.raises(SystemExit) as exit_:
        recipes_cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "GPU_MEMORY_GB" in out and "CHECKPOINT_ACTIVATIONS_FROM" in out
