# shellcheck shell=bash disable=SC2153
# (SC2153: the upper-case settings are assigned by the `eval` of python -m deepnet_fairseq.recipes --shell below)
# Shared code of the reproduction recipes (scripts/{wmt17,opus100,iwslt14}/*.sh); sourced, not run.
# The launch logic is Python (python -m deepnet_fairseq.recipes: settings, processes, command,
# runs, statuses); train/evaluate/sweep scripts hand over to it with recipe_exec, prepare
# scripts get the resolved settings with recipe_init and keep the data steps below.
# Settings: docs/recipes.md, configs/README.md.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${DEEPNET_PYTHON:-python}

die() { echo "error: $*" >&2; exit 1; }
RECIPE=recipe
log() { echo "[$RECIPE $(date -u +%H:%M:%S)] $*" >&2; }

# recipe_args "$@": --help prints the calling script's header (line 2 to `set -euo pipefail`);
# the only other argument is --dry-run.
recipe_args() {
  if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
  fi
  [[ $# -eq 0 || ( $# -eq 1 && "$1" == --dry-run ) ]] \
    || die "$RECIPE takes no arguments but --dry-run or --help (settings are environment variables)"
}

need_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || die "$tool not found on PATH; run: bash scripts/install.sh"
  done
}

# recipe_exec DATASET STEP "$@": train, evaluate and sweep are run by launch.py itself (exec:
# a scheduler's signal reaches it, and it passes the signal on to the training processes).
recipe_exec() {
  RECIPE="$1/$2"
  local dataset=$1 step=$2
  shift 2
  recipe_args "$@"
  need_tools "$PY"
  exec "$PY" -m deepnet_fairseq.recipes --repo "$REPO" "$dataset" "$step" "$@"
}

# recipe_init DATASET prepare "$@": the resolved settings (printed, saved in
# $DEEPNET_WORK/data/config.json) as shell variables, plus DATA_DIR, BIN, RAW, MARKER; --dry-run
# prints them and stops.
recipe_init() {
  RECIPE="$1/$2"
  local dataset=$1 step=$2 settings
  shift 2
  set -E  # report the failing command, from functions too, instead of exiting silently
  trap '[[ $BASH_SUBSHELL -gt 0 ]] || echo "error: $RECIPE stopped: \"$BASH_COMMAND\" failed (line $LINENO of ${BASH_SOURCE[0]})" >&2' ERR
  recipe_args "$@"
  need_tools "$PY"
  if [[ $# -eq 1 ]]; then
    exec "$PY" -m deepnet_fairseq.recipes --repo "$REPO" "$dataset" "$step" --dry-run
  fi
  settings=$("$PY" -m deepnet_fairseq.recipes --repo "$REPO" "$dataset" "$step" --shell) \
    || exit $?
  eval "$settings"
}

# ---------------------------------------------------------------------------------------------
# Directories: the recipes delete only what they created, which carries the file $MARKER
# (the rule of deepnet_fairseq/recipes/workdir.py, for the shell steps).

# make_dir DIR: create DIR and its missing parents, marking each one created here.
make_dir() {
  local dir=$1 missing=() i
  while [[ ! -d "$dir" ]]; do missing+=("$dir"); dir=$(dirname "$dir"); done
  for ((i = ${#missing[@]} - 1; i >= 0; i--)); do
    if mkdir "${missing[i]}" 2>/dev/null; then
      echo "created by the deepnet_fairseq recipes; they may delete this directory" > "${missing[i]}/$MARKER"
    fi
    [[ -d "${missing[i]}" ]] || die "could not create ${missing[i]}"
  done
}

# remove_dir DIR: delete DIR if the recipes created it; refuse otherwise.
remove_dir() {
  [[ -e "$1" || -L "$1" ]] || return 0
  [[ -d "$1" && ! -L "$1" && -f "$1/$MARKER" ]] \
    || die "refusing to delete $1: the recipes did not create it (no $MARKER in it). Move it away yourself, or choose another DEEPNET_WORK"
  rm -rf "$1"
}

# fresh_dir DIR: an empty DIR of the recipes'.  publish_dir TMP DIR: DIR := TMP, marked done.
fresh_dir() { remove_dir "$1"; make_dir "$1"; }
publish_dir() { remove_dir "$2"; mv "$1" "$2"; touch "$2/.done"; }

# ---------------------------------------------------------------------------------------------
# Data helpers

# fetch URL DEST: resumable download, verified before it takes its final name.
fetch() {
  local url=$1 dest=$2
  if [[ -f "$dest" ]]; then log "have $(basename "$dest")"; return; fi
  need_tools curl
  make_dir "$(dirname "$dest")"
  log "downloading $url"
  curl -fL --retry 5 --retry-delay 10 -C - -o "$dest.part" "$url" \
    || die "download of $url failed; re-run to resume, or download it yourself to $dest"
  case "$dest" in
    *.tar.gz|*.tgz) tar -tzf "$dest.part" >/dev/null || die "$dest.part is not a valid tar.gz; delete it and re-run" ;;
    *.gz) gzip -t "$dest.part" || die "$dest.part is not a valid gzip; delete it and re-run" ;;
  esac
  mv "$dest.part" "$dest"
}

# extract ARCHIVE DIR: unpack once (DIR/.done marks a complete extraction).
extract() {
  local archive=$1 dir=$2
  [[ -f "$dir/.done" ]] && return
  log "unpacking $(basename "$archive")"
  fresh_dir "$dir.tmp"
  tar -xzf "$archive" -C "$dir.tmp"
  publish_dir "$dir.tmp" "$dir"
}

# read_text FILE [LINES]: print FILE (plain or .gz), the first LINES lines if LINES > 0.
read_text() {
  local file=$1 lines=${2:-0}
  # awk reads to the end (head would close the pipe early and fail it under pipefail)
  if [[ "$file" == *.gz ]]; then zcat "$file"; else cat "$file"; fi | awk -v n="$lines" 'n <= 0 || NR <= n'
}

# find_local DIR NAME: DIR/NAME or DIR/NAME.gz, whichever exists (empty if neither).
find_local() {
  if [[ -f "$1/$2" ]]; then echo "$1/$2"; elif [[ -f "$1/$2.gz" ]]; then echo "$1/$2.gz"; fi
}

# prepare_text PAIR...: $DATA_DIR/raw/{train,valid,test}.PAIR.{src,tgt} -> cleaned text, the
# joint sentencepiece model $DATA_DIR/spm.model and encoded text in $DATA_DIR/spm (one process).
prepare_text() {
  local pairs
  pairs=$(IFS=,; echo "$*")
  "$PY" -m deepnet_fairseq.recipes.corpus --data "$DATA_DIR" --pairs "$pairs" --vocab "$VOCAB" \
    --spm-sentences "$SPM_SENTENCES" --max-len "$MAX_LEN" --ratio "$LEN_RATIO" --encoding "${ENCODING:-utf-8}"
}

# binarise SRC TGT DESTDIR [fairseq-preprocess options]: one pair of $DATA_DIR/spm into DESTDIR.
binarise() {
  local src=$1 tgt=$2 dest=$3 pieces=$DATA_DIR/spm
  shift 3
  fairseq-preprocess --source-lang "$src" --target-lang "$tgt" --trainpref "$pieces/train.$src-$tgt" \
    --validpref "$pieces/valid.$src-$tgt" --testpref "$pieces/test.$src-$tgt" --destdir "$dest" \
    --workers "$(nproc)" "$@" >> "$DATA_DIR/preprocess.log" 2>&1 \
    || die "fairseq-preprocess failed for $src-$tgt; see $DATA_DIR/preprocess.log"
}

# prepare_bilingual: raw text of SRC-TGT -> $BIN with a joined dictionary (WMT-17, IWSLT-14).
prepare_bilingual() {
  prepare_text "$SRC-$TGT"
  if [[ ! -f "$BIN/.done" ]]; then
    log "fairseq-preprocess -> $BIN"
    fresh_dir "$BIN.tmp"
    binarise "$SRC" "$TGT" "$BIN.tmp" --joined-dictionary
    publish_dir "$BIN.tmp" "$BIN"
  fi
}

# local_bilingual OUT: SOURCE=local (or multi30k, the shipped corpus) text,
# LOCAL_DIR/{LOCAL_TRAIN,LOCAL_VALID,LOCAL_TEST}.{SRC,TGT}[.gz], into
# OUT/{train,valid,test}.SRC-TGT.{SRC,TGT} (first TRAIN_LINES / VALID_LINES / TEST_LINES).
local_bilingual() {
  local out=$1 entry split stem lines lang file
  [[ -d "${LOCAL_DIR:-}" ]] || die "SOURCE=local needs LOCAL_DIR, a directory of {train,valid,test}.{$SRC,$TGT}[.gz] (or SOURCE=multi30k for the shipped corpus)"
  for entry in "train:$LOCAL_TRAIN:$TRAIN_LINES" "valid:$LOCAL_VALID:$VALID_LINES" \
               "test:$LOCAL_TEST:$TEST_LINES"; do
    IFS=: read -r split stem lines <<< "$entry"
    for lang in "$SRC" "$TGT"; do
      file=$(find_local "$LOCAL_DIR" "$stem.$lang")
      [[ -n "$file" ]] || die "$LOCAL_DIR/$stem.${lang}[.gz] not found (set LOCAL_TRAIN / LOCAL_VALID / LOCAL_TEST)"
      read_text "$file" "$lines" > "$out/$split.$SRC-$TGT.$lang"
    done
  done
}

# check_aligned DIR PAIR...: every split of every pair exists, is non-empty and line-aligned.
check_aligned() {
  local dir=$1 pair split a b
  shift
  for pair in "$@"; do
    for split in train valid test; do
      a=$dir/$split.$pair.${pair%-*} b=$dir/$split.$pair.${pair#*-}
      [[ -s "$a" && -s "$b" ]] || die "$a or $b is missing or empty"
      # counted as clean.py counts: a last line without its newline is a line
      [[ $(awk 'END { print NR }' "$a") -eq $(awk 'END { print NR }' "$b") ]] \
        || die "$a and $b differ in length: not line-aligned"
    done
  done
}

# publish_raw PAIR...: check $RAW.tmp for the pairs, then move it to $RAW and mark it done.
publish_raw() {
  check_aligned "$RAW.tmp" "$@"
  publish_dir "$RAW.tmp" "$RAW"
}
