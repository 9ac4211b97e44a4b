#!/usr/bin/env bash
# Evaluate one WMT-17 En-De run (the paper's Table 1): average its last checkpoints,
# fairseq-generate newstest2017, score tokenized BLEU with compound splitting (the paper's
# metric) and detokenised sacreBLEU (with its signature).
#
#   METHOD=deepnet LAYERS=18 bash scripts/wmt17/evaluate.sh
#
# Hardware: one GPU (or CPU at smoke size). Time (estimated): 2-10 minutes per model on one
# 80 GB GPU, depth-dependent. Output: $DEEPNET_WORK/runs/<run>/eval/{eval.json,
# generate-test.txt}; it appears only when complete. Re-running is a no-op unless the
# checkpoints changed. --dry-run prints the settings and the command.
#
# Environment (DEEPNET_<NAME> or <NAME>; defaults in brackets; the rest: docs/presets.md):
#   METHOD, LAYERS / ENC_LAYERS / DEC_LAYERS, RUN_NAME   which run   [deepnet, 6]
#   SIZE, DEEPNET_WORK, DEVICE, PRECISION                as for train.sh
#   AVERAGE_LAST  update checkpoints averaged                     [5]
#   BEAM, LENPEN  beam size and length penalty                    [5, 1.0]
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec wmt17 evaluate "$@"
