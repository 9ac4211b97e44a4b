#!/usr/bin/env bash
# Train one model of the paper's Figure 6 (IWSLT-14 De-En; Wang et al. 2022, DeepNet): METHOD
# at ENC_LAYERS-DEC_LAYERS, 512-1024-4, on the data of prepare.sh. Made for one GPU.
#
#   METHOD=deepnet LAYERS=50 bash scripts/iwslt14/train.sh
#   SIZE=smoke DEVICE=cpu METHOD=pre_ln LAYERS=2 bash scripts/iwslt14/train.sh
#
# Hardware: one GPU with 24 GB or more (80 GB for 100L-100L without activation
# checkpointing). Time (estimated, not measured, 50k updates of 4096 tokens on one A100):
# 10L-10L ~1.5 h, 20L-20L ~3 h, 50L-50L ~6 h, 100L-100L ~12 h.
# Resumes from checkpoint_last.pt when restarted. Exit status 0 ok, 3 diverged,
# 4 source-blind (STOP_SOURCE_BLIND), 1 failed.
#
# Environment: as for scripts/wmt17/train.sh (see its --help); defaults: the iwslt14 preset (docs/presets.md).
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec iwslt14 train "$@"
