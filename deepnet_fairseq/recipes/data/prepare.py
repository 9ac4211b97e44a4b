"""The prepare step of every dataset, in one process: raw text -> cleaned text, a joint
sentencepiece model, fairseq binaries (``python -m deepnet_fairseq.recipes DATASET prepare``,
which ``scripts/<dataset>/prepare.sh`` runs).

Raw text comes from ``SOURCE``: ``download`` (the dataset's public archives, resumable,
verified before they take their final name), ``local`` (``LOCAL_DIR``, or the files
``TRAIN_TEXT`` / ``VALID_TEXT`` / ``TEST_TEXT`` name), ``multi30k`` (the corpus shipped in
``deepnet_fairseq/corpora``) or ``generate`` (a generated task: the declaration writes it), as the dataset's declaration says (``datasets/``: its
``raw_text``); everything after the raw text is the same for every dataset. Every step
writes under a temporary name and publishes when complete, so re-running skips what is done
and an interrupted step leaves nothing half-written behind; only directories the recipes
created are ever deleted (``storage/directories.py``). Text is handled as bytes split on ``\\n`` only,
exactly as the cleaning step and the alignment check count it.

Output in ``$WORK/data``: ``raw/`` (the references of evaluation), ``clean/``, ``spm.model``,
``spm/``, ``bin/`` (with ``langs.txt`` and ``lang_pairs.txt`` for a multilingual dataset),
``config.json``, ``preprocess.log``.
"""

import contextlib
import glob
import os
import resource
import shutil
import time
from typing import List, Tuple

from .. import write_atomically, write_json
from ...storage.records import write_record
from .corpus import SPLITS, prepare as prepare_text
from ..spec.paths import paths
from ...processes import Interrupted, run_forwarding, run_many
from ..base.console import log
from .checks import prepared_otherwise
from ..base.rawtext import PrepareError, check_aligned, check_inputs, count_lines
from ..spec.settings import Settings
from ...storage.directories import (MARKER, RunLock, building, fresh, is_ours, make_dirs, publish,
                                    remove_tree)
from ...storage.fileio import append_copy, move, open_no_follow, read_json, remove_file


def raw_text(cfg: Settings, out: str, say) -> List[str]:
    """The dataset's raw text into OUT, as its declaration obtains it; returns its pairs."""
    return cfg.declaration.raw_text(cfg, out, say)


# ---- binaries ---------------------------------------------------------------------------------

def preprocess_command(cfg: Settings, src: str, tgt: str, dest: str, workers: int,
                       *options: str) -> List[str]:
    prefix = f"{paths(cfg).data_dir}/spm/{{}}.{src}-{tgt}"
    return ["fairseq-preprocess", "--source-lang", src, "--target-lang", tgt,
            "--trainpref", prefix.format("train"), "--validpref", prefix.format("valid"),
            "--testpref", prefix.format("test"), "--destdir", dest,
            "--workers", str(workers), *options]


def binarise(cfg: Settings, src: str, tgt: str, dest: str, *options: str) -> None:
    """fairseq-preprocess of one pair of DATA_DIR/spm into DEST (``WORKERS`` of its workers),
    its output in preprocess.log; a signal reaches fairseq-preprocess and its workers, and
    stops this step."""
    data = paths(cfg).data_dir
    command = preprocess_command(cfg, src, tgt, dest, cfg.data.workers, *options)
    code, signum = run_forwarding(command, os.environ, [os.path.join(data, "preprocess.log")])
    if signum:
        raise Interrupted(signum)
    if code:
        raise PrepareError(f"fairseq-preprocess failed for {src}-{tgt}; see {data}/preprocess.log")


def binarise_pairs(cfg: Settings, pairs: List[str], tmp: str, dictionary: str, say) -> None:
    """fairseq-preprocess of each of PAIRS into TMP, several pairs at once: WORKERS processes
    in all, as min(WORKERS, pairs) fairseq-preprocess runs at a time of WORKERS // that
    workers each (a pair's fixed cost, starting fairseq and loading the dictionary, is paid
    in parallel too; its binaries do not depend on its workers). Each run writes into its own
    TMP/PAIR.part/, whose files are moved into TMP and the pair marked done (TMP/.done-PAIR)
    as it ends; its output goes to TMP/PAIR.log, then to DATA_DIR/preprocess.log. A signal
    stops every run (the .part directories are left for the next run to replace)."""
    data = paths(cfg).data_dir
    workers = cfg.data.workers
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
    binary = paths(cfg).bin
    if os.path.isfile(os.path.join(binary, ".done")):
        return
    if not cfg.declaration.task.shared_dictionary:  # one pair
        say(f"fairseq-preprocess -> {binary}")
        with building(binary) as tmp:
            src, tgt = pairs[0].split("-")
            binarise(cfg, src, tgt, tmp, "--joined-dictionary")
            publish(tmp, binary)
        return
    # many pairs (OPUS-100): pair by pair into one BIN.tmp that an interrupted run resumes (a pair
    # is done once its marker is written), against one shared dictionary: every sentencepiece piece
    # but <unk> (fairseq adds its own specials), so that all pairs share the same indices
    say(f"fairseq-preprocess, {len(pairs)} pair(s), one shared dictionary -> {binary}")
    tmp = make_dirs(binary + ".tmp")
    dictionary = os.path.join(tmp, "dict.txt")
    with open(os.path.join(paths(cfg).data_dir, "spm.vocab"), encoding="utf-8") as vocab:
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
        # figures, not a record any step decides by (no schema); a damaged file is one line
        self.figures = read_json(path) or {}

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


def prepare(cfg: Settings) -> int:
    """Every step of the dataset's preparation that is not done yet; returns 0. One prepare
    per data directory at a time (its lock), and only for the settings it was prepared with."""
    def say(message):
        log(cfg, "prepare", message)

    where = paths(cfg)
    data = where.data_dir
    if not os.path.isfile(os.path.join(where.raw, ".done")):  # raw text still to be read
        check_inputs(cfg)  # before anything is created: a missing input leaves nothing behind
    for tool in ("fairseq-preprocess",):
        if shutil.which(tool) is None:
            raise PrepareError(f"{tool} not found on PATH; run: bash scripts/install.sh")
    if os.path.isdir(data) and not is_ours(data):
        raise PrepareError(f"{data} exists and the recipes did not create it (no {MARKER} in "
                           "it): refusing to write into it. Choose another DEEPNET_WORK, or "
                           "move the directory away")
    make_dirs(data)
    with RunLock(data, ".prepare.lock", "prepare", "one prepare per data directory"):
        problem = prepared_otherwise(cfg, data)
        if problem:
            raise PrepareError(problem)
        write_record(os.path.join(data, "config.json"), "data-config",
                     {"step": "prepare", "dataset": cfg.dataset, "settings": cfg.as_json()})
        return _prepare_steps(cfg, where, say)


def _prepare_steps(cfg: Settings, where: dict, say) -> int:
    data, raw = where.data_dir, where.raw
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
        prepare_text(data, pairs, cfg.data.vocab, cfg.data.spm_sentences, cfg.data.max_len,
                     cfg.data.len_ratio, cfg.text.data.encoding, stage, cfg.data.workers)
    except (ValueError, RuntimeError) as err:  # bad text, a vocabulary the corpus cannot carry
        raise PrepareError(str(err)) from None
    if not os.path.isfile(os.path.join(where.bin, ".done")):
        with stage("binarise"):
            binarise_all(cfg, pairs, say)
    say(f"done: {where.bin}")
    return 0
