"""``deepnet``, the one command (deepnet_fairseq/front.py): its help and every command's
help answer without importing torch or fairseq, a command that starts work shows its help when
given nothing, each command is the tool it names, and ``deepnet translate`` gives the Python API's
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


HEAVY = ("torch", "fairseq", "matplotlib", "sacremoses", "sklearn")

# One interpreter asks for every help: ``deepnet``'s, each command's --help, and each command
# that starts work given nothing; the heavy packages each call imports are recorded against it.
EVERY_HELP = r"""
import contextlib, io, json, sys
from deepnet_fairseq import front

heavy = lambda: {m.split(".")[0] for m in sys.modules if m.split(".")[0] in HEAVY}
calls = [["--help"]] + [[name, "--help"] for name in front.COMMANDS]
calls += [[name] for name, command in front.COMMANDS.items() if command.bare_is_help]
results = {}
for argv in calls:
    before, out = heavy(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = front.main(argv)
        except SystemExit as exit:
            code = exit.code
    results[" ".join(argv)] = {"code": code or 0, "usage": out.getvalue().startswith("usage:"),
                               "imported": sorted(heavy() - before)}
print(json.dumps({"results": results, "help": front.usage()}))
"""


def test_every_help_answers_without_torch_or_fairseq_and_starts_nothing(tmp_path):
    """Torch and fairseq take seconds to import: no help pays for them (issue 59: every --help
    under a second). A command that starts work shows its help when given nothing."""
    proc = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n" + EVERY_HELP],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600,
                          env={**os.environ, "DEEPNET_WORK": str(tmp_path / "work")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    results = report["results"]
    bare_is_help = sum(command.bare_is_help for command in front.COMMANDS.values())
    assert len(results) == 1 + len(front.COMMANDS) + bare_is_help
    failed = {call: r for call, r in results.items() if r["code"] != 0 or not r["usage"]}
    assert failed == {}
    imported = {call: r["imported"] for call, r in results.items() if r["imported"]}
    assert imported == {}, "import these where the command runs, not where its parser is built"
    for name in front.COMMANDS:
        assert any(line.startswith(f"  {name} ") for line in report["help"].splitlines()), name
    assert os.listdir(tmp_path) == []  # nothing started, nothing written
    bare = deepnet()
    assert bare.returncode == 0 and bare.stdout.startswith("usage: deepnet COMMAND")


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
