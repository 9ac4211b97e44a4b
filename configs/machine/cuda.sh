# shellcheck shell=bash
# CUDA GPUs (sized for 80 GB cards). Nothing here changes the model or the effective batch:
# the recipes set --update-freq so that MAX_TOKENS x GPUs x update-freq >= TOKENS_PER_UPDATE.
: "${MAX_TOKENS:=4096}"          # [chosen] tokens per GPU per step; lower it (2048) if a deep model runs out of memory
: "${PRECISION:=fp16}"           # [paper] fp16 training; bf16 (PRECISION=bf16) is an option, fp32 for debugging
: "${FP16_INIT_SCALE:=128}"      # [chosen] fairseq's default start; deep models rarely need more headroom
: "${FP16_SCALE_WINDOW:=256}"    # [chosen] grow the scale every 256 clean steps (fairseq's default 2^14/world is slow to recover)
: "${MIN_LOSS_SCALE:=0.0001}"    # [chosen] give up (FloatingPointError -> "diverged") only below 1e-4
: "${CHECKPOINT_ACTIVATIONS_FROM:=200}"  # [chosen] activation checkpointing when N+M >= 200 (100L-100L and deeper)
: "${DDP_BACKEND:=pytorch_ddp}"  # [chosen] torch DDP
: "${NUM_WORKERS:=2}"            # [chosen] data-loader workers per GPU
