#!/usr/bin/env bash
# Train one model of the paper's Table 1 (WMT-17 En-De; Wang et al. 2022, DeepNet): METHOD at
# ENC_LAYERS-DEC_LAYERS, Transformer-base width, on the data of prepare.sh.
#
#   METHOD=deepnet LAYERS=18 bash scripts/wmt17/train.sh          # all GPUs of this node
#   SIZE=smoke DEVICE=cpu METHOD=post_ln LAYERS=2 bash scripts/wmt17/train.sh
#   NPROC=2 SIZE=smoke DEVICE=cpu bash scripts/wmt17/train.sh     # 2 CPU processes (gloo)
#   NNODES=2 NODE_RANK=0|1 MASTER_ADDR=node0 bash scripts/wmt17/train.sh   # torchrun, per node
#   sbatch --nodes 4 --gpus-per-node 8 --wrap "LAUNCHER=srun bash scripts/wmt17/train.sh"
#
# Hardware: 8 x 80 GB GPUs (fewer work: --update-freq keeps the effective batch). Time
# (estimated, not measured; README table): 6L-6L ~6 h, 18L-18L ~15 h, 50L-50L ~1.7 days,
# 100L-100L ~4.5 days for 100k updates on 8 x A100-80GB. Smoke size: ~15 s on 2 CPU cores.
# Restarting resumes from checkpoint_last.pt; a finished run (ok or diverged) is not retrained.
# Exit status: 0 ok, 3 diverged, 1 failed; $WORK/runs/<run>/status.json says which and why.
#
# Environment (defaults in brackets; the rest in configs/wmt17.sh, configs/model/*.sh,
# configs/machine/{cuda,cpu}.sh):
#   METHOD        a name of python -m deepnet_fairseq.methods     [deepnet]
#   LAYERS        layers per side; or ENC_LAYERS / DEC_LAYERS      [6]
#   SIZE, WORK    as for prepare.sh                                [full, runs/wmt17]
#   DEVICE        auto | cuda | cpu                                [auto]
#   PRECISION     fp16 | bf16 | fp32                               [fp16 on cuda, fp32 on cpu]
#   NPROC         processes per node                               [all GPUs; 1 on cpu]
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT   multi-node torchrun   [1, 0, -, 29500]
#   LAUNCHER      auto | none | torchrun | srun                    [auto]
#   TOKENS_PER_UPDATE  effective batch, kept through --update-freq [131072]
#   CHECKPOINT_ACTIVATIONS=1  force activation checkpointing (on by default from N+M >= 200)
#   RUN_NAME      run directory under $WORK/runs                   [METHOD-NL-ML]
#   RETRY=1       train again a run whose status is ok or diverged
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec wmt17 train "$@"
