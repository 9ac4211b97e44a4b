"""Prepare's stage figures (recipes/data/prepare.py ``Stages``): the peak memory is of this
process and of the children it started, not of what the shell ran before it exec'd python (the
scripts ``exec python -m ...``; the kernel keeps the children's maximum across exec)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from support import REPO

ALLOCATE = "python -c 'x = bytearray(b\"1\" * (400 * 2 ** 20))'"  # a 400 MB child
STAGES = textwrap.dedent("""
    import json, subprocess, sys
    from deepnet_fairseq.recipes.data.prepare import Stages

    said = []
    stages = Stages(sys.argv[1], said.append)
    with stages("own"):
        pass
    with stages("child"):  # a child of this process, larger than the shell's was
        subprocess.run([sys.executable, "-c", "x = bytearray(b'1' * (600 * 2 ** 20))"],
                       check=True)
    print(json.dumps(said))
""")


def test_the_shells_earlier_children_are_not_counted_but_ours_are(tmp_path):
    script = tmp_path / "stages.py"
    script.write_text(STAGES)
    stages_json = tmp_path / "stages.json"
    # as scripts/*.sh do: the shell runs something big, then execs python
    proc = subprocess.run(["bash", "-c", f"{ALLOCATE}; exec {sys.executable} {script} "
                                         f"{stages_json}"],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": REPO})  # this checkout's package
    own, child = json.loads(proc.stdout.splitlines()[-1])
    own_mb = int(own.split("peak memory so far ")[1].split(" MB")[0].replace(",", ""))
    assert own_mb < 300 and own.endswith("MB (this process)"), own
    child_mb = int(child.split("peak memory so far ")[1].split(" MB")[0].replace(",", ""))
    assert child_mb >= 600 and child.endswith("MB (its largest child)"), child
    figures = json.loads(stages_json.read_text())
    assert figures["own"]["peak_rss_mb"] == own_mb and figures["child"]["peak_rss_mb"] == child_mb


def test_damaged_stage_figures_are_one_line_naming_the_file(tmp_path):
    """prepare reads its earlier stages' figures back: a truncated stages.json (a full disk, a
    kill mid-write by another program) is a RecordError naming it, not a JSON traceback."""
    from deepnet_fairseq.recipes.data.prepare import Stages
    from deepnet_fairseq.storage.fileio import RecordError

    damaged = tmp_path / "stages.json"
    for text in ('{"clean": {"seconds": 1', "[1, 2]"):
        damaged.write_text(text)
        with pytest.raises(RecordError, match=str(damaged)):
            Stages(str(damaged), print)
