# shellcheck shell=bash disable=SC2034,SC2054
# (sourced: the callers use its names; the commas are inside values)
# The multilingual sweep's fairseq-train arguments (configs/multilingual-depth.toml at its
# budget: fp32, 1,024 tokens per update, 64 wide, no activation checkpointing), for the probes
# that time its deep cells outside the recipes: gpu-probe.sh and cpu-pace.sh source this file
# from the repository root. Each caller adds the data, the architecture, its depth and rate.
SWEEP_ARGS=(--user-dir "$PWD/deepnet_fairseq" --task translation_multi_simple_epoch
  --langs en,cs,de,fr --lang-pairs cs-en,en-cs,de-en,en-de,fr-en,en-fr
  --encoder-langtok src --decoder-langtok --sampling-method temperature --sampling-temperature 5
  --encoder-embed-dim 64 --encoder-ffn-embed-dim 256 --encoder-attention-heads 4
  --decoder-embed-dim 64 --decoder-ffn-embed-dim 256 --decoder-attention-heads 4
  --share-all-embeddings --dropout 0.1 --optimizer adam --adam-betas '(0.9, 0.98)'
  --lr-scheduler inverse_sqrt --warmup-updates 400 --warmup-init-lr 1e-7 --clip-norm 0.0
  --weight-decay 0.0 --criterion label_smoothed_cross_entropy --label-smoothing 0.1
  --max-update 8000 --max-epoch 0 --seed 1 --max-tokens 1024 --update-freq 1
  --ddp-backend legacy_ddp --num-workers 0 --distributed-world-size 1
  --no-save --save-dir /tmp/sweep-probe-checkpoints --log-format simple --log-interval 10)
# the depth rule's rates of the 1,000-layer cells (2e-3 x (6/500)^(2/3)) and of 100L-100L
DEEPNET_500_LR=0.000104675
DEEPNET_100_LR=0.000306236
# Pre-LN + CompleteP at every depth: its 6L-6L rate, unchanged (CompleteP transfers it)
COMPLETEP_ARGS=(--arch pre_ln_transformer --depth-transfer completep --depth-base 6 --lr 0.004)
