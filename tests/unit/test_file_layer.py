"""The guarded file layer (storage/fileio.py) and the doors that use it: an output that is one
of the command's inputs is refused by every tool that writes one, before anything is read;
a symbolic link planted in a run directory is never written through."""

import subprocess
import sys

import pytest

from deepnet_fairseq.storage import fileio
from support import REPO

LOG = ("2026 | INFO | train_inner | epoch 001: loss=5, mon_grad.enc.0=0.1, mon_lnin.enc.0=1, "
       "mon_upd.enc.0=0.01, num_updates=1\n")


def run_tool(*argv):
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                          cwd=REPO)


@pytest.mark.parametrize("tool", ["plot-monitors", "plot-monitors-csv", "curves", "source-use"])
def test_every_tool_refuses_to_write_over_its_input(tmp_path, tool):
    log = tmp_path / "train.log"
    log.write_text(LOG)
    run = tmp_path / "run"
    run.mkdir()
    (run / "valid_loss.csv").write_text("num_updates,valid_loss_bits\n10,5.0\n")
    checkpoint = tmp_path / "checkpoint.pt"
    checkpoint.write_bytes(b"not read")
    argv, victim = {
        "plot-monitors": (["deepnet_fairseq.diagnostics.plot_monitors", str(log), "--output",
                           str(log)], log),
        # the CSV goes beside the PNG: train.png writes train.csv, here the log itself
        "plot-monitors-csv": (["deepnet_fairseq.diagnostics.plot_monitors", str(log),
                               "--output", str(tmp_path / "train.log.png")], None),
        "curves": (["deepnet_fairseq.recipes.curves", str(run), "--plot",
                    str(run / "valid_loss.csv")], run / "valid_loss.csv"),
        "source-use": (["deepnet_fairseq.diagnostics.source_use", str(tmp_path),
                        "--checkpoints", str(checkpoint), "--out", str(checkpoint)], checkpoint),
    }[tool]
    if victim is None:  # train.log.png -> train.log.csv: not the log; make the log that name
        log.rename(tmp_path / "train.log.csv")
        argv[1] = str(tmp_path / "train.log.csv")
        victim = tmp_path / "train.log.csv"
    before = victim.read_bytes()
    result = run_tool(*argv)
    assert result.returncode == 2, result.stderr
    assert "refusing to write over it" in result.stderr
    assert victim.read_bytes() == before


def test_a_link_in_a_run_directory_is_not_written_through(tmp_path):
    """train.log, evaluate.log and .lock are opened without following a link: a planted link
    is an error naming it, and the file it points to is untouched."""
    from deepnet_fairseq.recipes.workdir import RunLock

    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    run = tmp_path / "run"
    run.mkdir()
    for name in ("train.log", "evaluate.log", ".lock"):
        (run / name).symlink_to(outside)
    with pytest.raises(OSError, match="a symbolic link"):
        fileio.open_no_follow(str(run / "train.log"), "a")
    with pytest.raises(OSError, match="a symbolic link"):
        fileio.open_no_follow(str(run / "evaluate.log"), "w")
    with pytest.raises(OSError):
        with RunLock(str(run)):
            pass
    assert outside.read_text() == "keep"


def test_an_atomic_output_replaces_a_link_not_its_target(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    link = tmp_path / "table.md"
    link.symlink_to(outside)
    fileio.write_atomically(str(link), "new")
    assert not link.is_symlink() and link.read_text() == "new" and outside.read_text() == "keep"
    with pytest.raises(fileio.OutputIsInput):
        fileio.write_atomically(str(outside), "x", inputs=[str(tmp_path / "." / "outside.txt")])
