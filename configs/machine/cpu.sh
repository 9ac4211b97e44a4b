# shellcheck shell=bash
# CPU (smoke runs, CI, 2-process gloo check).
: "${MAX_TOKENS:=4096}"          # [chosen] tokens per process per step
: "${PRECISION:=fp32}"           # [chosen] fp32 (bf16 also works on CPU; fp16 needs CUDA)
: "${CHECKPOINT_ACTIVATIONS_FROM:=200}"  # [chosen] same rule as on GPU (saves memory, costs time)
: "${DDP_BACKEND:=legacy_ddp}"   # [chosen] torch DDP refuses fairseq's device_ids=[0] for CPU modules; fairseq's own all-reduce works over gloo
: "${NUM_WORKERS:=0}"            # [chosen] load data in the training process (few cores)
