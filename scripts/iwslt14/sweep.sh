#!/usr/bin/env bash
# The paper's Figure 6 in one command (IWSLT-14 De-En, BLEU vs depth for DeepNet, Post-LN and
# Pre-LN): train and evaluate every METHOD x DEPTH, record diverged/failed runs and go on, then
# write the table, CSV and plot.
#
#   bash scripts/iwslt14/sweep.sh                         # one GPU, 12 runs
#   METHODS="deepnet post_ln" DEPTHS="10 50" bash scripts/iwslt14/sweep.sh
#
# Hardware: one GPU (more are used if present). Time (estimated, not measured): ~3 days for
# the 12 default runs on one A100. Smoke size: about a minute per run on 2 CPU cores.
# Output: $DEEPNET_WORK/results/{table.md, results.csv, bleu_vs_depth.png}.
#
# Environment (defaults in brackets; the rest as for train.sh and evaluate.sh):
#   METHODS  [deepnet post_ln pre_ln]   DEPTHS  layers per side [10 20 50 100]
#   RUNS     METHOD:ENC:DEC[:KEY=VALUE...] entries instead of METHODS x DEPTHS
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec iwslt14 sweep "$@"
