#!/usr/bin/env bash
# Depth sweep on your own parallel text (the parallel dataset: no paper table, your corpus):
# train and evaluate every METHOD x DEPTH, record runs that diverge or fail and go on, then
# write the table, CSV and plot.
#
#   SRC=de TGT=en bash scripts/parallel/sweep.sh
#   SRC=de TGT=en METHODS="deepnet pre_ln" DEPTHS="6 18" bash scripts/parallel/sweep.sh
#
# Hardware: as train.sh. Time: the runs' times added up (estimate one with train.sh first).
# Output: $DEEPNET_WORK/results/{table.md, results.csv, bleu_vs_depth.png}; per run
# $DEEPNET_WORK/runs/<run>/. Re-running skips finished runs and resumes interrupted ones.
#
# Environment (DEEPNET_<NAME> or <NAME>; defaults in brackets; the rest as for train.sh and
# evaluate.sh; --dry-run lists the runs and their statuses):
#   SRC, TGT      as for prepare.sh (required)
#   METHODS       methods to run                   [deepnet post_ln pre_ln]
#   DEPTHS        layers per side                  [6 18 50]
#   RUNS          instead of METHODS x DEPTHS: METHOD:ENC:DEC[:KEY=VALUE...] entries
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec parallel sweep "$@"
