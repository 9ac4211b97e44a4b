"""Messages and exits on the way out (issue 43): a special file (FIFO, device, socket,
directory) where a checkpoint is read is refused by its stat before it is opened, naming it,
at every door of checkpoint reading (``checkpoint_io.read_checkpoint``, under every reader, and
fairseq's own torch.load as the plugin wraps it); and a signal inside ``signals_raise`` ends with
the signal's status and a line saying so, whatever the interrupted code made of it.

The special files are generated from ``fileio._SPECIAL`` (every kind the layer names), the
doors from the readers; each case runs under an alarm, so that a reader that blocks fails
instead of hanging the suite."""

import inspect
import os
import re
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

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
    (tmp_path / "out").mkdir()
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
    assert os.listdir(tmp_path / "out") == []


# ---- a full disk, for real: every door of the file layer that writes names its path ------------

def layer_doors() -> set:
    """The functions and classes of the file layer (fileio.py, directories.py) holding a write,
    a replace or a delete, as test_file_layer's scan of the sources finds them."""
    import ast

    from test_file_layer import FILE_LAYER, direct_writes

    found = set()
    for module in FILE_LAYER:
        with open(os.path.join(REPO, module), encoding="utf-8") as handle:
            source = handle.read()
        lines = {line for line, _ in direct_writes(source)}
        found |= {node.name for node in ast.parse(source).body
                  if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                  and any(node.lineno <= line <= node.end_lineno for line in lines)}
    return found


BIG = "b'x' * 200_000"  # more than the disk has left: a write of it fails
# door -> (code run with D the full disk's directory and ARCHIVE a tar.gz elsewhere, the path
# the caller knows, which its one line must name)
FULL_DISK_DOORS = {
    "atomic_open": (f"fileio.write_atomically(D + '/a.txt', 'x' * 200_000)", "{D}/a.txt"),
    "save_torch": ("import torch; fileio.save_torch({'w': torch.ones(100_000)}, D + '/m.pt')",
                   "{D}/m.pt"),
    "save_png": ("import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt\n"
                 "figure = plt.figure(figsize=(40, 40)); plt.imshow(__import__('numpy').random"
                 ".rand(400, 400))\nfileio.save_png(figure, D + '/p.png')", "{D}/p.png"),
    "create_new": (f"with fileio.create_new(D + '/new.txt', 'wb') as out: out.write({BIG})",
                   "{D}/new.txt"),
    "open_no_follow": (f"with fileio.open_no_follow(D + '/log.txt', 'a') as out: "
                       f"out.write('x' * 200_000)", "{D}/log.txt"),
    "overwrite_in_place": ("fileio.overwrite_in_place(D + '/existing.txt', 'x' * 200_000)",
                           "{D}/existing.txt"),
    "extract_tar": ("fileio.extract_tar(ARCHIVE, D + '/unpacked')", "{D}/unpacked"),
    "directory_published": (f"with fileio.directory_published(D + '/out', 'x-') as built:\n"
                            f"    open(built + '/f', 'wb').write({BIG})", "{D}/out"),
    "temporary_beside": (f"with fileio.temporary_beside(D + '/spm.model') as tmp:\n"
                         f"    open(tmp + '/f', 'wb').write({BIG})", "{D}/spm.model"),
    "make_dirs": ("directories.make_dirs(D + '/new')", "{D}/new/.deepnet-recipes"),
    "RunLock": ("directories.RunLock(D).__enter__()", "{D}/.lock"),
}
# the doors that write no data (a rename, a delete, a directory, a mode, a read): a full disk
# refuses none of them, and what refuses them (os.mkdir, os.replace) names the path itself
WRITE_NO_DATA = {"move": "renames", "replace_tree": "renames", "remove_file": "deletes",
                 "remove_tree": "deletes", "remove_stale_temporaries": "deletes",
                 "ensure_directory": "makes directories", "scratch_directory": "makes a directory",
                 "_readable_as_umask_says": "sets a mode",
                 "_tree_readable_as_umask_says": "sets modes", "open_regular": "reads",
                 "lock_state": "probes a lock (opened read-only, nothing created)"}

# The child: a mount namespace of its own with a tmpfs of 1 MiB on D, filled to the last byte
# (by a file kept there: the existing.txt of overwrite_in_place, empty, is made first), then
# the door inside a main wrapped as every tool's is.
FULL_CHILD = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
D, ARCHIVE, code = sys.argv[1], sys.argv[2], sys.argv[3]
if libc.unshare(0x00020000) != 0 or libc.mount(b"none", b"/", None, (1 << 14) | (1 << 18),
                                                None) != 0 or libc.mount(
        b"tmpfs", D.encode(), b"tmpfs", 0, b"size=1m") != 0:
    print("setup:", os.strerror(ctypes.get_errno()))
    sys.exit(0)
open(D + "/existing.txt", "w").close()
with open(D + "/filler", "wb", buffering=0) as filler:
    try:
        while True:
            filler.write(b"\0" * 4096)
    except OSError as err:
        assert err.errno == 28, err
from deepnet_fairseq.storage import directories, fileio

@fileio.one_line_os_errors
def main():
    exec(code, {"D": D, "ARCHIVE": ARCHIVE, "fileio": fileio, "directories": directories})

main()
print("no error")
"""


def test_every_writing_door_of_the_layer_is_tried_on_a_full_disk():
    assert layer_doors() == set(FULL_DISK_DOORS) | set(WRITE_NO_DATA)


@pytest.mark.parametrize("door", sorted(FULL_DISK_DOORS))
def test_a_full_disk_names_the_path_at_every_door_of_the_layer(tmp_path, door):
    """A real full disk (a tmpfs of 1 MiB, filled, in a child's mount namespace): each door of
    the file layer that writes data ends, in a tool's main, with status 1 and one line naming
    the path its caller gave (the kernel's ENOSPC names none), never "(path unknown)"."""
    import tarfile

    disk = tmp_path / "disk"
    disk.mkdir()
    payload = tmp_path / "payload.bin"
    payload.write_bytes(os.urandom(300_000))  # incompressible: bigger than the disk left
    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(payload, arcname="payload.bin")
    code, named = FULL_DISK_DOORS[door]
    done = subprocess.run([sys.executable, "-c", FULL_CHILD, str(disk), str(archive), code],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.stdout.startswith("setup:"):
        pytest.skip(f"cannot mount a tmpfs here ({done.stdout.strip()})")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert lines[-1] == (f"error: {named.format(D=disk)}: No space left on device; free some "
                         f"space and run again (runs resume)"), lines


# ---- an output in a directory that is not there: one line, status 2, nothing written ----------

def _missing(root):
    return root / "missing" / "sub", root / "missing"  # (its directory, what must not appear)


def _a_file(root):
    (root / "a-file").write_text("keep")
    return root / "a-file" / "sub", None


WHERE = {"a missing directory": _missing, "a file where its directory would be": _a_file}


@pytest.fixture
def fixtures(toy_data, tiny_checkpoint):
    return {"data": toy_data, "checkpoint": tiny_checkpoint}


def _all_files(root):
    return {str(p): p.read_bytes() if p.is_file() else None for p in root.rglob("*")}


@pytest.mark.parametrize("where", sorted(WHERE))
@pytest.mark.parametrize("output", __import__("hostile_tools").TABLE,
                         ids=lambda output: f"{output.tool}{output.option}")
def test_an_output_whose_directory_is_not_there_is_refused_in_one_line(tmp_path, fixtures,
                                                                        output, where):
    """Every output argument of every tool (hostile_tools.TABLE, read from their parsers) in a
    directory that does not exist, or below a file: status 2, one line naming that directory
    and what to do, nothing created or changed (it made the missing parents silently, or
    ended in a traceback: clean's FileExistsError, score's 'unreadable record')."""
    from hostile_tools import call

    inputs = tmp_path / "in"
    inputs.mkdir()
    directory, absent = WHERE[where](tmp_path)
    argv = output.argv(inputs, fixtures, str(directory / ("result" if output.directory
                                                          else output.name)))
    before = _all_files(tmp_path)
    status, said = call(output.main, argv)
    lines = said.strip().splitlines()
    assert status == 2 and "Traceback" not in said, said
    assert lines[-1].startswith("error: ") or ": error: " in lines[-1], lines
    if absent is not None:
        assert f"its directory {directory} does not exist; create it" in lines[-1], lines[-1]
        assert not absent.exists()
    else:
        assert f"{tmp_path / 'a-file'} is not a directory" in lines[-1], lines[-1]
    assert _all_files(tmp_path) == before


# ---- a tool that reads a run's checkpoint writes nothing into that run ---------------------------

# the outputs of the tools the table calls with a checkpoint (its argv builds one: _checkpoint)
CHECKPOINT_READERS = [output for output in __import__("hostile_tools").TABLE
                      if "_checkpoint(" in inspect.getsource(output.argv)]


@pytest.mark.parametrize("place", ["the run", "its checkpoints"])
@pytest.mark.parametrize("output", CHECKPOINT_READERS,
                         ids=lambda output: f"{output.tool}{output.option}")
def test_a_tool_writes_nothing_into_the_run_of_the_checkpoint_it_reads(tmp_path, fixtures,
                                                                       output, place):
    """A checkpoint in a run of the recipes (WORK/runs/RUN/checkpoints, made and marked by
    them): an output of the tool reading it, in the run or in its checkpoints/, new, is refused
    (status 2, naming the directory), even with --force, and nothing is added there; outside
    the run it is written (deepnet-export wrote into the run it read)."""
    from hostile_tools import call
    from deepnet_fairseq.storage.directories import make_dirs

    run = tmp_path / "work" / "runs" / "deepnet-6L-6L"
    checkpoints = Path(make_dirs(str(run / "checkpoints")))
    into = run if place == "the run" else checkpoints
    name = "result" if output.directory else output.name
    before = _all_files(run)
    for force in ([], ["--force"]):
        status, said = call(output.main, output.argv(checkpoints, fixtures, str(into / name))
                            + force)
        assert status == 2 and f"is in the input directory {into}" in said, said
        assert "Traceback" not in said
    # what the table's call itself added: the checkpoint (and a source-use's data is elsewhere)
    assert set(_all_files(run)) - set(before) == {str(checkpoints / "checkpoint_1_5.pt")}
    (tmp_path / "elsewhere").mkdir()
    status, said = call(output.main, output.argv(checkpoints, fixtures,
                                                 str(tmp_path / "elsewhere" / name)))
    assert status == 0, said


# ---- a special file where text is read: refused at once, at every door ---------------------------

# the modules that read the user's text (hypotheses, references, corpus files, dictionaries,
# sentencepiece models), and the calls that read a path by name
TEXT_MODULES = ("deepnet_fairseq/recipes/evaluation/score.py", "deepnet_fairseq/hub.py",
                "deepnet_fairseq/export.py", "deepnet_fairseq/hf_export.py",
                "deepnet_fairseq/spm.py", "deepnet_fairseq/recipes/data/clean.py",
                "deepnet_fairseq/storage/checkpoint_io.py")
READS = re.compile(r"^(open|open_regular|.*Dictionary\.load|.*SentencePieceProcessor|"
                   r".*SentencePieceTrainer\.train|torch\.load)$")
GUARDS = {"check_regular", "open_regular"}


def text_doors():
    """(module, function) of every function of TEXT_MODULES that reads a path by name (a
    reading open(, fairseq's Dictionary.load, sentencepiece's processor or trainer, torch.load),
    with whether it asks check_regular / open_regular first."""
    import ast

    from test_file_layer import _mode, _mode_writes

    found = {}
    for module in TEXT_MODULES:
        with open(os.path.join(REPO, module), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef):
                continue
            calls = [node for node in ast.walk(function) if isinstance(node, ast.Call)]
            names = [ast.unparse(call.func) for call in calls]
            reads = [call for call, name in zip(calls, names) if READS.match(name)
                     and not (name == "open" and _mode_writes(_mode(call, 1)))]
            if reads:
                found[f"{os.path.basename(module)[:-3]}.{function.name}"] = bool(GUARDS & {n.split(".")[-1] for n in names})
    return found


# the doors of checkpoint reading among them: tested above (DOORS)
CHECKPOINT_READS = {"checkpoint_io.read_checkpoint", "checkpoint_io.load"}


def test_every_text_door_refuses_a_special_file_first():
    """Each door the scan finds asks check_regular or opens with open_regular, and is tried
    below (TEXT_DOORS) or with the checkpoints above."""
    doors = text_doors()
    assert [door for door, guarded in doors.items() if not guarded] == []
    assert set(doors) - CHECKPOINT_READS <= set(TEXT_DOORS), set(doors) - set(TEXT_DOORS)


def _export_dictionaries(path):
    from deepnet_fairseq import export

    data = os.path.dirname(path)
    export.check_dictionaries({"encoder.embed_tokens.weight": __import__("torch").zeros(8, 2)},
                              {"source_lang": "src", "target_lang": "tgt", "data": data}, data)


def _spm_call(name):
    def call(path):
        from deepnet_fairseq import spm

        if name == "train":
            return spm.train([path], path + "-model", 32)
        if name == "encode":
            import io
            return spm.encode(path, io.StringIO("a b\n"), io.StringIO())
        return getattr(spm, name)(path, *(([],) if name == "mismatch" else ()))
    return call


TEXT_DOORS = {  # how each door meets PATH (a dict.src.txt's place where a dictionary is read)
    "score.hypotheses": lambda p: __import__("deepnet_fairseq.recipes.evaluation.score",
                                             fromlist=["x"]).hypotheses(p),
    "score.references": lambda p: __import__("deepnet_fairseq.recipes.evaluation.score",
                                             fromlist=["x"]).references(p),
    "clean.read_lines": lambda p: list(__import__("deepnet_fairseq.recipes.data.clean",
                                                  fromlist=["x"]).read_lines(p)),
    "clean.count_lines": lambda p: __import__("deepnet_fairseq.recipes.data.clean",
                                              fromlist=["x"]).count_lines(p),
    "checkpoint_io.load_dictionary": checkpoint_io.load_dictionary,
    "checkpoint_io.dictionary_difference": lambda p: checkpoint_io.dictionary_difference(p, p),
    "export.check_dictionaries": _export_dictionaries,
    "hf_export.dictionary_vocab": lambda p: __import__("deepnet_fairseq.hf_export",
                                                       fromlist=["x"]).dictionary_vocab(p),
    "hub.check_pieces": lambda p: __import__("deepnet_fairseq.hub",
                                             fromlist=["x"]).check_pieces(p, p),
    "spm.load": _spm_call("load"), "spm.mismatch": _spm_call("mismatch"),
    "spm.encode": _spm_call("encode"), "spm.train": _spm_call("train"),
}


@pytest.mark.parametrize("what", sorted(SPECIAL))
@pytest.mark.parametrize("door", sorted(TEXT_DOORS))
def test_a_special_file_where_text_is_read_is_refused_at_once(tmp_path, alarm, door, what):
    """Each door of text reading (the functions text_doors finds, reached from their callers)
    against each special file the layer names: refused at once, naming the path and what it
    is (a FIFO blocked sentencepiece and fairseq's Dictionary.load for ever, the scoring of a
    generate output too), never read."""
    path = str(tmp_path / "dict.src.txt")
    SPECIAL[what](path)
    try:
        said = str(TEXT_DOORS[door](path))
    except Exception as err:  # noqa: BLE001 -- whatever the door raises must say it
        said = str(err)
    assert path in said and f"{what}, not a regular file" in said, said


# ---- an evaluation stopped by SIGTERM, in a real process, then run again -------------------------

def test_an_evaluation_stopped_by_sigterm_says_so_exits_143_and_a_rerun_ends_right(
        tmp_path, toy_data, tiny_checkpoint):
    """The recipes' evaluation (recipes.evaluation.evaluate) in a real process, a real SIGTERM
    sent to it once fairseq-generate has decoded the test set (from inside the step that
    scores it, the one moment sure to be mid-evaluation): status 143, one line saying so, no
    traceback, no eval/ published; the same command again evaluates and publishes eval.json."""
    import json
    import shutil

    from deepnet_fairseq.storage.directories import make_dirs

    run = make_dirs(str(tmp_path / "run"))
    checkpoints = make_dirs(os.path.join(run, "checkpoints"))
    for name in ("checkpoint_1_5.pt", "checkpoint_last.pt"):  # as fairseq-train leaves them
        shutil.copyfile(tiny_checkpoint, os.path.join(checkpoints, name))
    references = tmp_path / "raw"
    references.mkdir()
    for lang in ("src", "tgt"):
        shutil.copyfile(toy_data.parent / f"test.{lang}", references / f"test.src-tgt.{lang}")
    argv = ["--run-dir", run, "--average-last", "1", "--directions", "src-tgt",
            "--references", str(references), "--", str(toy_data), "--user-dir",
            os.path.join(REPO, "deepnet_fairseq"), "--gen-subset", "test", "--beam", "2",
            "--batch-size", "40", "--max-len-a", "0", "--max-len-b", "8", "--cpu"]
    stop = ("import deepnet_fairseq.recipes.evaluation.evaluate as evaluate\n"
            "real = evaluate.score_direction\n"
            "def score_direction(*args, **kwargs):\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    signal.sigtimedwait([], 0)\n"  # the handler runs here
            "    return real(*args, **kwargs)\n"
            "evaluate.score_direction = score_direction\n")

    def evaluate(hook):
        script = ("import json, os, signal, sys\n" + hook +
                  "from deepnet_fairseq.recipes.evaluation.evaluate import main\n"
                  "main(json.loads(sys.argv[1]))\n")
        return subprocess.run([sys.executable, "-c", script, json.dumps(argv)], cwd=REPO,
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})

    stopped = evaluate(stop)
    lines = stopped.stderr.strip().splitlines()
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    assert lines[-1].startswith("stopped by SIGTERM (exit status 143)"), lines[-3:]
    assert not os.path.exists(os.path.join(run, "eval", "eval.json"))
    again = evaluate("")
    assert again.returncode == 0, again.stderr[-3000:]
    with open(os.path.join(run, "eval", "eval.json"), encoding="utf-8") as handle:
        assert json.load(handle)["directions"]["src-tgt"]["sentences"] > 0
