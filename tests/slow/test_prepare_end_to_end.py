"""The prepare step end to end: each dataset's download mode through a local server, and prepare
stopped by SIGTERM, then finished by a rerun."""

import json
import os
import signal
import subprocess

from deepnet_fairseq.recipes.data import prepare
from deepnet_fairseq.recipes.datasets import iwslt14, wmt17
from release_server import lines, multi30k, tgz
from support import REPO, process_cmdline, wait_for


def run_prepare(dataset, work, **env):
    """The download mode at the smoke size (which reads the shipped corpus unless told)."""
    return subprocess.run(["bash", os.path.join(REPO, "scripts", dataset, "prepare.sh")],
                          capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "SIZE": "smoke", "SOURCE": "download",
                               "DEEPNET_WORK": str(work), "OMP_NUM_THREADS": "1", **env})


def read(path):
    return open(path, "rb").read()


def test_iwslt14_download_mode_splits_and_strips_the_release_files(server, tmp_path):
    de, en = multi30k("train", "de", 460), multi30k("train", "en", 460)
    markup = [b"<url>http://www.ted.com/talks/x</url>", b"  <talkid>1</talkid>"]
    files = {f"de-en/train.tags.de-en.{lang}": lines(*markup, *text[:230], *markup, *text[230:])
             for lang, text in (("de", de), ("en", en))}
    tests = {lang: multi30k("test_2016_flickr", lang, 50) for lang in ("de", "en")}
    for number, name in enumerate(iwslt14.TEST_SETS):
        for lang in ("de", "en"):
            segments = tests[lang][number * 10:(number + 1) * 10]
            files[f"de-en/{name}.de-en.{lang}.xml"] = lines(
                b'<?xml version="1.0" encoding="UTF-8"?>', b"<refset>",
                *(b'<seg id="%d"> %s </seg>' % (i + 1, s) for i, s in enumerate(segments)),
                b"</refset>")
    server.files["/de-en.tgz"] = tgz(files)
    given = dict(IWSLT_URL=server.url("/de-en.tgz"), SRC="de", TGT="en", TRAIN_LINES="0",
                 VALID_LINES="0", TEST_LINES="0", VOCAB="500")
    proc = run_prepare("iwslt14", tmp_path, **given)
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
    assert run_prepare("iwslt14", tmp_path, **given).returncode == 0  # the same data settings
    assert len(server.requests) == requests
    assert json.loads((tmp_path / "data" / "stages.json").read_text()) == stages


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


def test_wmt17_download_mode_joins_the_four_corpora(server, tmp_path, monkeypatch):
    """The four statmt.org archives, served here. The dev and test sets come through sacrebleu's
    own downloader, which needs the internet: here (only here) its output is replaced."""
    urls, texts = [], {}
    for number, (url, corpus) in enumerate(zip(wmt17.ARCHIVES, wmt17.CORPORA)):
        name = os.path.basename(url)
        for lang in ("en", "de"):
            texts[corpus, lang] = multi30k("train", lang, 2000)[number * 500:(number + 1) * 500]
        server.files["/" + name] = tgz({f"training/{corpus}.{lang}": lines(*texts[corpus, lang])
                                        for lang in ("en", "de")})
        urls.append(server.url("/" + name))
    monkeypatch.setattr(wmt17, "ARCHIVES", tuple(urls))
    sides = {}

    def side(test_set, pair, which):
        sides[test_set, which] = lines(*multi30k("val", "en" if which == "src" else "de", 20))
        return [line + b"\n" for line in sides[test_set, which].split(b"\n")[:-1]]

    monkeypatch.setattr(wmt17, "sacrebleu_side", side)
    from deepnet_fairseq.recipes.spec.settings import resolve

    cfg = resolve("wmt17", {"SIZE": "smoke", "SOURCE": "download", "DEEPNET_WORK": str(tmp_path),
                            "VOCAB": "600", "TRAIN_LINES": "1500"}, REPO)
    assert prepare.prepare(cfg) == 0
    raw = tmp_path / "data" / "raw"
    for lang in ("en", "de"):  # the corpora in the paper's order, cut at TRAIN_LINES
        joined = [line for corpus in wmt17.CORPORA for line in texts[corpus, lang]]
        assert read(raw / f"train.en-de.{lang}") == lines(*joined[:1500])
    assert read(raw / "test.en-de.de") == sides["wmt17", "ref"]
    assert (tmp_path / "data" / "bin" / ".done").exists()


def preprocess_runs(work) -> int:
    """How many fairseq-preprocess runs writing under WORK have started: processes that have
    exec'd the command, so the launcher's signal set-up is in place (one command line a run: a
    run's own workers share it)."""
    lines = map(process_cmdline, filter(str.isdigit, os.listdir("/proc")))
    return len({line for line in lines if "fairseq-preprocess" in line and f"{work}/" in line})


def test_sigterm_stops_prepare_and_its_fairseq_preprocess_and_a_rerun_finishes(tmp_path):
    env = {**os.environ, "SIZE": "smoke", "SOURCE": "multi30k", "DEEPNET_WORK": str(tmp_path),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(["bash", os.path.join(REPO, "scripts", "wmt17", "prepare.sh")],
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "fairseq-preprocess ->" in line:
            wait_for(lambda: preprocess_runs(tmp_path) == 1, "fairseq-preprocess", procs=[proc])
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM, "".join(seen) + rest
    assert "stopped by SIGTERM; run it again to resume" in rest
    left = [line for line in map(process_cmdline, filter(str.isdigit, os.listdir("/proc")))
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


def _environ_has(pid, text):
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return text.encode() in handle.read()
    except OSError:
        return False


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
            wait_for(lambda: preprocess_runs(work) == 3, "3 fairseq-preprocess runs", procs=[proc])
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM, "".join(seen) + rest
    left = [pid for pid in filter(str.isdigit, os.listdir("/proc"))
            if _environ_has(pid, f"DEEPNET_WORK={work}")]
    assert left == [], f"processes left behind: {list(map(process_cmdline, left))}"
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
