#!/usr/bin/env bash
# Your own parallel text, SRC->TGT (the parallel dataset: no paper table, your corpus): take the
# files you name, plain or gzipped, normalise, clean, train a joint sentencepiece model,
# fairseq-preprocess: the other datasets' steps, with general-purpose defaults.
#
#   SRC=de TGT=en TRAIN_TEXT=/data/train VALID_TEXT=/data/valid TEST_TEXT=/data/test \
#     bash scripts/parallel/prepare.sh         # /data/train.de and /data/train.en[.gz], ...
#   SIZE=smoke SOURCE=multi30k SRC=en TGT=de bash scripts/parallel/prepare.sh   # shipped text
#
# Hardware: any machine with disk for about 5 times the text. Time (estimated): minutes per
# million pairs on 8 CPU cores (cleaning and sentencepiece dominate). Re-running skips finished
# steps; every step writes to a temporary name and renames when complete.
#
# Environment (DEEPNET_<NAME> or <NAME>; defaults in brackets; the rest in the
# presets, docs/presets.md; docs/running.md; --dry-run prints the settings and stops):
#   SRC, TGT      source and target language: the files' last suffix (required)
#   TRAIN_TEXT, VALID_TEXT, TEST_TEXT   PATH of PATH.SRC and PATH.TGT, plain or .gz
#   SOURCE        local | multi30k (shipped in deepnet_fairseq/corpora)   [local]
#   SIZE          full, mini or smoke                           [full]
#   DEEPNET_WORK  output directory (never bare WORK)        [runs/parallel or runs/parallel-<SIZE>]
#   TRAIN_LINES, VALID_LINES, TEST_LINES  keep only the first N lines (0 = all)  [0]
#   VOCAB         joint sentencepiece vocabulary                [16000; smoke 1000]
# Output: $DEEPNET_WORK/data/{bin (fairseq binaries), spm.model, raw/ (the references),
# config.json}. Only directories the recipes created are ever deleted.
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec parallel prepare "$@"
