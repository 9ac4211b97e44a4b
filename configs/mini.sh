# shellcheck shell=bash
# SIZE=mini: the paper's Table 1 pattern on real text that ships with the repository.
# Post-LN, Pre-LN and DeepNet at 6, 18 and 50 layers per side on Multi30k en->de (29,000 pairs,
# deepnet_fairseq/corpora/multi30k), identical hyperparameters for all nine runs, on CPU:
# AT MOST 3 HOURS ON 2 CPU CORES for the whole sweep (data, 9 trainings, 9 evaluations);
# measured: 1 h 40 min on a 2-core AMD EPYC; figures in results/wmt17-mini/ and docs/results.md
# ("The paper's pattern on real text").
#   SIZE=mini SOURCE=multi30k bash scripts/wmt17/prepare.sh && SIZE=mini bash scripts/wmt17/sweep.sh
# Interrupt it at any time: the next launch resumes the unfinished run and skips finished ones.
# A 64-wide model (FFN 4x) and 1,000 updates of 1,024 tokens keep the three 50L-50L runs within
# the budget (about 1.3 s per 50L-50L update, measured in the sweep); the point is the
# pattern across depth, not Table 1's BLEU. DeepNet runs first, 6L before 50L, so a first
# figure comes within minutes.
: "${EMBED_DIM:=64}"          # [chosen] the width that fits 9 runs into 3 CPU hours
: "${FFN_DIM:=256}"           # [chosen] 4 x width, as Transformer-base
: "${HEADS:=4}"               # [chosen] 16 dimensions per head
: "${DEPTHS:=6 18 50}"        # [paper] Table 1's first three columns, layers per side
: "${METHODS:=deepnet pre_ln post_ln}"  # [paper] Table 1's rows
: "${TRAIN_LINES:=0}"         # [chosen] all 29,000 training pairs
: "${VALID_LINES:=0}"         # [chosen] all 1,014 validation pairs
: "${TEST_LINES:=0}"          # [chosen] all 1,000 test_2016_flickr pairs
: "${VOCAB:=4000}"            # [chosen] joint sentencepiece, as the quickstart (measured there)
: "${SPM_SENTENCES:=100000}"  # [chosen] every sentence of both sides
: "${TOKENS_PER_UPDATE:=1024}" # [chosen] small batches: many updates in few CPU hours
: "${MAX_TOKENS:=1024}"       # [chosen] one CPU process, update-freq 1
: "${LR:=1e-3}"               # [chosen] the quickstart's 1.5e-3 (at 2,048 tokens) over sqrt(2) for half the batch
: "${WARMUP:=400}"            # [chosen] as the quickstart (measured there)
: "${DROPOUT:=0.1}"           # [chosen] a small model on a small corpus, few epochs
: "${WEIGHT_DECAY:=0.0}"      # [chosen] as the quickstart
: "${MAX_UPDATE:=1000}"       # [chosen] 1.7 epochs: what 3 hours allow for 3 x 50L-50L
: "${SAVE_INTERVAL_UPDATES:=200}" # [chosen] update checkpoints every 200 updates ...
: "${AVERAGE_LAST:=2}"        # [chosen] ... the last 2 (updates 800 and 1000) averaged
: "${LOG_INTERVAL:=50}"       # [chosen] a training line every 50 updates
: "${BEAM:=5}"                # [chosen] as configs/wmt17.sh
