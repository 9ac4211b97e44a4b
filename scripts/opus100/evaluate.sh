#!/usr/bin/env bash
# Evaluate one OPUS-100 run (the paper's Table 2): average its last checkpoints, decode every
# X<->En test set with fairseq-generate's code (one process for all directions, see
# deepnet_fairseq/recipes/evaluation/evaluate.py),
# score detokenised, case-sensitive sacreBLEU per direction and the X->En / En->X averages.
#
#   METHOD=deepnet LAYERS=100 bash scripts/opus100/evaluate.sh
#
# Hardware: one GPU (or CPU at smoke size). Time (estimated): 198 directions x 2,000 sentences,
# 1-3 hours per model on one 80 GB GPU. Output: $DEEPNET_WORK/runs/<run>/eval/{eval.json, <dir>/};
# an interrupted evaluation resumes with the directions it has not decoded yet.
#
# Environment (as for scripts/wmt17/evaluate.sh): METHOD, LAYERS / ENC_LAYERS / DEC_LAYERS,
# RUN_NAME, SIZE, DEEPNET_WORK, DEVICE, PRECISION, AVERAGE_LAST, BEAM, LENPEN.
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec opus100 evaluate "$@"
