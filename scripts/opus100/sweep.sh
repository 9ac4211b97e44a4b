#!/usr/bin/env bash
# The paper's Figure 8 (and Table 2's DeepNet rows) in one command: train and evaluate every
# METHOD x DEPTH on OPUS-100, record diverged/failed runs and go on, then write the table, CSV
# and the BLEU-versus-depth plot with the fit BLEU(d) = A ln d + B (d = N + M layers).
#
#   bash scripts/opus100/sweep.sh                                  # DeepNet, 12L ... 1000L
#   METHODS="deepnet pre_ln" DEPTHS="6 24 100" bash scripts/opus100/sweep.sh
#   NNODES=8 LAUNCHER=srun bash scripts/opus100/sweep.sh           # inside an sbatch allocation
#
# Hardware: 8 x 80 GB GPUs per node, several nodes for 250L-250L and 500L-500L. Time
# (estimated, not measured): ~4 weeks of one node for the default sweep; see train.sh per depth.
# Smoke size: a few minutes. Output: $DEEPNET_WORK/results/{table.md, results.csv, bleu_vs_depth.png}.
#
# Environment (defaults in brackets; the rest as for train.sh and evaluate.sh):
#   METHODS  [deepnet]   DEPTHS  layers per side [6 12 24 50 100 250 500]
#   RUNS     METHOD:ENC:DEC[:KEY=VALUE...] entries instead of METHODS x DEPTHS
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec opus100 sweep "$@"
