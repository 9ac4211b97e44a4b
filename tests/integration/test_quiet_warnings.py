"""Third-party warnings a user cannot act on are silenced where they arise, and nothing else:
hydra's (fairseq 0.12 composes its config through hydra 1.0's API) once fairseq has loaded the
plugin, matplotlib's DEBUG set-up lines in the plots (fairseq sets the root logger to DEBUG)."""

import os
import subprocess
import sys
import textwrap

from support import REPO, USER_DIR

FAIRSEQ_CONFIG = textwrap.dedent(f"""
    import sys, warnings
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    sys.argv = ["fairseq-train", "data", "--user-dir", {USER_DIR!r}, "--task", "translation",
                "--arch", "deepnet_transformer", "--cpu", "--optimizer", "adam", "--lr", "1e-3"]
    args = options.parse_args_and_arch(options.get_training_parser())  # loads the plugin
    convert_namespace_to_omegaconf(args)  # where hydra warns
    warnings.warn("a warning of someone else", UserWarning)
    print("composed")
""")


def python(code, env=None):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})})


def test_fairseq_composes_its_config_without_hydras_warnings_once_the_plugin_is_loaded():
    proc = python(FAIRSEQ_CONFIG, {"PYTHONWARNINGS": ""})
    assert proc.returncode == 0 and "composed" in proc.stdout, proc.stderr[-3000:]
    for hydra_says in ("no longer experimental", "version_base", "@package _group_",
                       "ConfigStore schema", "strict flag"):
        assert hydra_says not in proc.stderr, proc.stderr
    assert "a warning of someone else" in proc.stderr  # other warnings are left alone


def test_plot_monitors_prints_no_matplotlib_debug_lines(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join(
        '{"epoch": 1, "loss": "9.1", "num_updates": "%d", "mon_grad.enc.0": "0.5", '
        '"mon_grad.dec.0": "0.4", "mon_lnin.enc.0": "9", "mon_lnin.dec.0": "9", '
        '"mon_upd.enc.0": "0.01", "mon_upd.dec.0": "0.01"}\n' % update for update in (2, 4)))
    proc = subprocess.run(["deepnet-plot-monitors", str(log), "--output",
                           str(tmp_path / "mon.png")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "DEBUG" not in proc.stderr and "DEBUG" not in proc.stdout
    assert (tmp_path / "mon.png").read_bytes()[:4] == b"\x89PNG"


def test_importing_fairseq_after_the_plugin_leaves_the_root_logger_as_it_was():
    """fairseq's import calls logging.basicConfig(level=DEBUG) (deepnet_fairseq's
    _KeepTheRootLogger): after the plugin, the root logger keeps its level and handlers."""
    proc = python("import logging, deepnet_fairseq, fairseq\n"
                  "deepnet_fairseq.register()\n"
                  "root = logging.getLogger()\n"
                  "print(logging.getLevelName(root.level), len(root.handlers))\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["WARNING", "0"]
    # and the check can tell: fairseq alone still configures it
    alone = python("import logging, fairseq\nroot = logging.getLogger()\n"
                   "print(logging.getLevelName(root.level), len(root.handlers))\n")
    assert alone.stdout.split() == ["DEBUG", "1"], alone.stderr[-3000:]


def test_translating_from_python_prints_fairseqs_lines_only_when_asked(trained_tiny):
    marker = "--- verbose from here ---"
    proc = python("import sys, deepnet_fairseq\n"
                  f"print(deepnet_fairseq.load({str(trained_tiny)!r}, pieces=True)"
                  ".translate('w1 w2 w3'))\n"
                  f"print({marker!r}, file=sys.stderr, flush=True)\n"
                  f"print(deepnet_fairseq.load({str(trained_tiny)!r}, pieces=True, verbose=True)"
                  ".translate('w1 w2 w3'))\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    quiet, _, verbose = proc.stderr.partition(marker)
    assert "INFO" not in quiet and "DEBUG" not in quiet, quiet
    assert "| INFO | fairseq" in verbose, verbose
    first, second = proc.stdout.splitlines()
    assert first == second  # the same translation either way
