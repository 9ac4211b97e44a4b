#!/usr/bin/env bash
# The depth study as a sweep (Table 1's pattern at tiny scale; deepnet-depth-study runs
# prepare.sh and this): every METHOD x DEPTH on the reverse-copy task, then the table, the
# validation loss against the source-blind baseline, and the plots.
#
#   METHODS="post_ln deepnet" DEPTHS="6 18" bash scripts/reverse_copy/sweep.sh
#
# Hardware: one CPU core per run. Time: 1 to 7 minutes a run at 6L to 50L per side (33
# minutes for the three methods at 6, 18 and 50); hours at 100L and beyond.
# Output: $DEEPNET_WORK/results/{valid_loss.md, loss_vs_depth.png, table.md, results.csv, ...}.
# Re-running skips finished runs and resumes interrupted ones.
# Environment: METHODS [post_ln pre_ln deepnet], DEPTHS [6 18 50 100 200 500], RUNS, and every
# setting of docs/presets.md.
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec reverse_copy sweep "$@"
