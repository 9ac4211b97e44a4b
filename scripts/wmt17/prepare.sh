#!/usr/bin/env bash
# WMT-17 En-De data for the paper's Table 1 (Wang et al. 2022, DeepNet): download (or take from
# a local directory), normalise, clean, train a joint sentencepiece model, fairseq-preprocess.
#
#   bash scripts/wmt17/prepare.sh                     # download mode
#   SOURCE=local LOCAL_DIR=/data/wmt17-text bash scripts/wmt17/prepare.sh
#   SIZE=smoke SOURCE=multi30k bash scripts/wmt17/prepare.sh  # CI: the shipped Multi30k, WMT-shaped
#
# Data: europarl v7, commoncrawl, news-commentary v12, rapid 2016 (statmt.org WMT-17 archives,
# ~5.9M pairs); dev newstest2016, test newstest2017 (fetched by sacrebleu). Hardware: any
# machine with ~30 GB disk. Time (estimated): 1-2 hours on 8 CPU cores (cleaning and sentencepiece
# dominate). Smoke size: under a minute. Re-running skips finished steps; an interrupted
# download resumes; every step writes to a temporary name and renames when complete.
#
# Environment (DEEPNET_<NAME> or <NAME>; defaults in brackets; the rest in the
# presets, docs/presets.md; docs/running.md; --dry-run prints the settings and stops):
#   SIZE          full, mini or smoke                           [full]
#   DEEPNET_WORK  output directory (never bare WORK)            [runs/wmt17 or runs/wmt17-<SIZE>]
#   SOURCE        download | local | multi30k (shipped in deepnet_fairseq/corpora) [download]
#   DOWNLOAD_DIR  where archives are kept (put already-downloaded ones here) [$DEEPNET_WORK/download]
#   LOCAL_DIR     SOURCE=local: directory of {train,valid,test}.{en,de}[.gz] text
#   LOCAL_TRAIN, LOCAL_VALID, LOCAL_TEST  file stems inside LOCAL_DIR   [train, valid, test]
#   TRAIN_LINES, VALID_LINES, TEST_LINES  keep only the first N lines (0 = all)  [config]
#   VOCAB         joint sentencepiece vocabulary                [32000; smoke 1000]
# Output: $DEEPNET_WORK/data/{bin (fairseq binaries), spm.model, raw/test.en-de.de (the
# references), config.json}. Only directories the recipes created are ever deleted.
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec wmt17 prepare "$@"
