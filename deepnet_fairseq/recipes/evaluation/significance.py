"""Is one run better than another? sacreBLEU's own paired bootstrap resampling between two
evaluated runs on the same test set, and the mean with a confidence interval over the seeds of
a cell.

    python -m deepnet_fairseq.recipes.evaluation.significance BASELINE_RUN SYSTEM_RUN \\
        [--direction en-de] [--samples 1000] [--seed 12345] [--out RESULT.json]

Each RUN is a run directory the recipes evaluated (its ``eval/<SRC-TGT>/generate-test.txt``);
the references are the ones its ``eval/eval.json`` names (both runs must name the same text).

* Paired bootstrap (``sacrebleu.significance.PairedTest``, ``test_type="bs"``: Koehn 2004, as
  Moses' ``bootstrap-hypothesis-difference-significance.pl``): the test set is resampled with
  replacement SAMPLES times, the same sentences for both systems; p is the share of resamples
  whose difference is as far from the mean difference as the observed one. Reported for BLEU
  and chrF, with each system's bootstrap mean and 95% interval. A fixed seed makes it
  repeatable.
* Seeds (``seed_interval``): the mean of a cell's scores over its seeds with the two-sided 95%
  Student-t interval, mean +- t(0.975, n - 1) s / sqrt(n); with one seed there is no interval.
"""

import logging
import math
import os
import statistics
import sys
from typing import Dict, List, Sequence

from .. import cli_parser
from ...storage.fileio import (RecordError, add_force_argument, check_tool_output,
                                one_line_os_errors)
from ...storage.evaluations import current_evaluation
from ...storage.records import write_record
from .score import hypotheses, references

# Student's t, the 0.975 quantile, by degrees of freedom (tables; 1.96 beyond 30)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with DF degrees of freedom (the table's nearest entry
    at or below DF between its rows: a slightly wider, never narrower, interval)."""
    if df < 1:
        raise ValueError("an interval needs at least two values")
    if df > 30:
        return 1.96
    return T975[max(k for k in T975 if k <= df)]


def seed_interval(values: Sequence[float]) -> Dict:
    """{"n", "mean", "sd", "half_width"} of one cell's scores over its seeds; sd and half_width
    are None with one value (no interval from one run)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("no values")
    mean = statistics.fmean(values)
    if len(values) == 1:
        return {"n": 1, "mean": mean, "sd": None, "half_width": None}
    sd = statistics.stdev(values)
    return {"n": len(values), "mean": mean, "sd": sd,
            "half_width": t975(len(values) - 1) * sd / math.sqrt(len(values))}


def paired_bootstrap(baseline: List[str], system: List[str], refs: List[str],
                     samples: int = 1000, seed: int = 12345) -> Dict:
    """sacreBLEU's paired bootstrap of SYSTEM against BASELINE on REFS, for BLEU and chrF:
    {"metrics": {"BLEU" or "chrF2": {"baseline", "system", "difference", "p", "baseline_ci",
    "system_ci"}}, ...}; the intervals are the bootstrap mean and its 95% half width."""
    import sacrebleu
    from sacrebleu.significance import PairedTest

    if not (len(baseline) == len(system) == len(refs)):
        raise ValueError(f"the two systems and the references differ in length ({len(baseline)}, "
                         f"{len(system)}, {len(refs)} lines): not the same test set")
    if samples < 1:
        raise ValueError("--samples must be at least 1")
    # SACREBLEU_SEED is how sacrebleu takes a seed for its resampling (PairedTest reads it)
    saved = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    quiet = logging.getLogger("sacrebleu")  # its INFO line per metric and system
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        test = PairedTest([("baseline", baseline), ("system", system)],
                          {"BLEU": sacrebleu.BLEU(), "chrF": sacrebleu.CHRF()}, [refs],
                          test_type="bs", n_samples=samples)
        _, scores = test()
    finally:
        quiet.setLevel(level)
        if saved is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = saved
    out = {}
    for metric in (name for name in scores if name != "System"):  # BLEU, chrF2
        base, sys_ = scores[metric]
        out[metric] = {"baseline": round(float(base.score), 2), "system": round(float(sys_.score), 2),
                       "difference": round(float(sys_.score - base.score), 2),
                       "p": round(float(sys_.p_value), 4),
                       "baseline_ci": [round(float(base.mean), 2), round(float(base.ci), 2)],
                       "system_ci": [round(float(sys_.mean), 2), round(float(sys_.ci), 2)]}
    return {"samples": samples, "seed": seed, "sentences": len(refs), "metrics": out}


def run_outputs(run_dir: str, direction: str) -> Dict:
    """A run's decoded hypotheses for DIRECTION and the reference its evaluation names."""
    eval_dir = os.path.join(run_dir, "eval")
    directions = _evaluated(run_dir)
    if direction not in directions:
        raise ValueError(f"{run_dir} has no evaluation of {direction} (it has "
                         f"{', '.join(sorted(directions)) or 'none'})")
    return {"hypotheses": hypotheses(os.path.join(eval_dir, direction, "generate-test.txt")),
            "reference": directions[direction]["reference"]}


@one_line_os_errors
def main(argv=None) -> int:
    parser = cli_parser("python -m deepnet_fairseq.recipes.evaluation.significance", __doc__)
    parser.add_argument("baseline", help="the baseline's run directory")
    parser.add_argument("system", help="the compared run's directory")
    parser.add_argument("--direction", default=None,
                        help="SRC-TGT (default: the one direction both runs evaluated)")
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=12345, help="the resampling's seed")
    parser.add_argument("--out", default=None, help="also write the result here, as JSON")
    add_force_argument(parser, "an existing --out")
    args = parser.parse_args(argv)
    try:
        direction = args.direction or _only_direction(args.baseline, args.system)
        a, b = run_outputs(args.baseline, direction), run_outputs(args.system, direction)
        if args.out:  # never onto what it reads: the runs and their references
            check_tool_output(args.out, [args.baseline, args.system, a["reference"],
                                         b["reference"]], args.force, "--out")
        if os.path.realpath(a["reference"]) != os.path.realpath(b["reference"]) and \
                references(a["reference"]) != references(b["reference"]):
            raise ValueError(f"the runs were scored against different references "
                             f"({a['reference']}, {b['reference']})")
        result = paired_bootstrap(a["hypotheses"], b["hypotheses"], references(a["reference"]),
                                  args.samples, args.seed)
    except (OSError, ValueError, KeyError, RecordError) as err:
        parser.error(str(err))
    result.update(direction=direction, baseline=args.baseline, system=args.system)
    for metric, r in result["metrics"].items():
        print(f"{direction} {metric}: {r['baseline']} -> {r['system']} ({r['difference']:+.2f}), "
              f"paired bootstrap p = {r['p']} ({args.samples} resamples, seed {args.seed})")
    if args.out:
        write_record(args.out, "significance", result, force=args.force)
    return 0


def _evaluated(run_dir: str) -> Dict:
    """The directions a run's evaluation scored (its eval/eval.json, read as a record)."""
    record, stale = current_evaluation(run_dir)
    if record is None:
        raise ValueError(stale or f"{run_dir} has no evaluation ({run_dir}/eval/eval.json): "
                                  "run its evaluate step first")
    return record.get("directions", {})


def _only_direction(*run_dirs) -> str:
    common = None
    for run_dir in run_dirs:
        found = set(_evaluated(run_dir))
        common = found if common is None else common & found
    if not common or len(common) > 1:
        raise ValueError(f"name a --direction: the runs share {', '.join(sorted(common or ())) or 'none'}")
    return next(iter(common))


if __name__ == "__main__":
    sys.exit(main())
