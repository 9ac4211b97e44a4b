"""The prepare step's download and worker processes: archives shaped as the real releases are
served by a real HTTP server on localhost (with or without byte ranges), fetched, verified and
unpacked; the parallel stages write what one process writes, and a stopped prepare leaves no
worker behind. Each dataset's whole download mode: slow/test_prepare_end_to_end.py."""

import os
import signal
import subprocess
import sys
import time

import pytest

from deepnet_fairseq.recipes.base import rawtext
from release_server import Server, lines, multi30k, tgz
from support import REPO


# ---- fetch and extract ------------------------------------------------------------------------

def test_an_interrupted_download_resumes_from_its_part_file(server, tmp_path):
    body = tgz({"a/file.txt": os.urandom(300_000)})
    server.files["/x.tgz"] = body
    dest = tmp_path / "x.tgz"
    (tmp_path / "x.tgz.part").write_bytes(body[:1000])
    rawtext.fetch(server.url("/x.tgz"), str(dest), say=lambda _: None)
    assert dest.read_bytes() == body and not (tmp_path / "x.tgz.part").exists()
    assert server.requests == [("/x.tgz", "bytes=1000-")]


def test_a_server_without_ranges_gives_the_whole_file_again(tmp_path):
    plain = Server(ranges=False)
    try:
        body = tgz({"file.txt": b"hello\n"})
        plain.files["/x.tgz"] = body
        (tmp_path / "x.tgz.part").write_bytes(b"stale bytes of another attempt")
        rawtext.fetch(plain.url("/x.tgz"), str(tmp_path / "x.tgz"), say=lambda _: None)
        assert (tmp_path / "x.tgz").read_bytes() == body
    finally:
        plain.close()


@pytest.mark.parametrize("served, message", [
    (b"<html>not found, but a 200</html>", "is not a valid archive"),
    (None, "HTTP 404"),
])
def test_a_bad_download_is_refused_and_never_takes_the_final_name(server, tmp_path, served,
                                                                  message):
    if served is not None:
        server.files["/x.tgz"] = served
    with pytest.raises(rawtext.PrepareError, match=message):
        rawtext.fetch(server.url("/x.tgz"), str(tmp_path / "x.tgz"), say=lambda _: None)
    assert not (tmp_path / "x.tgz").exists()
    assert len(server.requests) == 1  # a 404 is not retried


def test_an_archive_reaching_outside_its_directory_is_refused(tmp_path):
    archive = tmp_path / "evil.tgz"
    archive.write_bytes(tgz({"../outside.txt": b"x"}))
    with pytest.raises(rawtext.PrepareError, match="not what the recipe expects"):
        rawtext.extract(str(archive), str(tmp_path / "work" / "evil"), say=lambda _: None)
    assert not (tmp_path / "work" / "outside.txt").exists()
    assert not (tmp_path / "work" / "evil").exists() and not (tmp_path / "work" / "evil.tmp").exists()


# ---- each dataset's download mode, through its script -----------------------------------------


# ---- signals ------------------------------------------------------------------------------------


# ---- parallel stages ----------------------------------------------------------------------------

def _pid_of_task(seconds):
    time.sleep(seconds)
    return os.getpid()


def _fails_at(index, bad):
    if index in bad:
        raise ValueError(f"task {index} failed")
    return index


def test_tasks_run_in_worker_processes_and_come_back_in_order():
    from deepnet_fairseq.recipes.data.workers import run_all

    seen = []
    # the first task is the slowest, and with sizes the largest starts first: order is kept
    run_all(_pid_of_task, [(0.3,), (0.0,), (0.1,), (0.0,)], 3,
            lambda index, pid: seen.append((index, pid)), sizes=[1, 4, 3, 2])
    assert [index for index, _ in seen] == [0, 1, 2, 3]
    assert os.getpid() not in {pid for _, pid in seen} and len({pid for _, pid in seen}) > 1
    seen.clear()
    run_all(_pid_of_task, [(0,), (0,)], 1, lambda index, pid: seen.append(pid))
    assert seen == [os.getpid()] * 2  # one worker: in this process
    # the first failure in the tasks' order is the one raised, whatever finishes first
    with pytest.raises(ValueError, match="task 1 failed"):
        run_all(_fails_at, [(i, {1, 3}) for i in range(5)], 3, sizes=[0, 0, 0, 9, 0])


STRESS_SCRIPT = """
import os
from deepnet_fairseq.recipes.data.workers import WorkerDied, run_all

def task(index, mode):
    if mode == "raise" and index % 3 == 1:
        raise ValueError(index)
    if mode == "die" and index == 2:
        os._exit(7)
    return index

if __name__ == "__main__":
    for round in range(60):
        for mode in ("ok", "raise", "die"):
            got = []
            try:
                run_all(task, [(i, mode) for i in range(7)], 3, lambda i, r: got.append(r))
            except ValueError as error:
                assert mode == "raise" and error.args == (1,) and got == [0]
            except WorkerDied as error:
                assert mode == "die" and "task 3 of 7" in str(error) and "7" in str(error)
                assert got == [0, 1]
            else:
                assert mode == "ok" and got == list(range(7))
    print("done")
"""


def test_failing_and_dying_workers_never_hang_the_parent(tmp_path):
    """180 rounds of tasks that succeed, raise or kill their own process end in time, each with
    the first failure in the tasks' order (multiprocessing.Pool.terminate hung here on 3.12
    and 3.13)."""
    script = tmp_path / "stress.py"
    script.write_text(STRESS_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True,
                          text=True, timeout=240, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr


WORKERS_SCRIPT = """
import os, sys, time
from deepnet_fairseq.processes import Interrupted, signals_interrupt
from deepnet_fairseq.recipes.data.workers import run_all

def task(path):
    with open(path, "w") as out:
        out.write(str(os.getpid()))
    time.sleep(60)

if __name__ == "__main__":
    try:
        with signals_interrupt():
            run_all(task, [(os.path.join(sys.argv[1], f"pid{i}"),) for i in range(3)], 3)
    except Interrupted:
        sys.exit(143)
"""


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_prepare_leaves_no_worker_behind(tmp_path, signum):
    # SIGTERM: the pool is ended before the step's temporaries go; SIGKILL of the parent:
    # the workers get the parent-death signal
    script = tmp_path / "script.py"
    script.write_text(WORKERS_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": REPO})
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("pid*"))) < 3 or any(
            not path.read_text() for path in tmp_path.glob("pid*")):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    workers = [int(path.read_text()) for path in tmp_path.glob("pid*")]
    assert all(map(_alive, workers))
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == (143 if signum == signal.SIGTERM else -signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(map(_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(_alive, workers)), "workers left behind"


def multi_pair_raw(raw, langs=("de", "fr", "cs"), count=300):
    raw.mkdir(parents=True)
    for x in langs:
        for split, stem in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
            for lang in (x, "en"):
                (raw / f"{split}.{x}-en.{lang}").write_bytes(lines(*multi30k(stem, lang, count)))


def test_parallel_cleaning_and_encoding_write_what_one_process_writes(tmp_path, capfd):
    from deepnet_fairseq.recipes.data import corpus

    written, said = {}, {}
    for workers in (1, 3):
        data = tmp_path / f"w{workers}"
        multi_pair_raw(data / "raw")
        corpus.prepare(str(data), ["cs-en", "de-en", "fr-en"], 400, 100_000, 250, 1.5,
                       workers=workers)
        said[workers] = capfd.readouterr().err
        written[workers] = {f"{d}/{name}": (data / d / name).read_bytes()
                            for d in ("clean", "spm") for name in os.listdir(data / d)}
        assert (data / "spm.vocab").read_bytes() == (tmp_path / "w1" / "spm.vocab").read_bytes()
    assert len(written[1]) == 2 * (3 * 3 * 2 + 2)  # clean/, spm/: 18 files, marker, .done
    assert written[3] == written[1]
    assert said[3] == said[1] and "clean train.de-en: kept" in said[1]


# ---- benchmarks/prepare_scale.py ----------------------------------------------------------------

def _scale_module():
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        import prepare_scale
    finally:
        sys.path.pop(0)
    return prepare_scale


def test_the_generated_corpus_is_deterministic_multilingual_and_in_the_local_layout(tmp_path):
    scale = _scale_module()
    quiet = lambda message: None  # noqa: E731
    langs = scale.generate(str(tmp_path / "a"), 21, 200, 20, 7, quiet)
    assert len(langs) == 21 and "en" not in langs
    scale.generate(str(tmp_path / "b"), 2, 200, 20, 7, quiet)  # the first 2 pairs again
    scale.generate(str(tmp_path / "c"), 2, 200, 20, 8, quiet)
    names = sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*.*")
                   if p.name != "corpus.json")
    assert len(names) == 21 * 3 * 2 and "fa-en/train.fa" in names and "ko-en/test.en" in names
    first = [n for n in names if n.split("-")[0] in langs[:2]]
    same = [(tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes() for n in first]
    other = [(tmp_path / "a" / n).read_bytes() == (tmp_path / "c" / n).read_bytes() for n in first]
    assert all(same) and not any(other)
    text = {lang: (tmp_path / "a" / f"{lang}-en" / f"train.{lang}").read_text("utf-8")
            for lang in langs}
    assert text["fa"].count("\n") == 200 and "\u200c" in text["fa"] and "\u200c" in text["ur"]
    scripts = {lang: {__import__("unicodedata").name(ch).split()[0] for ch in body if ch.isalpha()}
               for lang, body in text.items()}
    assert {"CYRILLIC", "GREEK", "ARABIC", "HEBREW", "DEVANAGARI", "GEORGIAN", "ARMENIAN",
            "HANGUL"} <= set().union(*scripts.values())
    english = (tmp_path / "a" / "de-en" / "train.en").read_text("utf-8").splitlines()
    lengths = sorted(len(line.split()) for line in english)
    assert 8 <= lengths[len(lengths) // 2] <= 16  # realistic median length


# ---- links planted for prepare's directories ------------------------------------------------------

def _prepare(work, timeout=300):
    env = {**os.environ, "DEVICE": "cpu", "SIZE": "smoke", "SOURCE": "multi30k",
           "DEEPNET_WORK": str(work), "PYTHONPATH": REPO}
    return subprocess.run([sys.executable, "-m", "deepnet_fairseq.recipes", "wmt17", "prepare"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def test_a_link_planted_for_a_directory_of_prepare_is_not_followed(tmp_path):
    """Each directory prepare leaves (found by running it) and the PATH.tmp each is built in,
    planted as a link to a marked directory elsewhere before prepare starts: prepare stops with
    one line naming the link, and writes nothing through it."""
    from deepnet_fairseq.storage import directories

    reference = tmp_path / "reference"
    assert _prepare(reference).returncode == 0
    made = sorted(os.path.relpath(p, reference) for p, _, _ in os.walk(reference))[1:]
    assert {"data", "data/bin", "data/spm"} <= set(made)
    planted = made + [name + ".tmp" for name in made if name != "data"]
    for number, name in enumerate(planted):
        work, elsewhere = tmp_path / f"case-{number}" / "work", tmp_path / f"case-{number}" / "x"
        directories.make_dirs(str(elsewhere))  # marked: only the link may stop prepare
        directories.make_dirs(str(work / os.path.dirname(name)))  # as prepare makes them
        (work / name).symlink_to(elsewhere, target_is_directory=True)
        proc = _prepare(work)
        assert proc.returncode != 0, name
        last = proc.stderr.strip().splitlines()[-1]
        assert str(work / name) in last and "symbolic link" in last, (name, proc.stderr[-2000:])
        assert sorted(os.listdir(elsewhere)) == [directories.MARKER], name
