"""The OPUS-100 prepare step at scale, on a generated corpus: each stage's wall time, peak
memory and throughput, and their extrapolation to OPUS-100's 55 million pairs.

1. Generates a synthetic multilingual corpus in the ``SOURCE=local`` OPUS-100 layout
   (``ROOT/X-en/{train,valid,test}.{X,en}``): ``--pairs`` language pairs of ``--lines``
   training pairs each (plus ``--eval-lines`` validation and test pairs). Each non-English
   language has its own vocabulary (Zipf-distributed words made from its own alphabet: Latin
   with diacritics, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Georgian, Armenian, Hangul;
   Persian and Urdu words with a zero-width non-joiner), sentence lengths log-normal around
   12 words with a few over MAX_LEN, and its own length ratio to English; the same ``--seed``
   gives the same bytes. A corpus already generated with the same parameters is reused.
2. Runs the real step, ``python -m deepnet_fairseq.recipes opus100 prepare`` with
   ``SOURCE=local``, in a fresh ``DEEPNET_WORK`` (its output streamed as progress).
3. Prints each stage of ``DATA_DIR/stages.json``: wall time, CPU time (of all its
   processes), peak memory (resident set size, of the prepare process and of its largest
   child so far) and training pairs per second.
4. ``--spm-samples``: trains sentencepiece on the cleaned text alone, in a fresh process per
   sample size, for its peak memory and time at each size, and fits a line through them to the
   default ``SPM_SENTENCES`` (10,000,000).
5. Prints the extrapolation to ``--target-pairs`` (55,000,000) on ``--target-cores`` (32):
   each stage's CPU time linear in the training pairs (CPU time, not wall time, so that other
   jobs on a shared machine do not inflate it); the stages that run on ``WORKERS`` processes
   (clean, encode, binarise) spread evenly over the cores (perfect scaling); sentencepiece
   training from the fit of step 4 (its input sample is bounded by SPM_SENTENCES, so its time
   and memory do not grow with the corpus beyond reading it). An extrapolation, not a
   measurement.

    python benchmarks/prepare_scale.py --pairs 20 --lines 25000            # 500k pairs
    python benchmarks/prepare_scale.py --pairs 20 --lines 250000 --vocab 64000  # 5M pairs
    python benchmarks/prepare_scale.py --pairs 3 --lines 300 --vocab 500 --spm-samples ''

Settings of the prepare step (``VOCAB``, ``SPM_SENTENCES``, ``WORKERS``...) come from the
environment as for any recipe; ``--vocab``, ``--spm-sentences`` and ``--workers`` set them.
"""

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

from deepnet_fairseq.recipes.spec.settings import typed
from deepnet_fairseq.storage.directories import make_dirs
from deepnet_fairseq.storage.fileio import (ensure_directory, remove_file, scratch_directory,
                                            write_atomically, write_json)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ZWNJ = "\u200c"

# (code, alphabet, words per sentence relative to English); alphabets of the scripts of
# OPUS-100 languages that separate words with spaces
LATIN = "abcdefghijklmnopqrstuvwxyz"
CYRILLIC = "абвгдежзийклмнопрстуфхцчшщыьэюя"
ARABIC = "ابپتجچحخدرزژسشعفقکگلمنوهی"
DEVANAGARI = "कखगचजटडतदनपबमयरलवशसह"
VOWEL_SIGNS = "ािीुूेो"
LANGUAGES: List[Tuple[str, str, float]] = [
    ("de", LATIN + "äöüß", 0.95), ("fr", LATIN + "éèàçêô", 1.1), ("es", LATIN + "ñáéíóú", 1.05),
    ("it", LATIN + "àèéìòù", 1.0), ("pt", LATIN + "ãõçáéê", 1.0), ("pl", LATIN + "ąćęłńóśźż", 0.9),
    ("cs", LATIN + "áčďéěíňóřšťúůýž", 0.85), ("tr", LATIN + "çğıöşü", 0.8),
    ("ru", CYRILLIC, 0.85), ("uk", CYRILLIC + "єіїґ", 0.85), ("bg", CYRILLIC, 0.9),
    ("el", "αβγδεζηθικλμνξοπρστυφχψωάέήίόύώ", 1.0), ("fa", ARABIC, 1.05),
    ("ur", ARABIC + "ٹڈڑںھے", 1.1), ("ar", "ابتثجحخدذرزسشصضطظعغفقكلمنهوية", 0.8),
    ("he", "אבגדהוזחטיכלמנסעפצקרשת", 0.8), ("hi", DEVANAGARI, 1.1), ("mr", DEVANAGARI + "ळ", 0.9),
    ("ka", "აბგდევზთიკლმნოპჟრსტუფქღყშჩცძწჭხჯჰ", 0.85),
    ("hy", "աբգդեզէըթժիլխծկհձղճմյնշոչպջռսվտրցւփքօֆ", 0.9), ("ko", "", 0.75),
]
ZWNJ_LANGS = ("fa", "ur")
VOCAB_WORDS = 4000        # word types per language
MEAN_WORDS = 12           # median English sentence length, in words
LONG_SHARE = 0.002        # sentences over MAX_LEN (250) words, which cleaning drops


def languages(count: int) -> List[Tuple[str, str, float]]:
    """The first COUNT languages; beyond the list, more codes (x21, x22...) over its scripts."""
    chosen = LANGUAGES[:count]
    for i in range(len(LANGUAGES), count):
        code, alphabet, ratio = LANGUAGES[i % len(LANGUAGES)]
        chosen.append((f"x{i:02d}", alphabet, ratio))
    return chosen


def vocabulary(rng: random.Random, code: str, alphabet: str) -> List[str]:
    """VOCAB_WORDS distinct words of 1 to 10 letters (frequent words short, as in text)."""
    words, seen = [], set()
    while len(words) < VOCAB_WORDS:
        length = min(10, 1 + int(rng.expovariate(1 / 4)) + len(words) * 3 // VOCAB_WORDS)
        if code == "ko" or alphabet == "":  # Hangul: syllable blocks from 400 of them
            word = "".join(chr(0xAC00 + rng.randrange(400) * 28) for _ in range(1 + length // 3))
        elif alphabet.startswith(DEVANAGARI):
            word = "".join(rng.choice(alphabet) + rng.choice(VOWEL_SIGNS + "  ").strip()
                           for _ in range(1 + length // 2))
        else:
            word = "".join(rng.choice(alphabet) for _ in range(length))
        if code in ZWNJ_LANGS and len(word) > 3 and rng.random() < 0.15:
            word = "می" + ZWNJ + word  # the verbal prefix of "می‌خواهم"
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def sentence_lengths(rng: random.Random, count: int) -> List[int]:
    return [rng.randint(251, 300) if rng.random() < LONG_SHARE
            else max(1, min(120, round(rng.lognormvariate(math.log(MEAN_WORDS), 0.6))))
            for _ in range(count)]


def sentences(rng: random.Random, words: List[str], weights: List[float],
              lengths: Sequence[int]) -> List[str]:
    out = []
    for n in lengths:
        text = rng.choices(words, cum_weights=weights, k=n)
        if rng.random() < 0.3:
            text[rng.randrange(n)] = str(rng.randrange(10_000))
        if n > 4 and rng.random() < 0.3:
            text[n // 2] += ","
        out.append(" ".join(text) + rng.choice(".....?!"))
    return out


def zipf(n: int) -> List[float]:
    total, cumulative = 0.0, []
    for rank in range(1, n + 1):
        total += 1 / rank
        cumulative.append(total)
    return cumulative


def generate(root: str, pairs: int, lines: int, eval_lines: int, seed: int, say) -> List[str]:
    """The corpus in ROOT (reused when ROOT/corpus.json has the same parameters); its LANGS."""
    params = {"pairs": pairs, "lines": lines, "eval_lines": eval_lines, "seed": seed,
              "version": 1}
    langs = [code for code, _, _ in languages(pairs)]
    stamp = os.path.join(root, "corpus.json")
    if os.path.isfile(stamp):
        with open(stamp, encoding="utf-8") as old:
            if json.load(old) == params:
                say(f"corpus: reusing {root}")
                return langs
        remove_file(stamp)
    ensure_directory(root)
    english_rng = random.Random(f"{seed}-en-vocabulary")
    english = vocabulary(english_rng, "en", LATIN)
    cumulative = zipf(VOCAB_WORDS)
    start = time.monotonic()
    for number, (code, alphabet, ratio) in enumerate(languages(pairs), 1):
        rng = random.Random(f"{seed}-{code}")
        words = vocabulary(rng, code, alphabet)
        directory = os.path.join(root, f"{code}-en")
        ensure_directory(directory)
        for split, count in (("train", lines), ("valid", eval_lines), ("test", eval_lines)):
            en_lengths = sentence_lengths(rng, count)
            x_lengths = [max(1, round(n * ratio * rng.uniform(0.75, 1.3))) for n in en_lengths]
            for lang, vocab, lengths in ((code, words, x_lengths), ("en", english, en_lengths)):
                text = sentences(rng, vocab, cumulative, lengths)
                write_atomically(os.path.join(directory, f"{split}.{lang}"), "\n".join(text) + "\n")
        say(f"corpus: pair {number} of {pairs} ({code}-en) written, "
            f"{time.monotonic() - start:.0f} s")
    write_json(stamp, params)
    return langs


# ---- measuring ----------------------------------------------------------------------------------

def run_prepare(work: str, corpus: str, langs: List[str], env_extra: Dict[str, str], say) -> float:
    env = {**os.environ, "DEEPNET_WORK": work, "SOURCE": "local", "LOCAL_DIR": corpus,
           "LANGS": " ".join(langs), **env_extra}
    command = [sys.executable, "-m", "deepnet_fairseq.recipes", "opus100", "prepare"]
    say("running: " + " ".join(f"{k}={v}" for k, v in env_extra.items()) + " "
        + " ".join(command[1:]))
    start = time.monotonic()
    proc = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    tail = []
    for line in proc.stdout:
        tail = (tail + [line])[-40:]
        say("  | " + line.rstrip())
    if proc.wait():
        raise SystemExit(f"prepare failed (exit {proc.returncode}):\n" + "".join(tail))
    return time.monotonic() - start


SPM_PROBE = """
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from deepnet_fairseq import spm
start = time.monotonic()
spm.train({inputs!r}, {prefix!r}, {vocab}, max_sentences={sentences})
print(json.dumps({{"seconds": time.monotonic() - start,
                   "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def spm_probe(inputs: List[str], vocab: int, sentences: int, scratch: str) -> Dict:
    """Sentencepiece training on INPUTS sampling SENTENCES, in a fresh process: its figures.
    A sample too small for VOCAB pieces is trained again at the most it supports."""
    code = SPM_PROBE.format(repo=REPO, inputs=inputs, prefix=os.path.join(scratch, "probe"),
                            vocab=vocab, sentences=sentences)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    most = re.search(r"it supports at most (\d+)", proc.stderr)
    if proc.returncode and most and int(most.group(1)) < vocab:
        return spm_probe(inputs, int(most.group(1)), sentences, scratch)
    if proc.returncode:
        raise SystemExit(f"sentencepiece probe at {sentences} failed:\n{proc.stderr[-2000:]}")
    return {"vocab": vocab, **json.loads(proc.stdout.strip().splitlines()[-1])}


def fit(points: List[Tuple[float, float]], x: float) -> float:
    """Least-squares line through POINTS, evaluated at X (one point: through the origin)."""
    if len(points) == 1:
        return points[0][1] * x / points[0][0]
    n = len(points)
    mx, my = sum(p[0] for p in points) / n, sum(p[1] for p in points) / n
    slope = (sum((p[0] - mx) * (p[1] - my) for p in points)
             / sum((p[0] - mx) ** 2 for p in points))
    return my + slope * (x - mx)


STAGES = ("raw text", "clean", "sentencepiece", "encode", "binarise")
PARALLEL = ("clean", "encode", "binarise")


def hms(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def table(rows: List[List[str]], header: List[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).rjust(w) if i else str(c).ljust(w)  # noqa: E731
                                      for i, (c, w) in enumerate(zip(r, widths))) + " |"
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                     + [line(r) for r in rows])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/prepare_scale.py",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=20, help="language pairs (default: 20)")
    parser.add_argument("--lines", type=int, default=25_000,
                        help="training pairs per language pair (default: 25000)")
    parser.add_argument("--eval-lines", type=int, default=0,
                        help="validation and test pairs per language pair (default: lines/100, "
                             "at most 2000 as OPUS-100's)")
    parser.add_argument("--seed", type=int, default=1, help="of the corpus (default: 1)")
    parser.add_argument("--corpus", help="where the corpus is generated (default: a directory "
                                         "named by its parameters under --root)")
    parser.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "prepare_scale"),
                        help="corpora and prepare runs go here (default: %(default)s)")
    parser.add_argument("--vocab", type=int, help="VOCAB (default: the opus100 preset's 64000)")
    parser.add_argument("--spm-sentences", type=int, help="SPM_SENTENCES (default: the preset's "
                                                          "10,000,000)")
    parser.add_argument("--workers", type=int, help="WORKERS (default: every core)")
    parser.add_argument("--spm-samples", default="250000,500000,1000000",
                        help="sentencepiece sample sizes probed for the memory fit, comma-"
                             "separated; '' for none (default: %(default)s)")
    parser.add_argument("--target-pairs", type=int, default=55_000_000,
                        help="extrapolate to this many training pairs (default: %(default)s)")
    parser.add_argument("--target-cores", type=int, default=32,
                        help="... on this many cores (default: %(default)s)")
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args(argv)

    def say(message):
        print(message, file=sys.stderr, flush=True)

    eval_lines = args.eval_lines or max(10, min(2000, args.lines // 100))
    corpus = args.corpus or os.path.join(
        args.root, f"corpus-{args.pairs}x{args.lines}-seed{args.seed}")
    start = time.monotonic()
    langs = generate(corpus, args.pairs, args.lines, eval_lines, args.seed, say)
    generated_s = time.monotonic() - start
    settings = {name: str(value) for name, value in (
        ("VOCAB", args.vocab), ("SPM_SENTENCES", args.spm_sentences),
        ("WORKERS", args.workers)) if value is not None}
    # a new WORK of the recipes for this run, kept for inspection (printed at the end)
    work = make_dirs(os.path.join(ensure_directory(args.root),
                                  f"work-{os.getpid()}-{time.time_ns()}"))
    total_s = run_prepare(work, corpus, langs, settings, say)
    data = os.path.join(work, "data")
    with open(os.path.join(data, "stages.json"), encoding="utf-8") as f:
        stored = json.load(f)
    stages = {name: stored[name] for name in STAGES if name in stored}
    with open(os.path.join(data, "config.json"), encoding="utf-8") as f:
        resolved = {k: v["value"] for k, v in json.load(f)["settings"].items()}
    workers = int(resolved.get("WORKERS", os.cpu_count() or 1))
    pairs = args.pairs * args.lines
    cores = os.cpu_count() or 1

    rows = [[name, f"{s['seconds']:.1f}", f"{s.get('cpu_seconds', float('nan')):.1f}",
             f"{s['peak_rss_mb']:,}", f"{pairs / max(s['seconds'], 1e-3):,.0f}"]
            for name, s in stages.items()]
    rows.append(["total (prepare process)", f"{total_s:.1f}",
                 f"{sum(s.get('cpu_seconds', 0) for s in stages.values()):.1f}", "",
                 f"{pairs / total_s:,.0f}"])
    print(f"\nOPUS-100 prepare, generated corpus: {args.pairs} pairs x {args.lines:,} = "
          f"{pairs:,} training pairs ({eval_lines} valid/test each); VOCAB={resolved['VOCAB']}, "
          f"SPM_SENTENCES={resolved['SPM_SENTENCES']}, WORKERS={workers}, {cores} cores; "
          f"corpus generated in {generated_s:.0f} s")
    print(table(rows, ["stage", "wall s", "CPU s", "peak RSS MB (so far)", "pairs/s (wall)"]))

    probes = []
    samples = sorted({min(int(n), 2 * pairs) for n in args.spm_samples.split(",") if n.strip()})
    if samples:
        inputs = sorted(os.path.join(data, "clean", name)
                        for name in os.listdir(os.path.join(data, "clean"))
                        if name.startswith("train."))
        vocab = typed("VOCAB", resolved["VOCAB"])
        with scratch_directory(args.root) as scratch:
            for n in samples:
                say(f"sentencepiece probe: {n:,} sentences, vocabulary {vocab}")
                probes.append({"sentences": n, **spm_probe(inputs, vocab, n, scratch)})
        print(f"\nsentencepiece training alone (fresh process, VOCAB={vocab}, over "
              f"{2 * pairs:,} cleaned sentences):")
        print(table([[f"{p['sentences']:,}", f"{p['vocab']:,}", f"{p['seconds']:.1f}",
                      f"{p['peak_rss_mb']:,.0f}"] for p in probes],
                    ["sampled sentences", "vocabulary", "wall s", "peak RSS MB"]))

    target_spm = 10_000_000
    scale = args.target_pairs / pairs
    print(f"\nEXTRAPOLATION (not measured) to {args.target_pairs:,} pairs on "
          f"{args.target_cores} cores: each stage's CPU time linear in the training pairs "
          f"(x{scale:,.0f}), {', '.join(PARALLEL)} spread evenly over the cores (perfect "
          f"scaling, a machine of its own); sentencepiece from the probes' line to "
          f"SPM_SENTENCES={target_spm:,} (its sample is bounded, whatever the corpus size); "
          "raw text single-process")
    extrapolated = []
    for name, s in stages.items():
        if name == "sentencepiece" and probes:
            seconds = fit([(p["sentences"], p["seconds"]) for p in probes], target_spm)
            memory = fit([(p["sentences"], p["peak_rss_mb"]) for p in probes], target_spm)
            how = f"line through {len(probes)} probes, at {target_spm:,} sentences"
        elif name == "sentencepiece":  # no probes: linear in the sentences it samples
            sampled = min(2 * pairs, typed("SPM_SENTENCES", resolved["SPM_SENTENCES"]))
            seconds = s.get("cpu_seconds", s["seconds"]) * target_spm / sampled
            memory, how = None, f"CPU s x {target_spm:,} / {sampled:,} sentences sampled"
        else:
            # CPU seconds: what the stage costs, whatever else ran on the machine meanwhile
            seconds, how = s.get("cpu_seconds", s["seconds"] * workers) * scale, "CPU s x pairs"
            if name in PARALLEL:
                seconds /= args.target_cores
                how += f" / {args.target_cores} cores"
            memory = None
        extrapolated.append({"stage": name, "seconds": seconds, "peak_rss_mb": memory,
                             "how": how})
    print(table([[e["stage"], hms(e["seconds"]),
                  f"{e['peak_rss_mb']:,.0f}" if e["peak_rss_mb"] else "", e["how"]]
                 for e in extrapolated]
                + [["total", hms(sum(e["seconds"] for e in extrapolated)), "", ""]],
                ["stage", "time (extrapolated)", "peak RSS MB", "how"]))
    if args.json:
        write_json(args.json, {"pairs": args.pairs, "lines": args.lines, "training_pairs": pairs,
                               "workers": workers, "cores": cores, "settings": resolved,
                               "stages": stages, "total_s": total_s, "spm_probes": probes,
                               "extrapolated": extrapolated, "work": work})
    print(f"\nwork directory: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
