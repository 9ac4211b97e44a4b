# shellcheck shell=bash
# WMT-17 En-De (the paper's Table 1): data, optimisation, schedule and evaluation.
# Model width: configs/model/$MODEL.sh; machine: configs/machine/$DEVICE.sh.
# [admin-torch]: the paper's own training setting, which the DeepNet authors shared with the
# Admin authors, who publish it in microsoft/admin-torch (example/README.md, "Comparison with
# original Admin and DeepNet on WMT'17 En-De"; example/train_wmt_en-de_huge_batch.sh). They
# report that DeepNet at 100L-100L FAILS with a regular 8 x 4,096-token batch and trains with
# this 128 x 4,096 one: keep TOKENS_PER_UPDATE at 524288 whatever the number of GPUs (the
# recipes raise --update-freq to keep it). That script also seeds 1111, uses
# --memory-efficient-fp16 and --threshold-loss-scale 0.0625, which the recipes do not.
: "${MODEL:=base}"            # [paper] Table 1 models are 512-2048-8
: "${SRC:=en}"                # [paper] En->De
: "${TGT:=de}"
: "${DEPTHS:=6 18 50 100}"    # [paper] Table 1 columns, layers per side (6L-6L ... 100L-100L)
: "${METHODS:=deepnet post_ln pre_ln}"  # [paper] Table 1 rows available in deepnet_fairseq.methods
: "${VOCAB:=32000}"           # [chosen] joint sentencepiece size usual for WMT En-De
: "${SPM_SENTENCES:=10000000}" # [chosen] sentences sampled to train sentencepiece
: "${TRAIN_LINES:=0}"         # [chosen] 0 = all of the ~5.9M sentence pairs
: "${VALID_LINES:=0}"         # [paper] all of newstest2016
: "${TEST_LINES:=0}"          # [paper] all of newstest2017
: "${MAX_LEN:=250}"           # [chosen] drop pairs longer than 250 words (Moses clean-corpus custom)
: "${LEN_RATIO:=1.5}"         # [chosen] drop pairs whose word-count ratio exceeds 1.5 (ditto)
: "${LR:=1.5e-3}"             # [admin-torch] the DeepNet authors' WMT-17 setting (see above): --lr 0.0015
: "${WARMUP:=4000}"           # [admin-torch] inverse_sqrt, --warmup-updates 4000 ...
: "${WARMUP_INIT_LR:=1e-7}"   # [admin-torch] ... from --warmup-init-lr 1e-07
: "${ADAM_BETAS:=(0.9, 0.98)}" # [admin-torch] --adam-betas '(0.9, 0.98)'
: "${CLIP_NORM:=0.0}"         # [admin-torch] --clip-norm 0.0 (no clipping)
: "${WEIGHT_DECAY:=0.0001}"   # [admin-torch] --weight-decay 0.0001
: "${DROPOUT:=0.4}"           # [admin-torch] --dropout 0.4
: "${LABEL_SMOOTHING:=0.1}"   # [admin-torch] --label-smoothing 0.1
: "${TOKENS_PER_UPDATE:=524288}" # [admin-torch] 128 x 4,096 tokens per update (there: 8 GPUs x 2,048 x update-freq 32)
: "${MAX_UPDATE:=100000}"     # [admin-torch] --max-update 100000
: "${FP16_SCALE_WINDOW:=256}" # [admin-torch] fp16 with --fp16-scale-window 256 (PRECISION=fp16 on CUDA)
: "${MAX_EPOCH:=0}"           # [chosen] 0 = no epoch limit (MAX_UPDATE decides)
: "${SAVE_INTERVAL_UPDATES:=2000}" # [chosen] update checkpoints every 2000 updates ...
: "${AVERAGE_LAST:=5}"        # [chosen] ... and the last 5 are averaged for evaluation
: "${BEAM:=5}"                # [chosen] fairseq's usual beam; the paper does not state its own as text
: "${LENPEN:=1.0}"            # [chosen] fairseq default length penalty (ditto)
: "${MAX_LEN_A:=1.2}"          # [chosen] hypotheses at most 1.2 x source + 10 tokens (fairseq WMT examples)
: "${MAX_LEN_B:=10}"
: "${TOKENIZED_BLEU:=1}"   # [paper] Table 1 reports fairseq's tokenized BLEU
: "${COMPOUND_SPLIT:=1}"      # [paper] tokenized BLEU with compound splitting, fairseq's WMT En-De practice
