#!/usr/bin/env bash
# Evaluate one run on your own parallel text (the parallel dataset: no paper table, your
# corpus): average its last checkpoints, fairseq-generate TEST_TEXT, score detokenised
# sacreBLEU (with its signature).
#
#   SRC=de TGT=en METHOD=deepnet LAYERS=18 bash scripts/parallel/evaluate.sh
#
# Hardware: one GPU (or CPU at small sizes). Time: minutes per model for a few thousand test
# sentences. Output: $DEEPNET_WORK/runs/<run>/eval/{eval.json, generate-test.txt}.
#
# Environment (DEEPNET_<NAME> or <NAME>; defaults in brackets; the rest: docs/presets.md):
#   SRC, TGT      as for prepare.sh (required)
#   METHOD, LAYERS / ENC_LAYERS / DEC_LAYERS, RUN_NAME   which run   [deepnet, 6]
#   SIZE, DEEPNET_WORK, DEVICE, PRECISION                as for train.sh
#   AVERAGE_LAST, BEAM, LENPEN                           [5, 5, 1.0]
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec parallel evaluate "$@"
