#!/usr/bin/env bash
# Train one model on your own parallel text (the parallel dataset: no paper table, your corpus):
# METHOD at ENC_LAYERS-DEC_LAYERS on the data of prepare.sh, at the parallel preset's settings.
#
#   SRC=de TGT=en METHOD=deepnet LAYERS=18 bash scripts/parallel/train.sh
#   SIZE=smoke DEVICE=cpu SRC=en TGT=de LAYERS=2 bash scripts/parallel/train.sh
#
# Hardware: any number of GPUs (--update-freq keeps TOKENS_PER_UPDATE), or CPU at small sizes.
# Time: depends on your corpus and MAX_UPDATE; smoke size ~15 s on 2 CPU cores. Restarting
# resumes from checkpoint_last.pt; a finished run is not retrained. Exit status: 0 ok,
# 3 diverged, 4 source-blind, 1 failed, 128+N interrupted by signal N.
#
# Environment (DEEPNET_<NAME> or <NAME>; defaults in brackets; the rest in the
# presets, docs/presets.md; docs/running.md):
#   SRC, TGT      as for prepare.sh (required)
#   METHOD        a name of python -m deepnet_fairseq.methods     [deepnet]
#   LAYERS        layers per side; or ENC_LAYERS / DEC_LAYERS      [6]
#   SIZE, DEEPNET_WORK, DEVICE, NPROC, NNODES, LAUNCHER   as for scripts/wmt17/train.sh
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec parallel train "$@"
