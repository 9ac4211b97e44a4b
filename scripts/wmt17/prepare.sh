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
# Environment (DEEPNET_<NAME> or <NAME>; defaults in brackets; the rest in configs/wmt17.sh,
# configs/<SIZE>.sh; docs/recipes.md; --dry-run prints the settings and stops):
#   SIZE          full, or a configs/<SIZE>.sh: smoke, mini     [full]
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
recipe_init wmt17 prepare "$@"
need_tools fairseq-preprocess

PAIR=$SRC-$TGT
if [[ ! -f "$RAW/.done" ]]; then
  fresh_dir "$RAW.tmp"
  case "$SOURCE" in
    local|multi30k) local_bilingual "$RAW.tmp" ;;
    download)
      need_tools sacrebleu
      fetch http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz "$DOWNLOAD_DIR/training-parallel-europarl-v7.tgz"
      fetch http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz "$DOWNLOAD_DIR/training-parallel-commoncrawl.tgz"
      fetch http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz "$DOWNLOAD_DIR/training-parallel-nc-v12.tgz"
      fetch http://data.statmt.org/wmt17/translation-task/rapid2016.tgz "$DOWNLOAD_DIR/rapid2016.tgz"
      for archive in training-parallel-europarl-v7 training-parallel-commoncrawl training-parallel-nc-v12 rapid2016; do
        extract "$DOWNLOAD_DIR/$archive.tgz" "$DOWNLOAD_DIR/$archive"
      done
      for lang in "$SRC" "$TGT"; do
        files=()
        for corpus in europarl-v7.de-en commoncrawl.de-en news-commentary-v12.de-en rapid2016.de-en; do
          found=$(find "$DOWNLOAD_DIR" -name "$corpus.$lang" -type f | head -n 1)
          [[ -n "$found" ]] || die "$corpus.$lang not found in the archives under $DOWNLOAD_DIR"
          files+=("$found")
        done
        cat "${files[@]}" | read_text /dev/stdin "$TRAIN_LINES" > "$RAW.tmp/train.$PAIR.$lang"
        side=$([[ $lang == "$SRC" ]] && echo src || echo ref)
        # dev and test sets through sacrebleu, which checks its downloads against checksums
        sacrebleu -t wmt16 -l "$PAIR" --echo "$side" | read_text /dev/stdin "$VALID_LINES" > "$RAW.tmp/valid.$PAIR.$lang"
        sacrebleu -t wmt17 -l "$PAIR" --echo "$side" | read_text /dev/stdin "$TEST_LINES" > "$RAW.tmp/test.$PAIR.$lang"
      done ;;
  esac
  publish_raw "$PAIR"
  log "raw text: $(wc -l < "$RAW/train.$PAIR.$SRC") train, $(wc -l < "$RAW/valid.$PAIR.$SRC") valid, $(wc -l < "$RAW/test.$PAIR.$SRC") test pairs"
fi
prepare_bilingual
log "done: $BIN"
