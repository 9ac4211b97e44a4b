#!/usr/bin/env bash
# Train one many-to-many OPUS-100 model of the paper's Table 2 / Figure 8 (Wang et al. 2022,
# DeepNet): METHOD at ENC_LAYERS-DEC_LAYERS, 512-2048-8, all X<->En directions of prepare.sh,
# translation_multi_simple_epoch with language tokens and temperature sampling.
#
#   METHOD=deepnet LAYERS=100 bash scripts/opus100/train.sh      # DeepNet 200L, one 8-GPU node
#   LAYERS=500 NNODES=16 LAUNCHER=srun bash scripts/opus100/train.sh   # 1000L, inside sbatch
#   SIZE=smoke DEVICE=cpu LAYERS=2 bash scripts/opus100/train.sh
#
# Hardware: 8 x 80 GB GPUs per node; the 500L-500L model wants several nodes. Time (estimated,
# not measured; docs/reproducing.md table; 4 epochs of ~55M pairs, 8 x A100-80GB): 12L ~3 h, 48L ~9 h,
# 200L ~2 days, 1000L ~2 weeks on one node (roughly divided by the node count).
# Resumes from checkpoint_last.pt when restarted. Exit status 0 ok, 3 diverged,
# 4 source-blind (STOP_SOURCE_BLIND), 1 failed.
#
# Environment (as for scripts/wmt17/train.sh; see its --help), and:
#   TEMPERATURE   sampling temperature over language pairs       [5]
#   LAYERS        layers per side                                [6]
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec opus100 train "$@"
