"""The prepare step's download mode, offline: archives shaped as the real releases are served
by a real HTTP server on localhost (with or without byte ranges) and fetched, verified,
unpacked and turned into binaries by the real scripts; and a prepare stopped by SIGTERM leaves
no process and no temporary behind, and resumes."""

import gzip
import http.server
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time

import pytest
from conftest import REPO
from deepnet_fairseq.recipes import prepare

MULTI30K = os.path.join(REPO, "deepnet_fairseq", "corpora", "multi30k")


def multi30k(stem, lang, count):
    with gzip.open(os.path.join(MULTI30K, f"{stem}.{lang}.gz"), "rb") as text:
        return text.read().split(b"\n")[:count]


class Server:
    """Files served from memory by http.server; ``ranges`` says whether byte ranges are
    honoured (a 206 from the Range header's offset) or ignored (a 200 with the whole file)."""

    def __init__(self, ranges=True):
        self.files, self.ranges, self.requests = {}, ranges, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Range")))
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                if server.ranges and self.headers.get("Range"):
                    start = int(self.headers["Range"].split("=")[1].rstrip("-"))
                    self.send_response(206)
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                self.wfile.write(body[start:])

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    running = Server()
    yield running
    running.close()


def tgz(members):
    """A .tgz in memory of {name: bytes}."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            archive.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def lines(*items):
    return b"".join(item + b"\n" for item in items)


# ---- fetch and extract ------------------------------------------------------------------------

def test_an_interrupted_download_resumes_from_its_part_file(server, tmp_path):
    body = tgz({"a/file.txt": os.urandom(300_000)})
    server.files["/x.tgz"] = body
    dest = tmp_path / "x.tgz"
    (tmp_path / "x.tgz.part").write_bytes(body[:1000])
    prepare.fetch(server.url("/x.tgz"), str(dest), say=lambda _: None)
    assert dest.read_bytes() == body and not (tmp_path / "x.tgz.part").exists()
    assert server.requests == [("/x.tgz", "bytes=1000-")]


def test_a_server_without_ranges_gives_the_whole_file_again(tmp_path):
    plain = Server(ranges=False)
    try:
        body = tgz({"file.txt": b"hello\n"})
        plain.files["/x.tgz"] = body
        (tmp_path / "x.tgz.part").write_bytes(b"stale bytes of another attempt")
        prepare.fetch(plain.url("/x.tgz"), str(tmp_path / "x.tgz"), say=lambda _: None)
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
    with pytest.raises(prepare.PrepareError, match=message):
        prepare.fetch(server.url("/x.tgz"), str(tmp_path / "x.tgz"), say=lambda _: None)
    assert not (tmp_path / "x.tgz").exists()
    assert len(server.requests) == 1  # a 404 is not retried


def test_an_archive_reaching_outside_its_directory_is_refused(tmp_path):
    archive = tmp_path / "evil.tgz"
    archive.write_bytes(tgz({"../outside.txt": b"x"}))
    with pytest.raises(prepare.PrepareError, match="not what the recipe expects"):
        prepare.extract(str(archive), str(tmp_path / "work" / "evil"), say=lambda _: None)
    assert not (tmp_path / "work" / "outside.txt").exists()
    assert not (tmp_path / "work" / "evil").exists() and not (tmp_path / "work" / "evil.tmp").exists()


# ---- each dataset's download mode, through its script -----------------------------------------

def _cmdline(pid):
    """A process's command line from /proc ("" for what is not a live process)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def run_prepare(dataset, work, **env):
    return subprocess.run(["bash", os.path.join(REPO, "scripts", dataset, "prepare.sh")],
                          capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "SIZE": "smoke", "DEEPNET_WORK": str(work),
                               "OMP_NUM_THREADS": "1", **env})


def read(path):
    return open(path, "rb").read()


@pytest.mark.slow
def test_iwslt14_download_mode_splits_and_strips_the_release_files(server, tmp_path):
    de, en = multi30k("train", "de", 460), multi30k("train", "en", 460)
    markup = [b"<url>http://www.ted.com/talks/x</url>", b"  <talkid>1</talkid>"]
    files = {f"de-en/train.tags.de-en.{lang}": lines(*markup, *text[:230], *markup, *text[230:])
             for lang, text in (("de", de), ("en", en))}
    tests = {lang: multi30k("test_2016_flickr", lang, 50) for lang in ("de", "en")}
    for number, name in enumerate(prepare.IWSLT14_TEST_SETS):
        for lang in ("de", "en"):
            segments = tests[lang][number * 10:(number + 1) * 10]
            files[f"de-en/{name}.de-en.{lang}.xml"] = lines(
                b'<?xml version="1.0" encoding="UTF-8"?>', b"<refset>",
                *(b'<seg id="%d"> %s </seg>' % (i + 1, s) for i, s in enumerate(segments)),
                b"</refset>")
    server.files["/de-en.tgz"] = tgz(files)
    proc = run_prepare("iwslt14", tmp_path, IWSLT_URL=server.url("/de-en.tgz"), SRC="de",
                       TGT="en", TRAIN_LINES="0", VALID_LINES="0", TEST_LINES="0", VOCAB="500")
    assert proc.returncode == 0, proc.stderr[-3000:]
    raw = tmp_path / "data" / "raw"
    for lang, text in (("de", de), ("en", en)):
        # written out by hand: every 23rd line of the text (counted from 1) is validation
        assert read(raw / f"train.de-en.{lang}") == lines(
            *(line for n, line in enumerate(text, 1) if n % 23))
        assert read(raw / f"valid.de-en.{lang}") == lines(*text[22::23])
        assert read(raw / f"test.de-en.{lang}") == lines(*tests[lang])
    assert (tmp_path / "data" / "bin" / ".done").exists()
    assert (tmp_path / "download" / "de-en.tgz").exists()
    stages = json.loads((tmp_path / "data" / "stages.json").read_text())
    assert set(stages) == {"raw text", "clean", "sentencepiece", "encode", "binarise"}
    assert all(s["seconds"] >= 0 and s["peak_rss_mb"] > 10 for s in stages.values())
    # run again: every step is done, nothing is downloaded again, the figures stay
    requests = len(server.requests)
    assert run_prepare("iwslt14", tmp_path, IWSLT_URL=server.url("/de-en.tgz"), SRC="de",
                       TGT="en", VOCAB="500").returncode == 0
    assert len(server.requests) == requests
    assert json.loads((tmp_path / "data" / "stages.json").read_text()) == stages


@pytest.mark.slow
def test_opus100_download_mode_finds_every_pair_of_the_release(server, tmp_path):
    files = {}
    for x, directory in (("de", "de-en"), ("fr", "en-fr")):
        for split, stem, count in (("train", "train", 300), ("dev", "val", 40),
                                   ("test", "test_2016_flickr", 40)):
            for lang in (x, "en"):
                files[f"opus-100-corpus/v1.0/supervised/{directory}/opus.{directory}-{split}."
                      f"{lang}"] = lines(*multi30k(stem, lang, count))
    server.files["/opus.tar.gz"] = tgz(files)
    proc = run_prepare("opus100", tmp_path, OPUS_URL=server.url("/opus.tar.gz"), LANGS="all",
                       TRAIN_LINES="0", VALID_LINES="0", TEST_LINES="0", VOCAB="600")
    assert proc.returncode == 0, proc.stderr[-3000:]
    binary = tmp_path / "data" / "bin"
    assert read(binary / "langs.txt") == b"en,de,fr\n"
    assert read(binary / "lang_pairs.txt") == b"de-en,en-de,fr-en,en-fr\n"
    raw = tmp_path / "data" / "raw"
    assert read(raw / "valid.fr-en.fr") == lines(*multi30k("val", "fr", 40))
    assert read(raw / "test.de-en.en") == lines(*multi30k("test_2016_flickr", "en", 40))
    for x in ("de", "fr"):
        assert (binary / f"train.{x}-en.{x}.bin").exists()


@pytest.mark.slow
def test_wmt17_download_mode_joins_the_four_corpora(server, tmp_path, monkeypatch):
    """The four statmt.org archives, served here. The dev and test sets come through sacrebleu's
    own downloader, which needs the internet: here (only here) its output is replaced."""
    urls, texts = [], {}
    for number, (url, corpus) in enumerate(zip(prepare.WMT17_ARCHIVES, prepare.WMT17_CORPORA)):
        name = os.path.basename(url)
        for lang in ("en", "de"):
            texts[corpus, lang] = multi30k("train", lang, 2000)[number * 500:(number + 1) * 500]
        server.files["/" + name] = tgz({f"training/{corpus}.{lang}": lines(*texts[corpus, lang])
                                        for lang in ("en", "de")})
        urls.append(server.url("/" + name))
    monkeypatch.setattr(prepare, "WMT17_ARCHIVES", tuple(urls))
    sides = {}

    def side(test_set, pair, which):
        sides[test_set, which] = lines(*multi30k("val", "en" if which == "src" else "de", 20))
        return [line + b"\n" for line in sides[test_set, which].split(b"\n")[:-1]]

    monkeypatch.setattr(prepare, "_sacrebleu_side", side)
    from deepnet_fairseq.recipes.settings import resolve

    cfg = resolve("wmt17", {"SIZE": "smoke", "DEEPNET_WORK": str(tmp_path), "VOCAB": "600",
                            "TRAIN_LINES": "1500"}, REPO)
    assert prepare.prepare(cfg) == 0
    raw = tmp_path / "data" / "raw"
    for lang in ("en", "de"):  # the corpora in the paper's order, cut at TRAIN_LINES
        joined = [line for corpus in prepare.WMT17_CORPORA for line in texts[corpus, lang]]
        assert read(raw / f"train.en-de.{lang}") == lines(*joined[:1500])
    assert read(raw / "test.en-de.de") == sides["wmt17", "ref"]
    assert (tmp_path / "data" / "bin" / ".done").exists()


# ---- signals ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_sigterm_stops_prepare_and_its_fairseq_preprocess_and_a_rerun_finishes(tmp_path):
    env = {**os.environ, "SIZE": "smoke", "SOURCE": "multi30k", "DEEPNET_WORK": str(tmp_path),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(["bash", os.path.join(REPO, "scripts", "wmt17", "prepare.sh")],
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "fairseq-preprocess ->" in line:
            time.sleep(0.5)  # fairseq-preprocess has started
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM, "".join(seen) + rest
    assert "stopped by SIGTERM; run it again to resume" in rest
    left = [line for line in map(_cmdline, filter(str.isdigit, os.listdir("/proc")))
            if str(tmp_path) in line]
    assert left == [], f"processes left behind: {left}"
    data = tmp_path / "data"
    assert not (data / "bin.tmp").exists() and not (data / "bin").exists()
    assert (data / "spm" / ".done").exists()  # the finished steps stay
    rerun = subprocess.run(["bash", os.path.join(REPO, "scripts", "wmt17", "prepare.sh")],
                           capture_output=True, text=True, env=env, cwd=REPO)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "sentencepiece" not in rerun.stderr  # not trained again
    assert (data / "bin" / ".done").exists()



# ---- parallel stages ----------------------------------------------------------------------------

def _pid_of_task(seconds):
    time.sleep(seconds)
    return os.getpid()


def _fails_at(index, bad):
    if index in bad:
        raise ValueError(f"task {index} failed")
    return index


def test_tasks_run_in_worker_processes_and_come_back_in_order():
    from deepnet_fairseq.recipes.workers import run_all

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


WORKERS_SCRIPT = """
import os, sys, time
from deepnet_fairseq.processes import Interrupted, signals_interrupt
from deepnet_fairseq.recipes.workers import run_all

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
    from deepnet_fairseq.recipes import corpus

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


def _environ_has(pid, text):
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return text.encode() in handle.read()
    except OSError:
        return False


@pytest.mark.slow
def test_opus100_pairs_binarised_at_once_stop_on_sigterm_and_match_one_worker(tmp_path):
    script = os.path.join(REPO, "scripts", "opus100", "prepare.sh")
    work = tmp_path / "w3"
    env = {**os.environ, "SIZE": "smoke", "SOURCE": "multi30k", "DEEPNET_WORK": str(work),
           "OMP_NUM_THREADS": "1", "WORKERS": "3"}
    proc = subprocess.Popen(["bash", script], stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "3 at a time" in line:
            time.sleep(1.0)  # the three fairseq-preprocess runs have started
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM, "".join(seen) + rest
    left = [pid for pid in filter(str.isdigit, os.listdir("/proc"))
            if _environ_has(pid, f"DEEPNET_WORK={work}")]
    assert left == [], f"processes left behind: {list(map(_cmdline, left))}"
    assert not (work / "data" / "bin").exists()
    rerun = subprocess.run(["bash", script], capture_output=True, text=True, env=env, cwd=REPO)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "3 pair(s) to binarise, 3 at a time with --workers 1 each" in rerun.stderr
    one = subprocess.run(["bash", script], capture_output=True, text=True, cwd=REPO,
                         env={**env, "DEEPNET_WORK": str(tmp_path / "w1"), "WORKERS": "1"})
    assert one.returncode == 0, one.stderr[-3000:]
    assert "3 pair(s) to binarise, 1 at a time with --workers 1 each" in one.stderr

    def files(root):
        return {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*")
                if path.is_file() and path.name != "preprocess.log"
                and path.parts[-2] in ("clean", "spm", "bin")}

    ours, theirs = files(work / "data"), files(tmp_path / "w1" / "data")
    assert len([name for name in ours if name.endswith(".bin")]) == 3 * 3 * 2  # pairs, splits
    assert ours == theirs
    assert [name for name in os.listdir(work / "data" / "bin") if "part" in name] == []


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


@pytest.mark.slow
def test_the_scale_benchmark_prints_its_tables_and_every_stage(tmp_path):
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "prepare_scale.py"), "--pairs", "3",
         "--lines", "400", "--vocab", "600", "--spm-samples", "400,800", "--workers", "2",
         "--root", str(tmp_path), "--json", str(tmp_path / "figures.json")],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "corpus: pair 3 of 3 (es-en) written" in proc.stderr  # progress
    assert "| clean " in proc.stdout and "| binarise " in proc.stdout
    assert "sampled sentences" in proc.stdout and "EXTRAPOLATION (not measured)" in proc.stdout
    figures = json.loads((tmp_path / "figures.json").read_text())
    stages = json.loads(open(os.path.join(figures["work"], "data", "stages.json")).read())
    assert set(stages) == {"raw text", "clean", "sentencepiece", "encode", "binarise"}
    assert [e["stage"] for e in figures["extrapolated"]] == [
        "raw text", "clean", "sentencepiece", "encode", "binarise"]
    assert [p["sentences"] for p in figures["spm_probes"]] == [400, 800]
    assert figures["workers"] == 2 and figures["training_pairs"] == 1200
