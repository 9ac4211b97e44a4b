"""Quickstart: train a small DeepNet en->de on Multi30k (Elliott et al. 2016, shipped in
deepnet_fairseq/corpora/multi30k), translate its test set and score it with sacreBLEU.

    bash scripts/quickstart.sh                # a translating model: ~8 min on 2 CPU cores, sacreBLEU ~27
    SIZE=smoke bash scripts/quickstart.sh     # ~1 min: checks that the chain runs; its model does not translate
    DEVICE=cuda bash scripts/quickstart.sh    # one GPU: a 512-wide model

Not a paper reproduction (the recipes in scripts/ are): the whole chain sentencepiece ->
fairseq-preprocess -> fairseq-train (DeepNorm) -> fairseq-generate -> sacreBLEU, on the stock
fairseq CLIs. While it trains, a progress line (update, last validation loss, ETA) comes at
least every 30 seconds; at the end, three test sentences beside their references.

Re-running reuses finished steps and resumes training from checkpoint_last.pt (an unreadable
one is replaced by the newest readable update checkpoint); raising QUICKSTART_UPDATES trains
further on the same learning-rate schedule. One quickstart per directory at a time (a second
one says which process holds it); Ctrl-C or SIGTERM stops every process it started.

Environment (defaults in brackets):
  SIZE                quickstart | smoke                                  [quickstart]
  DEVICE              cpu | cuda                                          [cpu]
  QUICKSTART_DIR      output directory                      [runs/quickstart-SIZE-DEVICE]
  QUICKSTART_DATA     Multi30k {train,val,test_2016_flickr}.{en,de}.gz  [the shipped copy]
  QUICKSTART_UPDATES  training updates                       [per size and device, below]
"""

import argparse
import difflib
import gzip
import os
import shutil
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional

from ..methods import TINY_SIZE
from . import write_atomically, write_json
from .runlog import UPDATES, VALID_LOSS
from .runner import Interrupted, signals_interrupt
from .workdir import MARKER, Busy, NotOurs, RunLock, describe_os_error, is_ours, make_dirs

SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}  # ours: Multi30k's
SRC, TGT = "en", "de"
PROGRESS_EVERY_S = 30


@dataclass(frozen=True)
class Size:
    """One quickstart size. Every value was chosen from measured learning curves
    (docs/real-text.md). ``warmup`` is fixed (not derived from ``updates``), so raising
    QUICKSTART_UPDATES on a resumed run continues the same schedule."""
    train_lines: int
    vocab: int
    layers: int
    dim: int
    ffn: int
    heads: int
    dropout: float
    lr: float
    warmup: int
    max_tokens: int
    updates: int
    validate_every: int  # updates between validations (and checkpoints)
    about: str


SIZES: Dict[str, Size] = {
    "quickstart/cpu": Size(29000, 4000, 6, 128, 512, 4, 0.1, 1.5e-3, 400, 2048, 1000, 250,
                           "a translating model within 15 minutes on 2 CPU cores"),
    "quickstart/cuda": Size(29000, 8000, 6, 512, 2048, 8, 0.3, 7e-4, 1000, 8192, 6000, 500,
                            "a 512-wide model on one GPU"),
    "smoke/cpu": Size(3000, 1000, 6, TINY_SIZE["encoder_embed_dim"],
                      TINY_SIZE["encoder_ffn_embed_dim"], TINY_SIZE["encoder_attention_heads"],
                      0.1, 2e-3, 10, 2048, 60, 30,
                      "a one-minute check that the chain runs: its model is not trained "
                      "enough to translate (BLEU about 0)"),
}
SIZES["smoke/cuda"] = SIZES["smoke/cpu"]
NAMES = ("SIZE", "DEVICE", "QUICKSTART_DIR", "QUICKSTART_DATA", "QUICKSTART_UPDATES")


class QuickstartError(RuntimeError):
    """A bad input or a failed step; the message says what to do."""


class BadSetting(QuickstartError):
    """A setting that is misspelled or out of range (exit status 2)."""


@dataclass(frozen=True)
class Settings:
    size_name: str
    device: str
    size: Size
    updates: int
    data: str
    out: str


def default_home() -> str:
    """The repository root in a source checkout (runs/ beside scripts/), else the current
    directory (an installed copy)."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return repo if os.path.isdir(os.path.join(repo, "scripts")) else os.getcwd()


def read_settings(env: Mapping[str, str]) -> Settings:
    """The settings from the environment, every name and value checked before anything runs."""
    problems = []
    for name in sorted(env):
        upper = name.upper()
        if name != upper and upper in NAMES:
            problems.append(f"{name}={env[name]}: setting names are upper case; did you mean "
                            f"{upper}?")
        elif name.startswith("QUICKSTART_") and name not in NAMES:
            close = difflib.get_close_matches(name, NAMES, n=1, cutoff=0.7)
            problems.append(f"{name} is not a quickstart setting"
                            + (f"; did you mean {close[0]}?" if close else
                               f" (they are {', '.join(NAMES)})"))
    size_name, device = env.get("SIZE", "quickstart"), env.get("DEVICE", "cpu")
    if size_name not in ("quickstart", "smoke"):
        problems.append(f"SIZE={size_name}: the quickstart's sizes are quickstart and smoke")
    if device not in ("cpu", "cuda"):
        problems.append(f"DEVICE={device}: the quickstart runs on cpu or cuda")
    size = SIZES.get(f"{size_name}/{device}")
    updates_text = env.get("QUICKSTART_UPDATES", str(size.updates) if size else "1")
    if not updates_text.isdigit() or int(updates_text) < 1:
        problems.append(f"QUICKSTART_UPDATES={updates_text}: expected a whole number >= 1")
    if problems:
        raise BadSetting("\n".join(problems))
    from ..corpora import multi30k_dir

    data = env.get("QUICKSTART_DATA") or multi30k_dir()
    missing = [f"{split}.{lang}.gz" for split in SPLITS.values() for lang in (SRC, TGT)
               if not os.path.isfile(os.path.join(data, f"{split}.{lang}.gz"))]
    if missing:
        raise QuickstartError(f"QUICKSTART_DATA={data} lacks {', '.join(missing)}: it must be a "
                              "Multi30k raw directory (the shipped one is "
                              "deepnet_fairseq/corpora/multi30k)")
    out = os.path.abspath(env.get("QUICKSTART_DIR")
                          or os.path.join(default_home(), "runs", f"quickstart-{size_name}-{device}"))
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise QuickstartError("DEVICE=cuda but torch sees no GPU; run with DEVICE=cpu")
    return Settings(size_name, device, size, int(updates_text), data, out)


def log(message: str) -> None:
    print(f"[quickstart {time.strftime('%H:%M:%S')}] {message}", flush=True)


def minutes(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s"


# ---- data -----------------------------------------------------------------------------------

def read_lines(path: str, limit: int = 0) -> List[str]:
    """The lines of a gzip'd UTF-8 text, split on \\n only (as they are counted); undecodable
    bytes are refused with the line and byte offset."""
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    lines, offset = [], 0
    for number, raw in enumerate(data.split(b"\n"), 1):
        if limit and number > limit:
            break
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise QuickstartError(f"{path} line {number}, byte {offset + err.start} "
                                  f"(uncompressed): not UTF-8; convert the corpus to UTF-8")
        offset += len(raw) + 1
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    return lines


def prepare(cfg: Settings) -> Dict[str, List[str]]:
    """raw text, sentencepiece, binarised data in cfg.out; returns the raw test sides."""
    from .. import spm
    from .runner import run_forwarding

    size, out = cfg.size, cfg.out
    raw = os.path.join(out, "raw")
    texts = {}
    for split, stem in SPLITS.items():
        for lang in (SRC, TGT):
            texts[f"{split}.{lang}"] = read_lines(os.path.join(cfg.data, f"{stem}.{lang}.gz"),
                                                  size.train_lines if split == "train" else 0)
        if len(texts[f"{split}.{SRC}"]) != len(texts[f"{split}.{TGT}"]):
            raise QuickstartError(f"{cfg.data}: {stem}.{SRC}.gz and {stem}.{TGT}.gz differ in "
                                  "length: the corpus is not line-aligned")
    if not os.path.isfile(os.path.join(raw, ".done")):
        log(f"1/5 raw text ({len(texts['train.en'])} training pairs) -> {raw}")
        make_dirs(raw)
        for name, lines in texts.items():
            write_atomically(os.path.join(raw, name), "".join(line + "\n" for line in lines))
        open(os.path.join(raw, ".done"), "w").close()
    prefix = os.path.join(out, "spm")
    if not os.path.isfile(prefix + ".model"):
        log(f"2/5 joint sentencepiece model, vocabulary {size.vocab}")
        try:
            spm.train([os.path.join(raw, f"train.{lang}") for lang in (SRC, TGT)], prefix,
                      size.vocab)
        except spm.TrainingError as err:
            raise QuickstartError(str(err)) from None
    binary = os.path.join(out, "bin")
    if not os.path.isfile(os.path.join(binary, ".done")):
        log(f"3/5 sentencepiece + fairseq-preprocess -> {binary}")
        import sentencepiece

        pieces = make_dirs(os.path.join(out, "spm"))
        model = sentencepiece.SentencePieceProcessor(model_file=prefix + ".model")
        for name, lines in texts.items():
            write_atomically(os.path.join(pieces, name), "".join(
                " ".join(model.encode(line, out_type=str)) + "\n" for line in lines))
        from .workdir import fresh, publish

        tmp = fresh(binary + ".tmp")
        command = ["fairseq-preprocess", "--source-lang", SRC, "--target-lang", TGT,
                   "--joined-dictionary", "--destdir", tmp, "--workers", "2",
                   *[arg for split in SPLITS for arg in (f"--{split}pref",
                                                          os.path.join(pieces, split))]]
        code, signum = run_forwarding(command, os.environ, [os.path.join(out, "preprocess.log")])
        if signum:
            raise Interrupted(signum)
        if code:
            raise QuickstartError(f"fairseq-preprocess failed; see {out}/preprocess.log")
        publish(tmp, binary)
    return {"source": texts[f"test.{SRC}"], "reference": texts[f"test.{TGT}"]}


# ---- training -------------------------------------------------------------------------------

class Progress:
    """Reads fairseq-train's output as it comes and prints one line (update, last validation
    loss, elapsed time, ETA) every ``every`` seconds and at each validation."""

    def __init__(self, total: int, every: float = PROGRESS_EVERY_S):
        self.total, self.every = total, every
        self.start = time.time()
        self.first: Optional[tuple] = None  # (update, time) of this attempt's first record
        self.update = 0
        self.valid: Optional[tuple] = None  # (update, loss in bits)
        self.lock = threading.Lock()
        self.done = threading.Event()

    def feed(self, line: str) -> None:
        updates, loss = UPDATES.search(line), VALID_LOSS.search(line)
        with self.lock:
            if updates:
                self.update = int(updates.group(1))
                if self.first is None:
                    self.first = (self.update, time.time())
            if loss and updates:
                self.valid = (self.update, float(loss.group(1)))
        if loss and updates:
            self.print()

    def line(self) -> str:
        with self.lock:
            now, update = time.time(), self.update
            text = f"update {update}/{self.total} ({update / self.total:.0%})"
            text += (f", validation loss {self.valid[1]:.2f} bits at update {self.valid[0]}"
                     if self.valid else ", no validation yet")
            text += f", {minutes(now - self.start)} elapsed"
            if self.first and update > self.first[0]:
                rate = (update - self.first[0]) / (now - self.first[1])
                text += f", ETA {minutes((self.total - update) / rate)}"
            return text

    def print(self) -> None:
        log("    " + self.line())

    def run(self) -> None:
        while not self.done.wait(self.every):
            self.print()


def train(cfg: Settings, lock: RunLock) -> None:
    from .runner import _stale_temporaries, repair_last_checkpoint, run_forwarding

    size, out = cfg.size, cfg.out
    checkpoints = os.path.join(out, "checkpoints")
    done = os.path.join(out, "trained-updates.txt")
    if os.path.isfile(done) and int(open(done).read()) >= cfg.updates:
        # fairseq resumed at --max-update would still take one more update
        log(f"4/5 already trained to {open(done).read().strip()} updates "
            "(QUICKSTART_UPDATES above that trains further)")
        return
    for stale in _stale_temporaries(out):
        os.remove(stale)
    repaired = repair_last_checkpoint(checkpoints)
    if repaired:
        log(repaired)
    from .. import USER_DIR

    device = ["--cpu"] if cfg.device == "cpu" else ["--fp16"]
    width = []
    for side in ("encoder", "decoder"):
        width += [f"--{side}-layers", str(size.layers), f"--{side}-embed-dim", str(size.dim),
                  f"--{side}-ffn-embed-dim", str(size.ffn), f"--{side}-attention-heads",
                  str(size.heads)]
    command = [
        "fairseq-train", os.path.join(out, "bin"), "--user-dir", USER_DIR, *device,
        "--arch", "deepnet_transformer", *width, "--share-all-embeddings",
        "--dropout", str(size.dropout), "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
        "--lr", str(size.lr), "--lr-scheduler", "inverse_sqrt", "--warmup-updates",
        str(size.warmup), "--warmup-init-lr", "1e-7", "--clip-norm", "0.0",
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--max-tokens", str(size.max_tokens), "--max-update", str(cfg.updates), "--seed", "1",
        "--save-dir", checkpoints, "--save-interval-updates", str(size.validate_every),
        "--keep-interval-updates", "1", "--no-epoch-checkpoints",
        "--log-format", "simple", "--log-interval", "25"]
    log(f"4/5 fairseq-train deepnet_transformer {size.layers}L-{size.layers}L, {size.dim} wide, "
        f"{cfg.updates} updates, validation every {size.validate_every} (full log: "
        f"{out}/train.log)")
    progress = Progress(cfg.updates)
    ticker = threading.Thread(target=progress.run, daemon=True)
    ticker.start()
    try:
        code, signum = run_forwarding(command, os.environ, [os.path.join(out, "train.log")],
                                      progress.feed, pass_fds=(lock.fd,))
    finally:
        progress.done.set()
    if signum:
        raise Interrupted(signum)
    if code != 0:
        with open(os.path.join(out, "train.log"), encoding="utf-8", errors="replace") as handle:
            tail = "".join(handle.readlines()[-15:])
        raise QuickstartError(f"fairseq-train exited with status {code}; the end of "
                              f"{out}/train.log:\n{tail}")
    progress.print()
    write_atomically(done, f"{cfg.updates}\n")


# ---- decoding and scoring -------------------------------------------------------------------

def translate_and_score(cfg: Settings, test: Dict[str, List[str]]) -> Dict:
    import sacrebleu

    from .. import USER_DIR
    from .distinct import distinct_summary, ignores_source, report
    from .runner import run_forwarding

    out = cfg.out
    log("5/5 fairseq-generate (beam 5) + sacreBLEU on test_2016_flickr")
    command = ["fairseq-generate", os.path.join(out, "bin"), "--user-dir", USER_DIR,
               *(["--cpu"] if cfg.device == "cpu" else ["--fp16"]),
               "--path", os.path.join(out, "checkpoints", "checkpoint_last.pt"),
               "--gen-subset", "test", "--beam", "5", "--lenpen", "1.0", "--batch-size", "128",
               "--required-batch-size-multiple", "1", "--bpe", "sentencepiece",
               "--sentencepiece-model", os.path.join(out, "spm.model")]
    generate_log = os.path.join(out, "generate.log")
    open(generate_log, "w").close()  # this attempt's output only
    code, signum = run_forwarding(command, os.environ, [generate_log])
    if signum:
        raise Interrupted(signum)
    if code:
        raise QuickstartError(f"fairseq-generate failed; see {generate_log}")
    hypotheses: Dict[int, str] = {}
    with open(generate_log, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("D-"):
                index, _, text = line.rstrip("\n").split("\t", 2)
                hypotheses[int(index[2:])] = text
    if sorted(hypotheses) != list(range(len(test["reference"]))):
        raise QuickstartError(f"fairseq-generate translated {len(hypotheses)} of "
                              f"{len(test['reference'])} test sentences; see {generate_log}")
    hyps = [hypotheses[i] for i in range(len(hypotheses))]
    write_atomically(os.path.join(out, "test.hyp.de"), "".join(h + "\n" for h in hyps))
    bleu = sacrebleu.metrics.BLEU()
    score = bleu.corpus_score(hyps, [test["reference"]])
    summary = distinct_summary(hyps)
    result = {"sacrebleu": round(score.score, 2), "signature": str(bleu.get_signature()),
              "size": cfg.size_name, "device": cfg.device, "updates": cfg.updates,
              **summary}
    write_json(os.path.join(out, "bleu.json"), result)
    write_atomically(os.path.join(out, "bleu.txt"), f"{score.score:.1f}\n")
    if ignores_source(summary):
        print(report(summary) + (" (expected at SIZE=smoke)" if cfg.size_name == "smoke" else ""),
              flush=True)
    print("\nThree test sentences (source / reference / this model):", flush=True)
    for i in range(3):
        print(f"  EN   {test['source'][i]}\n  REF  {test['reference'][i]}\n  OURS {hyps[i]}\n",
              flush=True)
    return result


# ---- the command ----------------------------------------------------------------------------

def run(cfg: Settings) -> Dict:
    if os.path.isdir(cfg.out) and os.listdir(cfg.out) and not is_ours(cfg.out):
        raise QuickstartError(f"{cfg.out} exists, is not empty, and the quickstart did not "
                              f"create it (no {MARKER} in it): set QUICKSTART_DIR to a new "
                              "directory")
    make_dirs(cfg.out)
    start = time.time()
    log(f"SIZE={cfg.size_name} DEVICE={cfg.device}: {cfg.size.about}; output in {cfg.out}")
    with RunLock(cfg.out) as lock:
        test = prepare(cfg)
        train(cfg, lock)
        result = translate_and_score(cfg, test)
    log(f"done in {minutes(time.time() - start)}: sacreBLEU {result['sacrebleu']} on Multi30k "
        f"test_2016_flickr en->de, {result['distinct']} distinct translations of "
        f"{result['sentences']} ({result['signature']}; details: {cfg.out}/bleu.json)")
    if cfg.size_name == "smoke":
        log(f"SIZE=smoke is {cfg.size.about}; run without SIZE for a translating model")
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bash scripts/quickstart.sh", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    # fairscale (installed for ZeRO) warns about torch's deprecated AMP decorators when fairseq
    # imports it; nothing a quickstart user can act on (fairseq's own logs keep it)
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"fairscale\.")
    try:
        with signals_interrupt():  # in-process steps end through their cleanup on these too
            for tool in ("fairseq-preprocess", "fairseq-train", "fairseq-generate"):
                if shutil.which(tool) is None:
                    raise QuickstartError(f"{tool} not found on PATH; run: bash "
                                          "scripts/install.sh")
            run(read_settings(os.environ))
    except (QuickstartError, Busy, NotOurs) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2 if isinstance(err, BadSetting) else 1
    except OSError as err:
        print(f"error: {describe_os_error(err)}", file=sys.stderr)
        return 1
    except (Interrupted, KeyboardInterrupt) as err:
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        print(f"quickstart stopped by {signal.Signals(signum).name}; run it again to resume",
              file=sys.stderr)
        return 128 + signum
    return 0


if __name__ == "__main__":
    sys.exit(main())
