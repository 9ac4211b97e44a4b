"""Quickstart: train a small DeepNet en->de on Multi30k (Elliott et al. 2016, shipped in
deepnet_fairseq/corpora/multi30k), translate its test set and score it with sacreBLEU.

    bash scripts/quickstart.sh                # a translating model: ~8 min on 2 CPU cores
    SIZE=smoke bash scripts/quickstart.sh     # ~1 min: checks that the chain runs; its model does not translate
    DEVICE=cuda bash scripts/quickstart.sh    # one GPU: a 512-wide model

It is the wmt17 recipe at the quickstart size (``presets.QUICKSTART``: SOURCE=multi30k, one
6L-6L DeepNet), run by the same runtime as ``bash scripts/wmt17/{prepare,train,evaluate}.sh``:
sentencepiece -> fairseq-preprocess -> fairseq-train -> fairseq-generate -> sacreBLEU, on the
stock fairseq CLIs. While it trains, a progress line (update, last validation nll, ETA)
comes every 30 seconds, and while it decodes one too (sentences decoded, ETA); at the end,
three test sentences beside their references.

Re-running reuses finished steps and resumes an interrupted training from its checkpoints.
One launch per directory at a time (a second one says which process holds it); Ctrl-C or
SIGTERM stops every process it started.

Environment (defaults in brackets); every recipe setting applies too (docs/presets.md), e.g.
MAX_UPDATE=2000 RETRY=1 trains a finished run further on the same schedule:
  SIZE          quickstart | smoke                                      [quickstart]
  DEVICE        cpu | cuda                                              [cpu]
  DEEPNET_WORK  output directory   [runs/quickstart, runs/quickstart-smoke, ...-cuda]
  SOURCE        multi30k, or local with LOCAL_DIR (a directory of
                {train,valid,test}.{en,de}[.gz] text)                    [multi30k]
"""

from ..storage.evaluations import current_evaluation
import itertools
import os
import shutil
import signal
import sys
import time
from typing import Dict, Mapping

from . import cli_parser
from .evaluation.distinct import counted
from .run.runlog import minutes
from ..processes import ENDING, EXIT, Interrupted, interrupted, signal_of, signals_interrupt
from .spec.settings import SettingError, Settings, from_env, home, resolve
from .datasets.wmt17 import DATASET as WMT17
from ..storage.directories import Busy, NotOurs
from ..storage.fileio import RecordError, describe_os_error, one_line_os_errors

DATASET = WMT17.name  # the recipe the quickstart runs
SIZES = {("quickstart", "cpu"): "quickstart", ("quickstart", "cuda"): "quickstart-cuda",
         ("smoke", "cpu"): "smoke", ("smoke", "cuda"): "smoke"}


class QuickstartError(RuntimeError):
    """A failed step; the message says what to do."""


def log(message: str) -> None:
    print(f"[quickstart {time.strftime('%H:%M:%S')}] {message}", flush=True)


def quickstart_settings(env: Mapping[str, str], home: str) -> Settings:
    """The wmt17 recipe's settings for a quickstart launch. Its own defaults (work directory,
    source, method, depth) sit below the environment, as a config file's do; the size and
    device it checked sit above everything, as a sweep's run entry does, so that no spelling
    the resolver reads (``DEEPNET_SIZE`` before ``SIZE``) can say otherwise. A quickstart size
    or device it does not have is refused before anything runs."""
    size, device = ((from_env(env, name) or (default,))[0]
                    for name, default in (("SIZE", "quickstart"), ("DEVICE", "cpu")))
    problems = []
    if size not in ("quickstart", "smoke"):
        problems.append(f"SIZE={size}: the quickstart's sizes are quickstart and smoke (the "
                        "recipes in scripts/ have the others)")
    if device not in ("cpu", "cuda"):
        problems.append(f"DEVICE={device}: the quickstart runs on cpu or cuda")
    if problems:
        raise SettingError("\n".join(problems))
    work = os.path.join(home, "runs", "quickstart" + ("-smoke" if size == "smoke" else "")
                        + ("-cuda" if device == "cuda" else ""))
    defaults = {"WORK": work, "SOURCE": "multi30k", "METHOD": "deepnet", "LAYERS": "6"}
    checked = {"SIZE": SIZES[size, device], "DEVICE": device}
    return resolve(DATASET, env, home,
                   given={name: (value, "the quickstart's default")
                          for name, value in defaults.items()},
                   run={name: (value, f"the quickstart ({size} on {device})")
                        for name, value in checked.items()})


def show_result(cfg: Settings) -> Dict:
    """The evaluation's sacreBLEU and three test sentences beside their references."""
    from .spec.paths import paths
    from .evaluation.score import hypotheses

    where = paths(cfg)
    pair = f"{cfg.text.data.src}-{cfg.text.data.tgt}"
    evaluation, stale = current_evaluation(where.run_dir)
    if evaluation is None:
        raise RecordError(stale or f"{where.run_dir} has no evaluation")
    result = evaluation["directions"][pair]
    hyps = hypotheses(os.path.join(where.run_dir, "eval", pair, "generate-test.txt"))
    sides = []
    for lang in (cfg.text.data.src, cfg.text.data.tgt):
        with open(os.path.join(where.raw, f"test.{pair}.{lang}"), encoding="utf-8") as f:
            # at most three: TEST_LINES may keep fewer (next() ran past the end after the run)
            sides.append([line.rstrip("\n") for line in itertools.islice(f, 3)])
    print("\nThree test sentences (source / reference / this model):", flush=True)
    for source, ref, hyp in zip(*sides, hyps):
        print(f"  {cfg.text.data.src.upper():4} {source}\n  REF  {ref}\n  OURS {hyp}\n", flush=True)
    return result


def run(cfg: Settings) -> Dict:
    from . import pipeline
    from .spec.paths import paths

    where = paths(cfg)
    size = cfg.text.where.size
    start = time.time()
    log(f"SIZE={size} DEVICE={cfg.text.where.device}: the {DATASET} recipe, {cfg.text.run.method} "
        f"{cfg.text.run.enc_layers}L-{cfg.text.run.dec_layers}L, {cfg.text.model.embed_dim} wide, "
        f"{cfg.text.optim.max_update} updates; output in {where.work}")
    log("1/3 prepare: text, sentencepiece, fairseq-preprocess")
    pipeline.prepare(cfg)
    log(f"2/3 train (full log: {where.run_dir}/train.log)")
    code = pipeline.train(cfg)
    if signal_of(code):
        raise Interrupted(signal_of(code))
    if code:
        raise QuickstartError(f"training ended {ENDING.get(code, 'failed')}; see "
                              f"{where.run_dir}/status.json and train.log")
    log(f"3/3 evaluate: fairseq-generate (beam {cfg.text.eval.beam}) + sacreBLEU on the test set")
    code = pipeline.evaluate(cfg)
    if signal_of(code):
        raise Interrupted(signal_of(code))
    if code:
        raise QuickstartError(f"evaluation failed; see {where.run_dir}/evaluate.log")
    result = show_result(cfg)
    log(f"done in {minutes(time.time() - start)}: sacreBLEU {result['sacrebleu']} on "
        f"Multi30k test_2016_flickr en->de, {counted(result['distinct'], 'distinct translation')} "
        f"(details: {where.run_dir}/eval/eval.json)")
    if size == "smoke":
        log("SIZE=smoke checks that the chain runs: its model is not trained enough to "
            "translate (BLEU about 0); run without SIZE for a translating model")
    return result


@one_line_os_errors
def main(argv=None) -> int:
    parser = cli_parser("bash scripts/quickstart.sh", __doc__)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the resolved settings and the training command; run nothing")
    args = parser.parse_args(argv)
    try:
        cfg = quickstart_settings(os.environ, home())
        if args.dry_run:
            from . import pipeline
            from .spec.settings import print_settings

            print_settings(cfg, "train")
            return pipeline.train(cfg, dry_run=True)
        with signals_interrupt():  # in-process steps end through their cleanup on these too
            for tool in ("fairseq-preprocess", "fairseq-train"):
                if shutil.which(tool) is None:
                    raise QuickstartError(f"{tool} not found on PATH; run: bash scripts/install.sh")
            run(cfg)
    except (SettingError, Busy, NotOurs) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT["refused"]
    except QuickstartError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT["failed"]
    except OSError as err:
        print(f"error: {describe_os_error(err)}", file=sys.stderr)
        return EXIT["failed"]
    except (Interrupted, KeyboardInterrupt) as err:
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        print(f"quickstart stopped by {signal.Signals(signum).name}; run it again to resume",
              file=sys.stderr)
        return interrupted(signum)
    return 0


if __name__ == "__main__":
    sys.exit(main())
