#!/usr/bin/env bash
# OPUS-100 data for the paper's Table 2 and Figure 8 (Wang et al. 2022, DeepNet): the official
# v1.0 release (Zhang et al. 2020), English-centric pairs, one joint sentencepiece model,
# binarised for fairseq's translation_multi_simple_epoch task (language tokens, temperature
# sampling at training time).
#
#   bash scripts/opus100/prepare.sh                              # all 99 pairs, download mode
#   LANGS="de fr cs" bash scripts/opus100/prepare.sh             # a subset
#   SIZE=smoke SOURCE=multi30k bash scripts/opus100/prepare.sh   # CI: shipped Multi30k, de fr cs
#
# Hardware: ~100 GB disk, 16+ CPU cores. Time (estimated): 3-5 hours for all pairs (cleaning,
# sentencepiece over 55M pairs, 99 fairseq-preprocess calls). Smoke size: about a minute.
# Re-running skips finished steps (and finished pairs); the download resumes.
#
# Environment (defaults in brackets; the rest: docs/presets.md):
#   SIZE, DEEPNET_WORK  as in scripts/wmt17/prepare.sh  [full; runs/opus100 or runs/opus100-<SIZE>]
#   LANGS          non-English languages, or "all"       [all; with multi30k: de fr cs]
#   SOURCE         download | local | multi30k           [download]
#   DOWNLOAD_DIR   archive location (put a downloaded opus-100-corpus-v1.0.tar.gz here) [$DEEPNET_WORK/download]
#   OPUS_URL       the release archive                   [the opus100 preset]
#   LOCAL_DIR      SOURCE=local: per pair LOCAL_DIR/X-en/ (or en-X/), or one multi-way
#                  directory, holding {train,valid,test}.{X,en}[.gz] (stems: LOCAL_TRAIN,
#                  LOCAL_VALID, LOCAL_TEST)
#   TRAIN_LINES, VALID_LINES, TEST_LINES, VOCAB    as in the opus100 preset
#   WORKERS        processes for cleaning, encoding and fairseq-preprocess (pairs at once)
#                  [every core this process may use]
# Output: $DEEPNET_WORK/data/bin (with langs.txt, lang_pairs.txt), spm.model, raw/test.X-en.{X,en}.
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec opus100 prepare "$@"
