"""The prepare step of every dataset, in one process: raw text -> cleaned text, a joint
sentencepiece model, fairseq binaries (``python -m deepnet_fairseq.recipes DATASET prepare``,
which ``scripts/<dataset>/prepare.sh`` runs).

Raw text comes from ``SOURCE``: ``download`` (the dataset's public archives, resumable,
verified before they take their final name), ``local`` (``LOCAL_DIR``) or ``multi30k`` (the
corpus shipped in ``deepnet_fairseq/corpora``). Every step writes under a temporary name and
publishes when complete, so re-running skips what is done and an interrupted step leaves
nothing half-written behind; only directories the recipes created are ever deleted
(``workdir.py``). Text is handled as bytes split on ``\\n`` only, exactly as the cleaning step
and the alignment check count it.

Output in ``$WORK/data``: ``raw/`` (the references of evaluation), ``clean/``, ``spm.model``,
``spm/``, ``bin/`` (with ``langs.txt`` and ``lang_pairs.txt`` for OPUS-100), ``config.json``,
``preprocess.log``.
"""

import contextlib
import glob
import gzip
import http.client
import json
import os
import re
import resource
import shutil
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
import zlib
from typing import Iterable, Iterator, List, Optional, Tuple

from . import atomic_open, write_atomically, write_json
from .corpus import SPLITS, prepare as prepare_text
from .launch import paths
from ..processes import Interrupted, run_forwarding, run_many
from .runner import log
from .settings import SettingError, Settings
from ..storage.directories import (MARKER, RunLock, building, fresh, is_ours, make_dirs, publish,
                                  remove_tree)
from ..storage.fileio import (RecordError, append_copy, extract_tar, move, open_no_follow, read_json,
                              remove_file)

# WMT-17 En-De training data (the statmt.org archives) and the corpora inside them
WMT17_ARCHIVES = (
    "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
    "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
    "http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz",
    "http://data.statmt.org/wmt17/translation-task/rapid2016.tgz",
)
WMT17_CORPORA = ("europarl-v7.de-en", "commoncrawl.de-en", "news-commentary-v12.de-en",
                 "rapid2016.de-en")
# IWSLT-14 de-en: the test set is these five files together, as in fairseq's example
IWSLT14_TEST_SETS = ("IWSLT14.TED.dev2010", "IWSLT14.TED.tst2010", "IWSLT14.TED.tst2011",
                     "IWSLT14.TED.tst2012", "IWSLT14.TEDX.dev2012")
IWSLT14_VALID_EVERY = 23  # every 23rd training line is held out for validation

DOWNLOAD_ATTEMPTS = 5
RETRY_DELAY_S = 10
PROGRESS_S = 30


class PrepareError(SettingError):
    """Input the prepare step cannot use: one line, saying what to do (exit status 2)."""


# ---- downloads --------------------------------------------------------------------------------

def fetch(url: str, dest: str, say=print) -> str:
    """DEST downloaded from URL once: into DEST.part (resumed where a server allows ranges),
    checked (a .tgz / .tar.gz must list, a .gz must decompress), then renamed to DEST."""
    if os.path.isfile(dest):
        say(f"have {os.path.basename(dest)}")
        return dest
    make_dirs(os.path.dirname(dest))
    part = dest + ".part"
    for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
        failure, retry = _download(url, part, say)
        if failure is None:
            break
        if not retry or attempt == DOWNLOAD_ATTEMPTS:
            raise PrepareError(f"download of {url} failed ({failure}); run again to resume, or "
                               f"download it yourself to {dest}")
        say(f"download of {url} failed ({failure}); trying again in {RETRY_DELAY_S} s")
        time.sleep(RETRY_DELAY_S)
    _verify(part)
    move(part, dest)
    return dest


def _download(url: str, part: str, say) -> Tuple[Optional[str], bool]:
    """URL into PART from where PART ends; (None, _) when complete, else (what failed, whether
    trying again may help). A progress line every PROGRESS_S seconds."""
    have = os.path.getsize(part) if os.path.isfile(part) else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    say(f"downloading {url}" + (f" (resuming at {have:,} bytes)" if have else ""))
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            resumed = have and response.status == 206
            total = int(response.headers.get("Content-Length") or 0) + (have if resumed else 0)
            with open_no_follow(part, "ab" if resumed else "wb") as out:
                shown = time.monotonic()
                while True:
                    block = response.read(1 << 20)
                    if not block:
                        return None, False
                    out.write(block)
                    if time.monotonic() - shown > PROGRESS_S:
                        shown = time.monotonic()
                        say(f"  {out.tell() / 1e6:,.0f} of {total / 1e6:,.0f} MB")
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # the range starts at the end: the part is complete
            return None, False
        # a missing file (4xx) does not come back on retrying
        return f"HTTP {err.code} {err.reason}", not 400 <= err.code < 500
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError,
            TimeoutError) as err:
        return str(getattr(err, "reason", err)), True


def _verify(path: str) -> None:
    try:
        if path.endswith((".tgz.part", ".tar.gz.part")):
            with tarfile.open(path, "r:gz") as archive:
                archive.getmembers()
        elif path.endswith(".gz.part"):
            with gzip.open(path) as stream:
                while stream.read(1 << 20):
                    pass
    except (tarfile.TarError, OSError, EOFError) as err:
        raise PrepareError(f"{path} is not a valid archive ({err}); delete it and run again")


def extract(archive: str, directory: str, say=print) -> str:
    """ARCHIVE unpacked once into DIRECTORY (its .done marks a complete extraction); members
    that would land outside it (absolute paths, .., links out) are refused by tarfile's data
    filter."""
    if not os.path.isfile(os.path.join(directory, ".done")):
        say(f"unpacking {os.path.basename(archive)}")
        with building(directory) as tmp:
            try:
                extract_tar(archive, tmp)
            except tarfile.FilterError as err:
                raise PrepareError(f"{archive}: {err}; the archive is not what the recipe expects")
            publish(tmp, directory)
    return directory


# ---- text -------------------------------------------------------------------------------------

def read_lines(path: str, limit: int = 0) -> Iterator[bytes]:
    """The lines of PATH (plain or .gz) as bytes ending in b"\\n", split on \\n only; the first
    LIMIT of them when LIMIT > 0."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as stream:
            for number, line in enumerate(stream, 1):
                if 0 < limit < number:
                    return
                yield line if line.endswith(b"\n") else line + b"\n"
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:  # not gzip, truncated, corrupt
        raise PrepareError(f"{path} is not a complete gzip file ({err}); download or copy it "
                           f"again") from None


def first(lines: Iterable[bytes], limit: int) -> Iterator[bytes]:
    for number, line in enumerate(lines, 1):
        if 0 < limit < number:
            return
        yield line


def write_lines(path: str, lines: Iterable[bytes]) -> None:
    with atomic_open(path, "wb") as out:
        out.writelines(lines)


def count_lines(path: str) -> int:
    return sum(1 for _ in read_lines(path))


def find_local(directory: str, name: str) -> Optional[str]:
    """DIRECTORY/NAME or DIRECTORY/NAME.gz, whichever exists."""
    for candidate in (name, name + ".gz"):
        if os.path.isfile(os.path.join(directory, candidate)):
            return os.path.join(directory, candidate)
    return None


def split_limits(cfg: Settings):
    """(split, file stem of SOURCE=local, lines to keep) for train, valid and test."""
    return [(split, cfg[f"LOCAL_{split.upper()}"], cfg.int(f"{split.upper()}_LINES"))
            for split in SPLITS]


def local_pair(cfg: Settings, directory: str, src: str, tgt: str, out: str) -> None:
    """LOCAL_DIR text of SRC-TGT, {LOCAL_TRAIN,LOCAL_VALID,LOCAL_TEST}.{SRC,TGT}[.gz] in
    DIRECTORY, into OUT/{train,valid,test}.SRC-TGT.{SRC,TGT}."""
    for split, stem, limit in split_limits(cfg):
        for lang in (src, tgt):
            found = find_local(directory, f"{stem}.{lang}")
            if found is None:
                raise PrepareError(f"{directory}/{stem}.{lang}[.gz] not found (set LOCAL_TRAIN / "
                                   "LOCAL_VALID / LOCAL_TEST to the file stems)")
            write_lines(f"{out}/{split}.{src}-{tgt}.{lang}", read_lines(found, limit))


def local_dir(cfg: Settings) -> str:
    directory = cfg.get("LOCAL_DIR")
    if not directory or not os.path.isdir(directory):
        raise PrepareError(f"SOURCE=local needs LOCAL_DIR, a directory of text files (now: "
                           f"{directory or 'unset'}); or SOURCE=multi30k for the shipped corpus")
    return directory


def check_aligned(directory: str, pairs: List[str]) -> None:
    """Every split of every pair is there, non-empty and line-aligned (counted as cleaning
    counts: on \\n, a last line without one is a line)."""
    for pair in pairs:
        src, tgt = pair.split("-")
        for split in SPLITS:
            a, b = (f"{directory}/{split}.{pair}.{lang}" for lang in (src, tgt))
            if not (os.path.getsize(a) and os.path.getsize(b)):
                raise PrepareError(f"{a} or {b} is empty")
            if count_lines(a) != count_lines(b):
                raise PrepareError(f"{a} and {b} differ in length ({count_lines(a)} and "
                                   f"{count_lines(b)} lines): not line-aligned")


# ---- raw text of each dataset -----------------------------------------------------------------

def _sacrebleu_side(test_set: str, pair: str, side: str) -> List[bytes]:
    """A WMT dev or test side through sacrebleu, which checks its downloads' checksums."""
    if shutil.which("sacrebleu") is None:
        raise PrepareError("sacrebleu not found on PATH; run: bash scripts/install.sh")
    proc = subprocess.run(["sacrebleu", "-t", test_set, "-l", pair, "--echo", side],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode:
        raise PrepareError(f"sacrebleu -t {test_set} -l {pair} --echo {side} failed: "
                           f"{proc.stderr.decode('utf-8', 'replace').strip()[-300:]}")
    return [line + b"\n" for line in proc.stdout.split(b"\n")[:-1]]


def download_wmt17(cfg: Settings, src: str, tgt: str, out: str, say) -> None:
    pair = f"{src}-{tgt}"
    downloads = cfg["DOWNLOAD_DIR"]
    for url in WMT17_ARCHIVES:
        archive = fetch(url, os.path.join(downloads, os.path.basename(url)), say)
        extract(archive, archive[:-len(".tgz")], say)
    limits = {split: limit for split, _, limit in split_limits(cfg)}
    for lang in (src, tgt):
        files = []
        for corpus in WMT17_CORPORA:
            found = sorted(glob.glob(os.path.join(downloads, "**", f"{corpus}.{lang}"),
                                     recursive=True))
            if not found:
                raise PrepareError(f"{corpus}.{lang} not found in the archives under {downloads}")
            files.append(found[0])
        write_lines(f"{out}/train.{pair}.{lang}",
                    first((line for path in files for line in read_lines(path)), limits["train"]))
        side = "src" if lang == src else "ref"
        for split, test_set in (("valid", "wmt16"), ("test", "wmt17")):
            write_lines(f"{out}/{split}.{pair}.{lang}",
                        first(_sacrebleu_side(test_set, pair, side), limits[split]))


_MARKUP = re.compile(rb"^\s*<")
_SEG = re.compile(rb'<seg id="[0-9]*">\s*(.*?)\s*</seg>')


def download_iwslt14(cfg: Settings, src: str, tgt: str, out: str, say) -> None:
    pair = f"{src}-{tgt}"
    archive = fetch(cfg["IWSLT_URL"], os.path.join(cfg["DOWNLOAD_DIR"], "de-en.tgz"), say)
    unpacked = extract(archive, os.path.join(cfg["DOWNLOAD_DIR"], "de-en"), say)
    found = sorted(glob.glob(os.path.join(unpacked, "**", "train.tags.de-en.de"), recursive=True))
    if not found:
        raise PrepareError(f"train.tags.de-en.de not in {cfg['IWSLT_URL']}")
    directory = os.path.dirname(found[0])
    limits = {split: limit for split, _, limit in split_limits(cfg)}
    for lang in (src, tgt):
        # training text: the lines that are not xml markup; every 23rd one for validation
        text = [line for line in read_lines(f"{directory}/train.tags.de-en.{lang}")
                if not _MARKUP.match(line)]
        held_out = [n % IWSLT14_VALID_EVERY == 0 for n in range(1, len(text) + 1)]
        write_lines(f"{out}/train.{pair}.{lang}",
                    first((line for line, h in zip(text, held_out) if not h), limits["train"]))
        write_lines(f"{out}/valid.{pair}.{lang}",
                    first((line for line, h in zip(text, held_out) if h), limits["valid"]))
        test = (match.group(1) + b"\n" for name in IWSLT14_TEST_SETS
                for line in read_lines(f"{directory}/{name}.de-en.{lang}.xml")
                for match in [_SEG.search(line)] if match)
        write_lines(f"{out}/test.{pair}.{lang}", first(test, limits["test"]))


def opus100_langs(cfg: Settings, supervised: Optional[str]) -> List[str]:
    langs = cfg["LANGS"].split()
    if langs == ["all"]:
        if supervised is None:
            raise PrepareError("SOURCE=local needs LANGS, the languages to take from LOCAL_DIR")
        langs = sorted(re.sub(r"-?en-?", "", name, count=1) for name in os.listdir(supervised)
                       if os.path.isdir(os.path.join(supervised, name)))
    if not langs:
        raise PrepareError("LANGS is empty: name the non-English side of each pair, or all")
    if "en" in langs:
        raise PrepareError("LANGS lists the non-English side of each pair; drop 'en'")
    return langs


def raw_opus100(cfg: Settings, out: str, say) -> List[str]:
    supervised = None
    if cfg["SOURCE"] == "download":
        archive = fetch(cfg["OPUS_URL"], os.path.join(cfg["DOWNLOAD_DIR"],
                                                      "opus-100-corpus-v1.0.tar.gz"), say)
        unpacked = extract(archive, os.path.join(cfg["DOWNLOAD_DIR"], "opus-100"), say)
        found = sorted(glob.glob(os.path.join(unpacked, "**", "supervised"), recursive=True))
        if not found:
            raise PrepareError(f"no supervised/ directory in {archive}")
        supervised = found[0]
    pairs = []
    for x in opus100_langs(cfg, supervised):
        root = supervised or local_dir(cfg)
        for name in (f"{x}-en", f"en-{x}"):
            if os.path.isdir(os.path.join(root, name)):
                directory = os.path.join(root, name)
                break
        else:
            directory = root  # SOURCE=local may keep one pair's files at its top
        for split, stem, limit in split_limits(cfg):
            for lang in (x, "en"):
                if supervised:  # OPUS-100's names: opus.en-X-dev.X
                    name = f"opus.{os.path.basename(directory)}-{split.replace('valid', 'dev')}"
                else:
                    name = stem
                found_file = find_local(directory, f"{name}.{lang}")
                if found_file is None:
                    raise PrepareError(f"no {split} text for {lang} in {directory} (pair {x}-en)")
                write_lines(f"{out}/{split}.{x}-en.{lang}", read_lines(found_file, limit))
        pairs.append(f"{x}-en")
    return pairs


DOWNLOADS = {"wmt17": download_wmt17, "iwslt14": download_iwslt14}


def raw_text(cfg: Settings, out: str, say) -> List[str]:
    """The dataset's raw text into OUT; returns its pairs."""
    if cfg.dataset == "opus100":
        return raw_opus100(cfg, out, say)
    src, tgt = cfg["SRC"], cfg["TGT"]
    if cfg["SOURCE"] == "download":
        DOWNLOADS[cfg.dataset](cfg, src, tgt, out, say)
    else:
        local_pair(cfg, local_dir(cfg), src, tgt, out)
    return [f"{src}-{tgt}"]


# ---- binaries ---------------------------------------------------------------------------------

def preprocess_command(cfg: Settings, src: str, tgt: str, dest: str, workers: int,
                       *options: str) -> List[str]:
    prefix = f"{paths(cfg)['DATA_DIR']}/spm/{{}}.{src}-{tgt}"
    return ["fairseq-preprocess", "--source-lang", src, "--target-lang", tgt,
            "--trainpref", prefix.format("train"), "--validpref", prefix.format("valid"),
            "--testpref", prefix.format("test"), "--destdir", dest,
            "--workers", str(workers), *options]


def binarise(cfg: Settings, src: str, tgt: str, dest: str, *options: str) -> None:
    """fairseq-preprocess of one pair of DATA_DIR/spm into DEST (``WORKERS`` of its workers),
    its output in preprocess.log; a signal reaches fairseq-preprocess and its workers, and
    stops this step."""
    data = paths(cfg)["DATA_DIR"]
    command = preprocess_command(cfg, src, tgt, dest, cfg.int("WORKERS"), *options)
    code, signum = run_forwarding(command, os.environ, [os.path.join(data, "preprocess.log")])
    if signum:
        raise Interrupted(signum)
    if code:
        raise PrepareError(f"fairseq-preprocess failed for {src}-{tgt}; see "
                           f"{data}/preprocess.log")


def binarise_pairs(cfg: Settings, pairs: List[str], tmp: str, dictionary: str, say) -> None:
    """fairseq-preprocess of each of PAIRS into TMP, several pairs at once: WORKERS processes
    in all, as min(WORKERS, pairs) fairseq-preprocess runs at a time of WORKERS // that
    workers each (a pair's fixed cost, starting fairseq and loading the dictionary, is paid
    in parallel too; its binaries do not depend on its workers). Each run writes into its own
    TMP/PAIR.part/, whose files are moved into TMP and the pair marked done (TMP/.done-PAIR)
    as it ends; its output goes to TMP/PAIR.log, then to DATA_DIR/preprocess.log. A signal
    stops every run (the .part directories are left for the next run to replace)."""
    data = paths(cfg)["DATA_DIR"]
    workers = cfg.int("WORKERS")
    at_once = min(workers, len(pairs))
    commands, logs, parts = [], [], []
    for pair in pairs:
        part = fresh(os.path.join(tmp, f"{pair}.part"))
        parts.append(part)
        logs.append(os.path.join(tmp, f"{pair}.log"))
        remove_file(logs[-1])
        commands.append(preprocess_command(cfg, *pair.split("-"), part, workers // at_once,
                                           "--srcdict", dictionary, "--tgtdict", dictionary))
    failed, done = [], []

    def finished(index, code):
        pair, part, log_path = pairs[index], parts[index], logs[index]
        append_copy(log_path, os.path.join(data, "preprocess.log"))
        if code:
            failed.append(pair)
            return False
        for name in sorted(os.listdir(part)):
            if name == "preprocess.log":  # fairseq's own log of the run: one for all pairs
                append_copy(os.path.join(part, name), os.path.join(tmp, name))
            elif name != MARKER:
                move(os.path.join(part, name), os.path.join(tmp, name))
        remove_tree(part)
        remove_file(log_path)
        open_no_follow(os.path.join(tmp, f".done-{pair}"), "w").close()
        done.append(pair)
        say(f"binarised {pair} ({len(done)} of {len(pairs)})")
        return True

    say(f"{len(pairs)} pair(s) to binarise, {at_once} at a time with --workers "
        f"{workers // at_once} each")
    signum = run_many(commands, os.environ, logs, at_once, finished)
    if signum:
        raise Interrupted(signum)
    if failed:
        raise PrepareError(f"fairseq-preprocess failed for {', '.join(failed)}; see "
                           f"{data}/preprocess.log")


def binarise_all(cfg: Settings, pairs: List[str], say) -> None:
    binary = paths(cfg)["BIN"]
    if os.path.isfile(os.path.join(binary, ".done")):
        return
    if cfg.dataset != "opus100":
        say(f"fairseq-preprocess -> {binary}")
        with building(binary) as tmp:
            src, tgt = pairs[0].split("-")
            binarise(cfg, src, tgt, tmp, "--joined-dictionary")
            publish(tmp, binary)
        return
    # OPUS-100: pair by pair into one BIN.tmp that an interrupted run resumes (a pair is done
    # once its marker is written), against one shared dictionary: every sentencepiece piece but
    # <unk> (fairseq adds its own specials), so that all pairs share the same indices
    say(f"fairseq-preprocess, {len(pairs)} pair(s), one shared dictionary -> {binary}")
    tmp = make_dirs(binary + ".tmp")
    dictionary = os.path.join(tmp, "dict.txt")
    with open(os.path.join(paths(cfg)["DATA_DIR"], "spm.vocab"), encoding="utf-8") as vocab:
        write_atomically(dictionary, "".join(line.split("\t")[0] + " 1\n"
                                             for line in list(vocab)[1:]))
    todo = [pair for pair in pairs if not os.path.isfile(os.path.join(tmp, f".done-{pair}"))]
    if todo:
        binarise_pairs(cfg, todo, tmp, dictionary, say)
    langs = [pair.split("-")[0] for pair in pairs]
    write_atomically(os.path.join(tmp, "langs.txt"), ",".join(["en", *langs]) + "\n")
    write_atomically(os.path.join(tmp, "lang_pairs.txt"),
                     ",".join(f"{x}-en,en-{x}" for x in langs) + "\n")
    publish(tmp, binary)


# ---- the step ---------------------------------------------------------------------------------

def own_peak_kb() -> int:
    """This process's peak resident memory in kB since it exec'd: ``VmHWM`` (Linux), else
    ``RUSAGE_SELF`` (which may include the image before the exec)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class Stages:
    """Each stage's wall time, CPU time (of every process, so that a shared machine's load does
    not hide a parallel stage's work) and the peak resident memory so far, of this process and
    of its largest child (a worker, fairseq-preprocess), logged and kept in
    DATA_DIR/stages.json (a stage skipped as done keeps its earlier figures). Where a prepare
    at scale spends its time.

    The kernel's maxima (``getrusage``) survive ``exec``, and the scripts ``exec python``: the
    children's (``RUSAGE_CHILDREN``) starts at the largest child the shell had reaped before,
    and the process's own (``RUSAGE_SELF``) at the image it replaced (a launcher's, when that
    spawned it). So this process's own peak is its memory's high-water mark, ``VmHWM`` of
    /proc/self/status (``RUSAGE_SELF`` where there is no /proc), and a child of this process is
    counted only once the children's maximum rises above what it was when the stages started
    (``children_before``)."""

    def __init__(self, path: str, say):
        self.path, self.say = path, say
        self.figures = {}
        self.children_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as stored:
                self.figures = json.load(stored)

    @staticmethod
    def cpu_seconds() -> float:
        """CPU time (user + system) of this process and its children that have ended (the
        workers, fairseq-preprocess and its own workers) so far."""
        return sum(usage.ru_utime + usage.ru_stime for usage in map(
            resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))

    def peak(self) -> Tuple[float, str]:
        """(MB, whose) of the largest resident set so far of this process or of a child it
        started; a child the shell ran before ``exec`` is not one (class docstring)."""
        own = own_peak_kb()
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # kB on Linux
        if children > self.children_before and children > own:
            return children / 1024, "its largest child"
        return own / 1024, "this process"

    @contextlib.contextmanager
    def __call__(self, name: str):
        start, cpu = time.monotonic(), self.cpu_seconds()
        yield
        seconds, cpu = time.monotonic() - start, self.cpu_seconds() - cpu
        peak_mb, whose = self.peak()
        self.figures[name] = {"seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1),
                              "peak_rss_mb": round(peak_mb)}
        write_json(self.path, self.figures)
        self.say(f"{name}: {seconds:.1f} s ({cpu:.1f} s of CPU), peak memory so far "
                 f"{peak_mb:,.0f} MB ({whose})")


def raw_pairs(raw: str) -> List[str]:
    """The pairs of published raw text, from its train.PAIR.LANG names (so a later LANGS
    needs a fresh WORK)."""
    return sorted({os.path.basename(path).split(".")[1]
                   for path in glob.glob(os.path.join(raw, "train.*-*.*"))})


# the settings the prepared data depends on: a data directory holds the data of one value each
DATA_SETTINGS = ("SOURCE", "LOCAL_DIR", "SRC", "TGT", "LANGS", "VOCAB", "SPM_SENTENCES",
                 "MAX_LEN", "LEN_RATIO", "ENCODING")


def data_settings(dataset: str, settings: dict) -> dict:
    """The dataset and the DATA_SETTINGS values of ``settings`` (name -> value)."""
    return {"dataset": dataset, **{k: str(settings[k]) for k in DATA_SETTINGS if k in settings}}


def prepared_otherwise(cfg: Settings, data: str) -> Optional[str]:
    """Why DATA, already (partly) prepared, is not the data of these settings (its record,
    ``config.json``, says other data settings), or None."""
    started = [p for p in ("raw/.done", "spm.model", "bin/.done")
               if os.path.exists(os.path.join(data, p))]
    try:
        record = read_json(os.path.join(data, "config.json"))
    except RecordError as err:
        return str(err) if started else None
    if not started or record is None:
        return None
    had = data_settings(record.get("dataset", ""), {
        k: v["value"] for k, v in record.get("settings", {}).items()})
    wanted = data_settings(cfg.dataset, cfg.values)
    changed = [f"{k}={had.get(k, '(unset)')} there, {wanted.get(k, '(unset)')} now"
               for k in sorted(set(had) | set(wanted)) if had.get(k) != wanted.get(k)]
    if not changed:
        return None
    return (f"{data} holds data prepared with other settings ({'; '.join(changed)}): reusing it "
            f"would train on the old data. Choose another DEEPNET_WORK, or delete {data} (the "
            f"recipes made it) to prepare it again")


def prepare(cfg: Settings) -> int:
    """Every step of the dataset's preparation that is not done yet; returns 0. One prepare
    per data directory at a time (its lock), and only for the settings it was prepared with."""
    def say(message):
        log(cfg, "prepare", message)

    where = paths(cfg)
    data = where["DATA_DIR"]
    for tool in ("fairseq-preprocess",):
        if shutil.which(tool) is None:
            raise PrepareError(f"{tool} not found on PATH; run: bash scripts/install.sh")
    if os.path.isdir(data) and not is_ours(data):
        raise PrepareError(f"{data} exists and the recipes did not create it (no {MARKER} in "
                           "it): refusing to write into it. Choose another DEEPNET_WORK, or "
                           "move the directory away")
    make_dirs(data)
    with RunLock(data, ".prepare.lock", "one prepare per data directory"):
        problem = prepared_otherwise(cfg, data)
        if problem:
            raise PrepareError(problem)
        write_json(os.path.join(data, "config.json"),
                   {"step": "prepare", "dataset": cfg.dataset, "settings": cfg.as_json()})
        return _prepare_steps(cfg, where, say)


def _prepare_steps(cfg: Settings, where: dict, say) -> int:
    data, raw = where["DATA_DIR"], where["RAW"]
    stage = Stages(os.path.join(data, "stages.json"), say)
    if not os.path.isfile(os.path.join(raw, ".done")):
        with stage("raw text"), building(raw) as tmp:
            check_aligned(tmp, raw_text(cfg, tmp, say))
            publish(tmp, raw)
    pairs = raw_pairs(raw)
    for pair in pairs:
        src, tgt = pair.split("-")
        counts = ", ".join(f"{count_lines(f'{raw}/{split}.{pair}.{src}'):,} {split}"
                           for split in SPLITS)
        say(f"raw text {pair}: {counts} pairs")
    try:
        prepare_text(data, pairs, cfg.int("VOCAB"), cfg.int("SPM_SENTENCES"), cfg.int("MAX_LEN"),
                     cfg.float("LEN_RATIO"), cfg["ENCODING"], stage, cfg.int("WORKERS"))
    except (ValueError, RuntimeError) as err:  # bad text, a vocabulary the corpus cannot carry
        raise PrepareError(str(err)) from None
    if not os.path.isfile(os.path.join(where["BIN"], ".done")):
        with stage("binarise"):
            binarise_all(cfg, pairs, say)
    say(f"done: {where['BIN']}")
    return 0
