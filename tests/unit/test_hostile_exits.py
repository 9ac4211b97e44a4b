"""Messages and exits on the way out (issue 43): a special file (FIFO, device, socket,
directory) where a checkpoint is read is refused by its stat before it is opened, naming it,
at every door of checkpoint reading (``checkpoint_io.read_checkpoint``, under every reader, and
fairseq's own torch.load as the plugin wraps it); and a signal inside ``signals_raise`` ends with
the signal's status and a line saying so, whatever the interrupted code made of it.

The special files are generated from ``fileio._SPECIAL`` (every kind the layer names), the
doors from the readers; each case runs under an alarm, so that a reader that blocks fails
instead of hanging the suite."""

import os
import signal
import socket
import stat
import subprocess
import sys

import pytest

from deepnet_fairseq.storage import checkpoint_io, fileio
from support import REPO


def _fifo(path):
    os.mkfifo(path)


def _device(path):  # a character device that is read without end
    os.symlink("/dev/zero", path)


def _block_device(path):
    devices = [os.path.join("/dev", n) for n in sorted(os.listdir("/dev"))
               if stat.S_ISBLK(os.stat(os.path.join("/dev", n)).st_mode)]
    if not devices:
        pytest.skip("no block device on this machine")
    os.symlink(devices[0], path)


def _socket(path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    _socket.kept = server  # bound for the test's length


SPECIAL = {"a directory": os.mkdir, "a FIFO": _fifo,
           "a character device": _device, "a block device": _block_device, "a socket": _socket}


def test_every_kind_of_special_file_the_layer_names_is_made_here():
    assert sorted(SPECIAL) == sorted(what for _, what in fileio._SPECIAL)


def _average_directory(path):
    from deepnet_fairseq.average_checkpoints import cli_main

    with pytest.raises(SystemExit) as exit:
        cli_main(["--inputs", os.path.dirname(path), "--num-update-checkpoints", "1",
                  "--output", os.path.join(os.path.dirname(os.path.dirname(path)), "avg.pt")])
    assert exit.value.code == 1


def _why_unreadable(path):  # its cause, as the resume's repair names it with the path
    raise checkpoint_io.CheckpointError(path, checkpoint_io.why_unreadable(path))


def _fairseq_load(path):
    from fairseq import checkpoint_utils

    checkpoint_io.load_fairseq_checkpoints_weights_only()
    checkpoint_utils.torch.load(path)


DOORS = {  # how each reader meets PATH (checkpoints/checkpoint_1_2.pt); what it raises
    "read_checkpoint": (checkpoint_io.read_checkpoint, checkpoint_io.CheckpointError),
    "why_unreadable (resume's repair)": (_why_unreadable, checkpoint_io.CheckpointError),
    "deepnet-average-checkpoints": (_average_directory, None),
    "fairseq's torch.load": (_fairseq_load, fileio.NotRegularFile),
}


@pytest.fixture
def alarm():
    def timeout(signum, frame):
        raise TimeoutError("the reader blocked")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("what", sorted(SPECIAL))
@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_special_file_named_like_a_checkpoint_is_refused_unopened(tmp_path, capsys, alarm,
                                                                    door, what):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    path = str(checkpoints / "checkpoint_1_2.pt")
    SPECIAL[what](path)
    read, error = DOORS[door]
    if error is None:
        read(path)
        said = capsys.readouterr().err
    else:
        with pytest.raises(error) as raised:
            read(path)
        said = str(raised.value)
    assert path in said and f"{what}, not a regular file" in said, said


def test_a_signal_ends_the_block_with_its_status_whatever_the_code_made_of_it(capsys):
    """torch.save interrupted while it writes turned signals_raise's SystemExit into a
    RuntimeError: a traceback and status 1. A real SIGTERM, raised into code that wraps every
    exception as torch's writer does: status 143 and one line."""
    def writer():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0)  # the handler runs at the next bytecode
        except BaseException as err:
            raise RuntimeError(f"[enforce fail at inline_container.cc] {err!r}") from err

    with pytest.raises(SystemExit) as exit:
        with fileio.signals_raise():
            writer()
    assert exit.value.code == 128 + signal.SIGTERM
    assert capsys.readouterr().err.strip() == ("stopped by SIGTERM (exit status 143); its "
                                               "temporaries removed")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_averaging_killed_while_it_writes_exits_143_with_a_line(tmp_path):
    """deepnet-average-checkpoints in a real process, SIGTERM while torch.save writes (the
    signal sent from inside the write, the only moment that is sure to be during it, where
    torch's writer turns any exception into a RuntimeError): status 143, one line, no
    traceback, no temporary left."""
    import torch

    for name in ("a.pt", "b.pt"):
        torch.save({"model": {"w": torch.ones(4)}}, tmp_path / name)
    script = (
        "import os, signal, sys, torch\n"
        "from deepnet_fairseq.average_checkpoints import cli_main\n"
        "original = torch.save\n"
        "def save(obj, f, *a, **k):\n"  # as torch's C++ writer: any error a RuntimeError
        "    try:\n"
        "        f.write(b'partial')\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        signal.sigtimedwait([], 0)\n"
        "    except BaseException as err:\n"
        "        raise RuntimeError(f'[enforce fail at inline_container.cc] {err!r}')\n"
        "    return original(obj, f, *a, **k)\n"
        "torch.save = save\n"
        f"cli_main(['--inputs', '{tmp_path}/a.pt', '{tmp_path}/b.pt', '--output', "
        f"'{tmp_path}/out/avg.pt'])\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 143, done.stderr
    assert "Traceback" not in done.stderr and "stopped by SIGTERM" in done.stderr
    assert not os.path.exists(tmp_path / "out") or os.listdir(tmp_path / "out") == []
