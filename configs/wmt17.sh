# shellcheck shell=bash
# WMT-17 En-De (the paper's Table 1): data, optimisation, schedule and evaluation.
# Model width: configs/model/$MODEL.sh; machine: configs/machine/$DEVICE.sh.
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
: "${LR:=5e-4}"               # [chosen] not given as text in the paper; fairseq Transformer-base value
: "${WARMUP:=4000}"           # [chosen] inverse_sqrt warmup updates (Vaswani et al. 2017)
: "${ADAM_BETAS:=(0.9, 0.98)}" # [chosen] Vaswani et al. 2017
: "${CLIP_NORM:=0.0}"         # [chosen] no clipping: DeepNet is meant to be stable without it
: "${WEIGHT_DECAY:=0.0001}"   # [chosen] small decay, fairseq WMT recipes
: "${DROPOUT:=0.1}"           # [chosen] Transformer-base dropout
: "${LABEL_SMOOTHING:=0.1}"   # [chosen] Vaswani et al. 2017
: "${TOKENS_PER_UPDATE:=131072}" # [chosen] 8 GPUs x 4096 tokens x update-freq 4; kept whatever the GPU count
: "${MAX_UPDATE:=100000}"     # [chosen] updates per run
: "${MAX_EPOCH:=0}"           # [chosen] 0 = no epoch limit (MAX_UPDATE decides)
: "${SAVE_INTERVAL_UPDATES:=2000}" # [chosen] update checkpoints every 2000 updates ...
: "${AVERAGE_LAST:=5}"        # [chosen] ... and the last 5 are averaged for evaluation
: "${BEAM:=5}"                # [chosen] fairseq's usual beam; the paper does not state its own as text
: "${LENPEN:=1.0}"            # [chosen] fairseq default length penalty (ditto)
: "${MAX_LEN_A:=1.2}"          # [chosen] hypotheses at most 1.2 x source + 10 tokens (fairseq WMT examples)
: "${MAX_LEN_B:=10}"
: "${TOKENIZED_BLEU:=1}"   # [paper] Table 1 reports fairseq's tokenized BLEU
: "${COMPOUND_SPLIT:=1}"      # [paper] tokenized BLEU with compound splitting, fairseq's WMT En-De practice
