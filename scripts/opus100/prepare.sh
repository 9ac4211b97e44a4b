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
# Environment (defaults in brackets; the rest in configs/opus100.sh, configs/smoke.sh):
#   SIZE, DEEPNET_WORK  as in scripts/wmt17/prepare.sh  [full; runs/opus100 or runs/opus100-<SIZE>]
#   LANGS          non-English languages, or "all"       [all; with multi30k: de fr cs]
#   SOURCE         download | local | multi30k           [download]
#   DOWNLOAD_DIR   archive location (put a downloaded opus-100-corpus-v1.0.tar.gz here) [$DEEPNET_WORK/download]
#   OPUS_URL       the release archive                   [configs/opus100.sh]
#   LOCAL_DIR      SOURCE=local: per pair LOCAL_DIR/X-en/ (or en-X/), or one multi-way
#                  directory, holding {train,valid,test}.{X,en}[.gz] (stems: LOCAL_TRAIN,
#                  LOCAL_VALID, LOCAL_TEST)
#   TRAIN_LINES, VALID_LINES, TEST_LINES, VOCAB    as in configs/opus100.sh
# Output: $DEEPNET_WORK/data/bin (with langs.txt, lang_pairs.txt), spm.model, raw/test.X-en.{X,en}.
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_init opus100 prepare "$@"
need_tools fairseq-preprocess

if [[ "$SOURCE" == download ]]; then
  fetch "$OPUS_URL" "$DOWNLOAD_DIR/opus-100-corpus-v1.0.tar.gz"
  extract "$DOWNLOAD_DIR/opus-100-corpus-v1.0.tar.gz" "$DOWNLOAD_DIR/opus-100"
  SUPERVISED=$(find "$DOWNLOAD_DIR/opus-100" -type d -name supervised | head -n 1)
  [[ -n "$SUPERVISED" ]] || die "no supervised/ directory in the OPUS-100 archive"
  if [[ "$LANGS" == all ]]; then
    LANGS=$(find "$SUPERVISED" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sed 's/-\?en-\?//' | sort | tr '\n' ' ')
  fi
else  # local or multi30k
  [[ -d "${LOCAL_DIR:-}" ]] || die "SOURCE=local needs LOCAL_DIR (see --help), or SOURCE=multi30k"
  [[ "$LANGS" != all ]] || die "SOURCE=local needs LANGS, the languages to take from LOCAL_DIR"
fi
read -ra LANG_LIST <<< "$LANGS"
[[ ${#LANG_LIST[@]} -gt 0 ]] || die "LANGS is empty"

# raw text per pair: raw/{train,valid,test}.X-en.{X,en}
if [[ ! -f "$RAW/.done" ]]; then
  fresh_dir "$RAW.tmp"
  for x in "${LANG_LIST[@]}"; do
    [[ "$x" != en ]] || die "LANGS lists the non-English side of each pair; drop 'en'"
    for entry in "train:$LOCAL_TRAIN:$TRAIN_LINES" "valid:$LOCAL_VALID:$VALID_LINES" \
                 "test:$LOCAL_TEST:$TEST_LINES"; do
      IFS=: read -r split stem lines <<< "$entry"
      for lang in "$x" en; do
        if [[ "$SOURCE" == download ]]; then
          dir=$SUPERVISED/en-$x; [[ -d "$dir" ]] || dir=$SUPERVISED/$x-en
          opus_split=${split/valid/dev}
          file=$(find_local "$dir" "opus.$(basename "$dir")-$opus_split.$lang")
        else
          dir=$LOCAL_DIR/$x-en; [[ -d "$dir" ]] || dir=$LOCAL_DIR/en-$x; [[ -d "$dir" ]] || dir=$LOCAL_DIR
          file=$(find_local "$dir" "$stem.$lang")
        fi
        [[ -n "$file" ]] || die "no $split text for $lang in $dir (pair $x-en)"
        read_text "$file" "$lines" > "$RAW.tmp/$split.$x-en.$lang"
      done
    done
  done
  PAIRS=()
  for x in "${LANG_LIST[@]}"; do PAIRS+=("$x-en"); done
  publish_raw "${PAIRS[@]}"
fi
# the pairs are those of the raw text (a later LANGS needs a fresh DEEPNET_WORK)
PAIRS=()
LANG_LIST=()
for f in "$RAW"/train.*-en.en; do
  pair=${f#"$RAW"/train.}; pair=${pair%.en}
  PAIRS+=("$pair"); LANG_LIST+=("${pair%-en}")
done
log "${#PAIRS[@]} pair(s) with English: ${LANG_LIST[*]}"

prepare_text "${PAIRS[@]}"
if [[ ! -f "$BIN/.done" ]]; then
  log "fairseq-preprocess, ${#PAIRS[@]} pair(s), one shared dictionary -> $BIN"
  make_dir "$BIN.tmp"
  # the shared dictionary: every sentencepiece piece (fairseq adds its 4 specials itself)
  tail -n +2 "$DATA_DIR/spm.vocab" | cut -f1 | sed 's/$/ 1/' > "$BIN.tmp/dict.txt"
  for x in "${LANG_LIST[@]}"; do
    [[ -f "$BIN.tmp/train.$x-en.en.idx" ]] && continue  # done before an interruption
    binarise "$x" en "$BIN.tmp" --srcdict "$BIN.tmp/dict.txt" --tgtdict "$BIN.tmp/dict.txt"
  done
  printf '%s\n' en "${LANG_LIST[@]}" | paste -sd, > "$BIN.tmp/langs.txt"
  for x in "${LANG_LIST[@]}"; do printf '%s\n' "$x-en" "en-$x"; done | paste -sd, > "$BIN.tmp/lang_pairs.txt"
  publish_dir "$BIN.tmp" "$BIN"
fi
log "done: $BIN ($(cat "$BIN/lang_pairs.txt"))"
