# shellcheck shell=bash
# OPUS-100 (the paper's Table 2 and Figure 8): one many-to-many model over English-centric pairs.
: "${MODEL:=base}"            # [paper] 512-2048-8 at every depth, up to 1000L (500L-500L)
: "${LANGS:=all}"             # [paper] all 99 pairs of OPUS-100 v1.0 with English; or e.g. "de fr cs"
: "${DEPTHS:=6 12 24 50 100 250 500}" # [chosen] 12 to 1000 layers in all, the range of Figure 8 (points chosen)
: "${METHODS:=deepnet}"       # [paper] Figure 8 is DeepNet; add pre_ln/post_ln for baselines
: "${VOCAB:=64000}"           # [chosen] one joint sentencepiece model for 100 languages
: "${SPM_SENTENCES:=10000000}" # [chosen] sentences sampled to train sentencepiece
: "${TRAIN_LINES:=0}"         # [paper] 0 = every training pair (up to 1M per language pair)
: "${VALID_LINES:=0}"         # [paper] the official dev sets
: "${TEST_LINES:=0}"          # [paper] the official 2,000-sentence test sets
: "${MAX_LEN:=250}"           # [chosen] drop pairs longer than 250 words
: "${LEN_RATIO:=3.0}"         # [chosen] lenient: word counts differ a lot across scripts
: "${TEMPERATURE:=5}"         # [chosen] temperature sampling over pairs, T=5 (common for OPUS-100)
: "${LR:=5e-4}"               # [chosen] not given as text in the paper
: "${WARMUP:=4000}"           # [chosen]
: "${WARMUP_INIT_LR:=1e-7}"   # [chosen] inverse_sqrt warmup from 1e-7 (fairseq examples)
: "${ADAM_BETAS:=(0.9, 0.98)}" # [chosen]
: "${CLIP_NORM:=0.0}"         # [chosen]
: "${WEIGHT_DECAY:=0.0}"      # [chosen] large data, no decay
: "${DROPOUT:=0.1}"           # [chosen]
: "${LABEL_SMOOTHING:=0.1}"   # [chosen]
: "${TOKENS_PER_UPDATE:=262144}" # [chosen] 8 GPUs x 4096 tokens x update-freq 8
: "${MAX_UPDATE:=0}"          # [chosen] 0 = no update limit (MAX_EPOCH decides)
: "${MAX_EPOCH:=4}"           # [paper] the 1000L model trained 4 epochs; chosen for every depth
: "${SAVE_INTERVAL_UPDATES:=5000}" # [chosen]
: "${AVERAGE_LAST:=5}"        # [chosen]
: "${BEAM:=5}"                # [chosen] the paper does not state it as text
: "${LENPEN:=1.0}"            # [chosen]
: "${MAX_LEN_A:=1.2}"          # [chosen] hypotheses at most 1.2 x source + 10 tokens (fairseq WMT examples)
: "${MAX_LEN_B:=10}"
: "${OPUS_URL:=https://object.pouta.csc.fi/OPUS-100/v1.0/opus-100-corpus-v1.0.tar.gz}" # [paper] the OPUS-100 v1.0 release (Zhang et al. 2020)
