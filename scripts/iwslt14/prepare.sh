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
# Environment (defaults in brackets; the rest in configs/iwslt14.sh, configs/smoke.sh):
#   SIZE, DEEPNET_WORK  as in scripts/wmt17/prepare.sh [full; runs/iwslt14 or runs/iwslt14-<SIZE>]
#   SOURCE         download | local | multi30k         [download]
#   IWSLT_URL      the de-en archive                   [configs/iwslt14.sh: fairseq's mirror]
#   DOWNLOAD_DIR   archive location (put a downloaded de-en.tgz here)  [$DEEPNET_WORK/download]
#   LOCAL_DIR, LOCAL_TRAIN, LOCAL_VALID, LOCAL_TEST    SOURCE=local, as in scripts/wmt17/prepare.sh
# Output: $DEEPNET_WORK/data/{bin, spm.model, raw/test.de-en.en (the references)}.
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_init iwslt14 prepare "$@"
need_tools fairseq-preprocess
PAIR=$SRC-$TGT

# xml_text FILE: the <seg> contents of an IWSLT xml file, one a line
xml_text() { grep '<seg id' "$1" | sed -e 's/<seg id="[0-9]*">\s*//' -e 's/\s*<\/seg>//'; }

if [[ ! -f "$RAW/.done" ]]; then
  fresh_dir "$RAW.tmp"
  case "$SOURCE" in
    local|multi30k) local_bilingual "$RAW.tmp" ;;
    download)
      fetch "$IWSLT_URL" "$DOWNLOAD_DIR/de-en.tgz"
      extract "$DOWNLOAD_DIR/de-en.tgz" "$DOWNLOAD_DIR/de-en"
      dir=$(dirname "$(find "$DOWNLOAD_DIR/de-en" -name 'train.tags.de-en.de' | head -n 1)")
      [[ -f "$dir/train.tags.de-en.de" ]] || die "train.tags.de-en.de not in $IWSLT_URL"
      for lang in "$SRC" "$TGT"; do
        # training text: the lines that are not xml markup
        grep -v '^\s*<' "$dir/train.tags.de-en.$lang" | awk 'NR % 23 != 0' | read_text /dev/stdin "$TRAIN_LINES" > "$RAW.tmp/train.$PAIR.$lang"
        grep -v '^\s*<' "$dir/train.tags.de-en.$lang" | awk 'NR % 23 == 0' | read_text /dev/stdin "$VALID_LINES" > "$RAW.tmp/valid.$PAIR.$lang"
        for set in IWSLT14.TED.dev2010 IWSLT14.TED.tst2010 IWSLT14.TED.tst2011 IWSLT14.TED.tst2012 IWSLT14.TEDX.dev2012; do
          xml_text "$dir/$set.de-en.$lang.xml"
        done | read_text /dev/stdin "$TEST_LINES" > "$RAW.tmp/test.$PAIR.$lang"
      done ;;
  esac
  publish_raw "$PAIR"
  log "raw text: $(wc -l < "$RAW/train.$PAIR.$SRC") train, $(wc -l < "$RAW/valid.$PAIR.$SRC") valid, $(wc -l < "$RAW/test.$PAIR.$SRC") test pairs"
fi
prepare_bilingual
log "done: $BIN"
