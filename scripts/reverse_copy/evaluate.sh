#!/usr/bin/env bash
# Evaluate one run of the depth study's task (Table 1's pattern at tiny scale): greedy decoding
# of the 200 test sentences, sacreBLEU of their reversals.
#
#   METHOD=post_ln LAYERS=18 bash scripts/reverse_copy/evaluate.sh
#
# Hardware: one CPU core. Time: seconds at 6L, a minute or two at 500L per side.
# Output: $DEEPNET_WORK/runs/<run>/eval/{eval.json, generate-test.txt}.
# Environment: as train.sh.
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec reverse_copy evaluate "$@"
