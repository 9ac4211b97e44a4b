#!/usr/bin/env bash
# The paper's Table 1 in one command: train and evaluate every METHOD x DEPTH on WMT-17 En-De,
# record runs that diverge or fail and go on, then write the table, CSV and plot.
#
#   bash scripts/wmt17/sweep.sh                                   # 8-GPU node, full Table 1
#   METHODS="deepnet post_ln" DEPTHS="6 18" bash scripts/wmt17/sweep.sh
#   RUNS="deepnet:18:6 post_ln:6:6:LR=1e-3" bash scripts/wmt17/sweep.sh   # explicit runs
#
# Hardware: 8 x 80 GB GPUs (any number works; see train.sh). Time (estimated, not measured):
# ~12 weeks for the 12 runs of the default sweep on one 8 x A100-80GB node at the paper's
# 524,288 tokens per update (fewer where runs diverge early); run several nodes (sbatch: srun)
# or split METHODS across machines sharing DEEPNET_WORK. Smoke size: ~1 min.
# Output: $DEEPNET_WORK/results/{table.md, results.csv, bleu_vs_depth.png}; per run
# $DEEPNET_WORK/runs/<run>/. Re-running skips finished runs, resumes interrupted ones and
# retries failed ones; a run stopped by a signal stops the sweep (exit status 128+N).
#
# Environment (DEEPNET_<NAME> or <NAME>; defaults in brackets; the rest as for train.sh and
# evaluate.sh; --dry-run lists the runs and their statuses):
#   METHODS       methods to run                   [deepnet post_ln pre_ln]
#   DEPTHS        layers per side                  [6 18 50 100]
#   RUNS          instead of METHODS x DEPTHS: METHOD:ENC:DEC[:KEY=VALUE...] entries; KEY=VALUE
#                 sets a setting for that run only (e.g. LR=1e-3; KEY must be a setting)
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec wmt17 sweep "$@"
