#!/usr/bin/env bash
# IWSLT-14 De-En data for the paper's Figure 6 (Wang et al. 2022, DeepNet: BLEU vs depth on
# IWSLT-14 De-En): download (or take from a local directory), normalise, clean, joint
# sentencepiece, fairseq-preprocess. The usual split: valid = every 23rd training pair,
# test = dev2010 + tst2010-2012 + TEDx dev2012 (as fairseq's prepare-iwslt14.sh; cased here).
#
#   bash scripts/iwslt14/prepare.sh
#   SIZE=smoke SOURCE=multi30k bash scripts/iwslt14/prepare.sh   # CI: shipped Multi30k de->en
#
# Hardware: any machine. Time: about 5 minutes (smoke: well under a minute). Re-running skips
# finished steps; the download resumes.
#
# Environment (defaults in brackets; the rest: docs/presets.md):
#   SIZE, DEEPNET_WORK  as in scripts/wmt17/prepare.sh [full; runs/iwslt14 or runs/iwslt14-<SIZE>]
#   SOURCE         download | local | multi30k         [download]
#   IWSLT_URL      the de-en archive                   [the iwslt14 preset: fairseq's mirror]
#   DOWNLOAD_DIR   archive location (put a downloaded de-en.tgz here)  [$DEEPNET_WORK/download]
#   LOCAL_DIR, LOCAL_TRAIN, LOCAL_VALID, LOCAL_TEST    SOURCE=local, as in scripts/wmt17/prepare.sh
# Output: $DEEPNET_WORK/data/{bin, spm.model, raw/test.de-en.en (the references)}.
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec iwslt14 prepare "$@"
