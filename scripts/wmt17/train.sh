#!/usr/bin/env bash
# Train one model of the paper's Table 1 (WMT-17 En-De; Wang et al. 2022, DeepNet): METHOD at
# ENC_LAYERS-DEC_LAYERS, Transformer-base width, on the data of prepare.sh, at the paper's
# training setting (the wmt17 preset: 128 x 4,096 tokens per update, lr 1.5e-3, dropout 0.4).
#
#   METHOD=deepnet LAYERS=18 bash scripts/wmt17/train.sh          # all GPUs of this node
#   LAYERS=100 bash scripts/wmt17/train.sh --dry-run              # print settings and command
#   SIZE=smoke DEVICE=cpu METHOD=post_ln LAYERS=2 bash scripts/wmt17/train.sh
#   NPROC=2 SIZE=smoke DEVICE=cpu bash scripts/wmt17/train.sh     # 2 CPU processes (gloo)
#   NNODES=2 NODE_RANK=0|1 MASTER_ADDR=node0 bash scripts/wmt17/train.sh   # torchrun, per node
#   sbatch --nodes 4 --gpus-per-node 8 --wrap "bash scripts/wmt17/train.sh"  # srun, 32 GPUs
#
# Hardware: 8 x 80 GB GPUs (fewer work: --update-freq keeps the 524,288-token batch). Time
# (estimated, not measured; docs/reproducing.md's table, from about 80k tokens/s per GPU at
# 6L-6L, falling in proportion to depth): 6L-6L ~23 h, 18L-18L ~2.8 days, 50L-50L ~8 days,
# 100L-100L ~16 days for 100k updates on 8 x A100-80GB. Smoke size: ~15 s on 2 CPU cores.
# Restarting resumes from checkpoint_last.pt; a finished run (ok or diverged) is not retrained.
# Logs: $DEEPNET_WORK/runs/<run>/train.log grows while training runs (every attempt, each
# after a header; attempts/attempt-N.log one each); config.json, command.sh, status.json.
# Exit status: 0 ok, 3 diverged, 4 source-blind, 1 failed, 128+N interrupted by signal N
# (SIGTERM from a scheduler's time limit: run the same command again to resume); status.json
# says which/why.
#
# Environment (DEEPNET_<NAME> or <NAME>; defaults in brackets; the rest in the
# presets, docs/presets.md; docs/running.md):
#   METHOD        a name of python -m deepnet_fairseq.methods     [deepnet]
#   LAYERS        layers per side; or ENC_LAYERS / DEC_LAYERS      [6]
#   SIZE, DEEPNET_WORK   as for prepare.sh                         [full, runs/wmt17]
#   DEVICE        auto | cuda | cpu                                [auto]
#   PRECISION     fp16 | bf16 | fp32                               [fp16 on cuda, fp32 on cpu]
#   NPROC         processes per node                  [every visible GPU; 1 on cpu]
#   NNODES        nodes                               [SLURM_NNODES in a SLURM job, else 1]
#   NODE_RANK, MASTER_ADDR, MASTER_PORT   torchrun on several nodes: required, required, [29500]
#   LAUNCHER      auto | none | torchrun | srun                    [auto]
#   TOKENS_PER_UPDATE  effective batch, kept through --update-freq [524288]
#   CHECKPOINT_ACTIVATIONS  auto | 1 | 0      [auto: on from N+M >= CHECKPOINT_ACTIVATIONS_FROM]
#   RUN_NAME      run directory under $DEEPNET_WORK/runs           [METHOD-NL-ML]
#   RETRY=1       train again a run whose status is ok or diverged
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec wmt17 train "$@"
