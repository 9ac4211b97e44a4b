#!/usr/bin/env bash
# Train one tiny (64-128-2) model on the depth study's reverse-copy task (Table 1's pattern at
# tiny scale): METHOD at ENC_LAYERS-DEC_LAYERS, 400 updates of 512 tokens at lr 1e-3.
#
#   METHOD=post_ln LAYERS=18 bash scripts/reverse_copy/train.sh
#
# Hardware: one CPU core is enough. Time: 1 to 7 minutes at 6L to 50L per side. Restarting
# resumes from checkpoint_last.pt. Exit status: 0 ok, 3 diverged, 4 source-blind, 1 failed,
# 128+N interrupted.
# Environment: METHOD, LAYERS / ENC_LAYERS / DEC_LAYERS, DEEPNET_WORK, and every setting of
# docs/presets.md.
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec reverse_copy train "$@"
