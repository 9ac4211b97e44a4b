#!/usr/bin/env bash
# Evaluate one IWSLT-14 De-En run (the paper's Figure 6): average its last checkpoints,
# fairseq-generate the test set, detokenised sacreBLEU with its signature.
#
#   METHOD=deepnet LAYERS=50 bash scripts/iwslt14/evaluate.sh
#
# Hardware: one GPU (or CPU at smoke size). Time (estimated): a few minutes per model. Output:
# $DEEPNET_WORK/runs/<run>/eval/{eval.json, generate-test.txt}.
# Environment: as for scripts/wmt17/evaluate.sh (see its --help); defaults: the iwslt14 preset (docs/presets.md).
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec iwslt14 evaluate "$@"
