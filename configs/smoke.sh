# shellcheck shell=bash
# SIZE=smoke: the whole chain in about a minute per dataset on 2 CPU cores (CI, laptops).
# Numbers chosen only to be small; nothing here is a paper setting.
: "${MODEL:=tiny}"             # [chosen] 64-128-2 width (configs/model/tiny.sh)
: "${TRAIN_LINES:=2000}"       # [chosen] sentence pairs per corpus (per pair for OPUS-100)
: "${TEST_LINES:=60}"          # [chosen] test sentences decoded per direction
: "${VALID_LINES:=100}"        # [chosen] validation sentences per direction
: "${VOCAB:=1000}"             # [chosen] joint sentencepiece vocabulary
: "${TOKENS_PER_UPDATE:=4096}" # [chosen] effective batch in tokens
: "${MAX_TOKENS:=4096}"        # [chosen] per process (the 2-process test sets 2048: 2 x 2048 = 4096)
: "${MAX_UPDATE:=20}"          # [chosen] updates per run
: "${WARMUP:=5}"               # [chosen] warmup updates
: "${LR:=0.002}"               # [chosen] fast learning for a tiny model
: "${SAVE_INTERVAL_UPDATES:=10}" # [chosen] update checkpoints at 10 and 20 ...
: "${AVERAGE_LAST:=2}"         # [chosen] ... of which the last 2 are averaged
: "${DEPTHS:=1 2}"             # [chosen] layers per side
: "${BEAM:=2}"                 # [chosen] small beam, fast decoding
: "${SPM_SENTENCES:=100000}"   # [chosen] sentencepiece training sample
