"""``deepnet``, the one command (deepnet_fairseq/front.py): its help lists every command
without importing torch or fairseq, a command that starts work shows its help when given
nothing, each command is the tool it names, and ``deepnet translate`` gives the Python API's
translations of a file, line for line."""

import json
import os
import subprocess
import sys

from deepnet_fairseq import front
from support import REPO


def deepnet(*argv, stdin=None, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "deepnet_fairseq", *map(str, argv)],
                          input=stdin, capture_output=True, text=True, cwd=cwd or REPO,
                          env={**os.environ, **(env or {})}, timeout=600)


def test_the_help_lists_every_command_and_imports_nothing_heavy():
    proc = subprocess.run([sys.executable, "-c",
                           "import json, sys\nfrom deepnet_fairseq import front\n"
                           "front.main(['--help'])\n"
                           "print(json.dumps(sorted(m for m in sys.modules "
                           "if m.split('.')[0] in ('torch', 'fairseq'))))"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr
    *help_lines, imported = proc.stdout.splitlines()
    assert json.loads(imported) == []
    for name in front.COMMANDS:
        assert any(line.startswith(f"  {name} ") for line in help_lines), name
    bare = deepnet()
    assert bare.returncode == 0 and bare.stdout.startswith("usage: deepnet COMMAND")


def test_a_command_that_starts_work_shows_its_help_when_given_nothing(tmp_path):
    for name, command in front.COMMANDS.items():
        if not command.bare_is_help:
            continue
        proc = deepnet(name, cwd=tmp_path, env={"DEEPNET_WORK": str(tmp_path / "work")})
        assert proc.returncode == 0, (name, proc.stderr[-2000:])
        assert "usage:" in proc.stdout, name
    assert os.listdir(tmp_path) == []  # nothing started, nothing written


def test_each_command_is_the_tool_it_names(tmp_path):
    dry = deepnet("train", "wmt17", "--dry-run", env={"DEEPNET_WORK": str(tmp_path / "w")})
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "fairseq-train" in dry.stdout and "--arch deepnet_transformer" in dry.stdout
    unknown = deepnet("trian")
    assert unknown.returncode == 2 and "no command 'trian'" in unknown.stderr
    user_dir = deepnet("user-dir")
    assert user_dir.stdout.strip() == os.path.join(REPO, "deepnet_fairseq")


def test_translate_gives_the_python_apis_translations_line_for_line(trained_tiny, tmp_path):
    import deepnet_fairseq

    lines = ["w1 w2 w3", "", "w4 w5 w6 w7", "w8 w9", "w1 w1 w2 w2 w3"]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n")
    proc = deepnet("translate", trained_tiny, "--input", source, "--pieces", "--beam", "2",
                   "--batch-size", "2", "--progress-every", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = deepnet_fairseq.load(str(trained_tiny), pieces=True).translate(lines, beam=2)
    assert proc.stdout.split("\n")[:-1] == expected and expected[1] == ""
    assert "deepnet translate: 4 sentences" in proc.stderr  # the progress line
    assert "INFO" not in proc.stderr  # fairseq's lines only with --verbose
    # standard input, a run directory's checkpoint
    piped = deepnet("translate", trained_tiny.parent.parent, "--pieces", "--beam", "2",
                    stdin="w1 w2 w3\n")
    assert piped.returncode == 0 and piped.stdout == expected[0] + "\n", piped.stderr[-2000:]
    missing = deepnet("translate", tmp_path, "--pieces")
    assert missing.returncode == 2 and "a run directory" in missing.stderr
