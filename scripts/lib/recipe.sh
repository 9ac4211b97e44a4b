# shellcheck shell=bash disable=SC2153
# (SC2153: the upper-case settings are assigned by the configs/ files this script sources)
# Shared code of the reproduction recipes (scripts/{wmt17,opus100,iwslt14}/*.sh); sourced, not run.
# A recipe sources this file, calls recipe_init DATASET NAME "$@" (NAME as in "wmt17/train"),
# then one of the functions below. Settings come from configs/ (see
# configs/README.md); an environment variable of the same name always wins.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${PYTHON:-python}

die() { echo "error: $*" >&2; exit 1; }
RECIPE=recipe
log() { echo "[$RECIPE $(date -u +%H:%M:%S)] $*" >&2; }

# --help: print the calling script's header (from line 2 to `set -euo pipefail`).
recipe_help() {
  if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
  fi
  [[ $# -eq 0 ]] || die "$RECIPE takes no arguments (settings are environment variables); see --help"
}

need_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || die "$tool not found on PATH; run: bash scripts/install.sh"
  done
}

# Detect the device, then read configs/: smoke.sh (SIZE=smoke), the dataset's file, the model
# width, the machine. First assignment wins, so the environment overrides every file.
recipe_init() {
  DATASET=$1 RECIPE=$2
  shift 2
  set -E  # report the failing command, from functions too, instead of exiting silently
  trap '[[ $BASH_SUBSHELL -gt 0 ]] || echo "error: $RECIPE stopped: \"$BASH_COMMAND\" failed (line $LINENO of ${BASH_SOURCE[0]})" >&2' ERR
  recipe_help "$@"
  need_tools "$PYTHON"
  SIZE=${SIZE:-full}
  DEVICE=${DEVICE:-auto}
  if [[ "$DEVICE" == auto ]]; then
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then DEVICE=cuda; else DEVICE=cpu; fi
  fi
  case "$DEVICE" in
    cpu) ;;
    cuda) if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
            die "DEVICE=cuda but no NVIDIA GPU is visible (nvidia-smi -L failed); use DEVICE=cpu for a smoke run"
          fi ;;
    *) die "DEVICE must be auto, cuda or cpu, got '$DEVICE'" ;;
  esac
  # shellcheck source=/dev/null
  case "$SIZE" in
    smoke) source "$REPO/configs/smoke.sh" ;;
    full) ;;
    *) die "SIZE must be full or smoke, got '$SIZE'" ;;
  esac
  # shellcheck source=/dev/null
  source "$REPO/configs/$DATASET.sh"
  [[ -f "$REPO/configs/model/$MODEL.sh" ]] || die "MODEL=$MODEL: no configs/model/$MODEL.sh"
  # shellcheck source=/dev/null
  source "$REPO/configs/model/$MODEL.sh"
  # shellcheck source=/dev/null
  source "$REPO/configs/machine/$DEVICE.sh"
  if [[ "$SIZE" == smoke ]]; then WORK=${WORK:-$REPO/runs/$DATASET-smoke}; else WORK=${WORK:-$REPO/runs/$DATASET}; fi
  DATA_DIR=$WORK/data
  BIN=$DATA_DIR/bin
  RUNS_DIR=$WORK/runs
}

# ---------------------------------------------------------------------------------------------
# Data helpers

# fetch URL DEST: resumable download, verified before it takes its final name.
fetch() {
  local url=$1 dest=$2
  if [[ -f "$dest" ]]; then log "have $(basename "$dest")"; return; fi
  need_tools curl
  mkdir -p "$(dirname "$dest")"
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
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  tar -xzf "$archive" -C "$dir.tmp"
  rm -rf "$dir" && mv "$dir.tmp" "$dir" && touch "$dir/.done"
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
  "$PYTHON" -m deepnet_fairseq.recipes.corpus --data "$DATA_DIR" --pairs "$pairs" --vocab "$VOCAB" \
    --spm-sentences "$SPM_SENTENCES" --max-len "$MAX_LEN" --ratio "$LEN_RATIO"
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
    rm -rf "$BIN.tmp"
    binarise "$SRC" "$TGT" "$BIN.tmp" --joined-dictionary
    rm -rf "$BIN" && mv "$BIN.tmp" "$BIN" && touch "$BIN/.done"
  fi
}

# local_bilingual: SOURCE=local text, LOCAL_DIR/{LOCAL_TRAIN,LOCAL_VALID,LOCAL_TEST}.{SRC,TGT}[.gz],
# into OUT/{train,valid,test}.SRC-TGT.{SRC,TGT} (first TRAIN_LINES / VALID_LINES / TEST_LINES).
local_bilingual() {
  local out=$1 entry split stem lines lang file
  [[ -d "${LOCAL_DIR:-}" ]] || die "SOURCE=local needs LOCAL_DIR, a directory of {train,valid,test}.{$SRC,$TGT}[.gz]"
  for entry in "train:${LOCAL_TRAIN:-train}:$TRAIN_LINES" "valid:${LOCAL_VALID:-valid}:$VALID_LINES" \
               "test:${LOCAL_TEST:-test}:$TEST_LINES"; do
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
      [[ $(wc -l < "$a") -eq $(wc -l < "$b") ]] || die "$a and $b differ in length: not line-aligned"
    done
  done
}

# publish_raw PAIR...: check $RAW.tmp for the pairs, then move it to $RAW and mark it done.
publish_raw() {
  check_aligned "$RAW.tmp" "$@"
  rm -rf "${RAW:?}" && mv "$RAW.tmp" "$RAW" && touch "$RAW/.done"
}

# ---------------------------------------------------------------------------------------------
# Training

# run_name METHOD N M [KEY=VALUE...]: the directory name of one run.
run_name() {
  local name="$1-$2L-$3L"; shift 3
  local kv
  for kv in "$@"; do name+="+$kv"; done
  echo "$name"
}

# train_main TASK_ARG...: train METHOD at ENC_LAYERS-DEC_LAYERS on $BIN; resume if restarted.
# Writes $RUN_DIR/status.json (ok | diverged | failed) and exits: 0 ok, 3 diverged, 1 failed.
train_main() {
  local task_args=("$@")
  need_tools fairseq-train
  [[ -f "$BIN/.done" ]] || die "no prepared data in $BIN; run scripts/$DATASET/prepare.sh first (same SIZE and WORK)"
  METHOD=${METHOD:-deepnet}
  LAYERS=${LAYERS:-6}
  ENC_LAYERS=${ENC_LAYERS:-$LAYERS}
  DEC_LAYERS=${DEC_LAYERS:-$LAYERS}
  RUN_NAME=${RUN_NAME:-$(run_name "$METHOD" "$ENC_LAYERS" "$DEC_LAYERS")}
  RUN_DIR=$RUNS_DIR/$RUN_NAME
  if [[ "${RETRY:-0}" != 1 ]] && grep -qsE '"status": "(ok|diverged)"' "$RUN_DIR/status.json"; then
    log "$RUN_NAME already finished ($(grep -oE '"status": "[a-z]+"' "$RUN_DIR/status.json")); RETRY=1 to train again"
    if grep -q '"status": "ok"' "$RUN_DIR/status.json"; then exit 0; fi
    exit 3
  fi
  local method_args
  mapfile -t method_args < <("$PYTHON" -c '
import sys
from deepnet_fairseq import methods
try:
    print("\n".join(methods.get(sys.argv[1]).train_args(int(sys.argv[2]), int(sys.argv[3]))))
except ValueError as err:
    sys.exit(f"error: {err}")' "$METHOD" "$ENC_LAYERS" "$DEC_LAYERS")
  [[ ${#method_args[@]} -gt 0 ]] || die "could not get the options of METHOD=$METHOD"

  # --- processes: NNODES nodes x NPROC processes; the effective batch stays TOKENS_PER_UPDATE
  local gpus=0
  if [[ "$DEVICE" == cuda ]]; then gpus=$(nvidia-smi -L | wc -l); fi
  NNODES=${NNODES:-${SLURM_NNODES:-1}}
  if [[ "$DEVICE" == cuda ]]; then NPROC=${NPROC:-$gpus}; else NPROC=${NPROC:-1}; fi
  if [[ "$DEVICE" == cuda && "$NPROC" -gt "$gpus" ]]; then
    die "NPROC=$NPROC processes per node but only $gpus GPU(s) visible"
  fi
  local world=$((NNODES * NPROC))
  local update_freq=$(( (TOKENS_PER_UPDATE + MAX_TOKENS * world - 1) / (MAX_TOKENS * world) ))
  LAUNCHER=${LAUNCHER:-auto}
  if [[ "$LAUNCHER" == auto ]]; then
    if [[ -n "${SLURM_JOB_ID:-}" && "$NNODES" -gt 1 ]]; then LAUNCHER=srun
    elif [[ "$world" -gt 1 ]]; then LAUNCHER=torchrun
    else LAUNCHER=none; fi
  fi

  local machine_args=(--max-tokens "$MAX_TOKENS" --update-freq "$update_freq"
    --ddp-backend "$DDP_BACKEND" --num-workers "$NUM_WORKERS")
  if [[ "$DEVICE" == cpu ]]; then
    machine_args+=(--cpu)
    [[ "$PRECISION" != fp16 ]] || die "PRECISION=fp16 needs CUDA; use fp32 or bf16 on CPU"
  fi
  case "$PRECISION" in
    fp16) machine_args+=(--fp16 --fp16-init-scale "$FP16_INIT_SCALE"
            --fp16-scale-window "$FP16_SCALE_WINDOW" --min-loss-scale "$MIN_LOSS_SCALE") ;;
    bf16) machine_args+=(--bf16) ;;
    fp32) ;;
    *) die "PRECISION must be fp16, bf16 or fp32, got '$PRECISION'" ;;
  esac
  if [[ "${CHECKPOINT_ACTIVATIONS:-0}" == 1 || $((ENC_LAYERS + DEC_LAYERS)) -ge "$CHECKPOINT_ACTIVATIONS_FROM" ]]; then
    machine_args+=(--checkpoint-activations)
  fi
  # always explicit: fairseq's default is every visible GPU, which would undo the update-freq above
  machine_args+=(--distributed-world-size "$world")
  [[ "$DEVICE" == cpu && "$world" -gt 1 ]] && machine_args+=(--distributed-backend gloo)

  local model_args=(--encoder-embed-dim "$EMBED_DIM" --encoder-ffn-embed-dim "$FFN_DIM"
    --encoder-attention-heads "$HEADS" --decoder-embed-dim "$EMBED_DIM"
    --decoder-ffn-embed-dim "$FFN_DIM" --decoder-attention-heads "$HEADS"
    --share-all-embeddings --dropout "$DROPOUT")
  local optim_args=(--optimizer adam --adam-betas "$ADAM_BETAS" --lr "$LR"
    --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --warmup-init-lr 1e-07
    --clip-norm "$CLIP_NORM" --weight-decay "$WEIGHT_DECAY"
    --criterion label_smoothed_cross_entropy --label-smoothing "$LABEL_SMOOTHING"
    --max-update "$MAX_UPDATE" --max-epoch "$MAX_EPOCH" --seed "${SEED:-1}")
  local save_args=(--save-dir "$RUN_DIR/checkpoints" --save-interval-updates "$SAVE_INTERVAL_UPDATES"
    --keep-interval-updates "$AVERAGE_LAST" --no-epoch-checkpoints
    --log-format simple --log-interval "${LOG_INTERVAL:-100}")
  local fairseq_args=("$BIN" --user-dir "$REPO/deepnet_fairseq" "${task_args[@]}" "${method_args[@]}"
    "${model_args[@]}" "${optim_args[@]}" "${machine_args[@]}" "${save_args[@]}")

  # fairseq-train itself, or deepnet_fairseq/fairseq_train_compat.py (fairseq-train's cli_main
  # plus two fixes, see there) for several CPU processes or bf16
  local train_cmd=(fairseq-train)
  if [[ "$PRECISION" == bf16 || ( "$DEVICE" == cpu && "$world" -gt 1 ) ]]; then
    train_cmd=("$PYTHON" -m deepnet_fairseq.fairseq_train_compat)
  fi
  local launch=()
  if [[ "$NNODES" -gt 1 ]]; then
    [[ "$LAUNCHER" == srun || -n "${MASTER_ADDR:-}" ]] \
      || die "NNODES=$NNODES with torchrun: set MASTER_ADDR (the first node's address) and NODE_RANK on every node"
    MASTER_PORT=${MASTER_PORT:-29500}
  fi
  MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
  MASTER_PORT=${MASTER_PORT:-$((29500 + RANDOM % 1000))}  # one node: any free port will do
  case "$LAUNCHER" in
    none) [[ "$world" -eq 1 ]] || die "LAUNCHER=none runs one process; use torchrun or srun for NNODES x NPROC = $world"
          launch=("${train_cmd[@]}") ;;
    torchrun)
      need_tools torchrun
      launch=(torchrun --nnodes "$NNODES" --nproc_per_node "$NPROC" --node_rank "${NODE_RANK:-0}"
        --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT")
      if [[ "${train_cmd[0]}" == fairseq-train ]]; then launch+=("$(command -v fairseq-train)")
      else launch+=(-m deepnet_fairseq.fairseq_train_compat); fi ;;
    srun)
      need_tools srun
      # fairseq reads SLURM_PROCID / SLURM_LOCALID / the node list itself (_infer_slurm_init)
      launch=(srun --nodes "$NNODES" --ntasks-per-node "$NPROC" "${train_cmd[@]}")
      fairseq_args+=(--distributed-port "$MASTER_PORT") ;;
    *) die "LAUNCHER must be auto, none, torchrun or srun, got '$LAUNCHER'" ;;
  esac

  mkdir -p "$RUN_DIR"
  log "$RUN_NAME: ${ENC_LAYERS}L-${DEC_LAYERS}L $METHOD, ${EMBED_DIM}-${FFN_DIM}-${HEADS}, $DEVICE $PRECISION," \
      "$NNODES node(s) x $NPROC process(es) via $LAUNCHER, $MAX_TOKENS tokens x $world x update-freq $update_freq" \
      "= $((MAX_TOKENS * world * update_freq)) tokens/update (log: $RUN_DIR/train.log)"
  local attempt=$RUN_DIR/attempt.log rc
  { printf '%q ' "${launch[@]}" "${fairseq_args[@]}"; echo; } > "$RUN_DIR/command.sh"
  rc=0
  "${launch[@]}" "${fairseq_args[@]}" > "$attempt" 2>&1 || rc=$?
  grep -E "valid on '" "$attempt" | sed 's/^/    /' >&2 || true
  cat "$attempt" >> "$RUN_DIR/train.log"
  local vocab dicts=("$BIN"/dict.*.txt)
  vocab=$(( $(wc -l < "${dicts[0]}") + 4 ))  # + fairseq's <s> <pad> </s> <unk>
  "$PYTHON" -m deepnet_fairseq.recipes.runlog --log "$attempt" --exit-code "$rc" \
    --vocab-size "$vocab" --min-updates "$WARMUP" --out "$RUN_DIR/status.json" --meta "dataset=$DATASET" \
    "method=$METHOD" "encoder_layers=$ENC_LAYERS" "decoder_layers=$DEC_LAYERS" \
    "label=${RUN_LABEL:-$METHOD}" "launcher=$LAUNCHER" "world_size=$world" "update_freq=$update_freq"
  rm -f "$attempt"
  case "$(grep -oE '"status": "[a-z]+"' "$RUN_DIR/status.json")" in
    *'"ok"') log "$RUN_NAME: ok"; exit 0 ;;
    *'"diverged"') log "$RUN_NAME: DIVERGED (see $RUN_DIR/status.json)"; exit 3 ;;
    *) log "$RUN_NAME: FAILED (see $RUN_DIR/train.log)"; exit 1 ;;
  esac
}

# ---------------------------------------------------------------------------------------------
# Evaluation

# evaluate_main DIRECTIONS [fairseq-generate task options]: average the run's last
# checkpoints, decode every direction (comma-separated S-T), score -> $RUN_DIR/eval/eval.json.
evaluate_main() {
  local directions=$1
  shift
  METHOD=${METHOD:-deepnet}; LAYERS=${LAYERS:-6}
  ENC_LAYERS=${ENC_LAYERS:-$LAYERS}; DEC_LAYERS=${DEC_LAYERS:-$LAYERS}
  RUN_NAME=${RUN_NAME:-$(run_name "$METHOD" "$ENC_LAYERS" "$DEC_LAYERS")}
  RUN_DIR=$RUNS_DIR/$RUN_NAME
  grep -qs '"status": "ok"' "$RUN_DIR/status.json" \
    || die "$RUN_NAME has not trained successfully (no ok status in $RUN_DIR/status.json); run train.sh first"
  if [[ -f "$RUN_DIR/eval/eval.json" && "$RUN_DIR/eval/eval.json" -nt "$RUN_DIR/checkpoints/checkpoint_last.pt" ]]; then
    log "$RUN_NAME already evaluated: $RUN_DIR/eval/eval.json"; return 0
  fi
  local gen_args=(--user-dir "$REPO/deepnet_fairseq" --gen-subset test
    --beam "$BEAM" --lenpen "$LENPEN" --max-len-a "$MAX_LEN_A" --max-len-b "$MAX_LEN_B"
    --max-tokens "$((MAX_TOKENS * 2))" --bpe sentencepiece --sentencepiece-model "$DATA_DIR/spm.model"
    # fairseq 0.12.3's batch_by_size drops the last batch when its size is not a multiple of
    # --required-batch-size-multiple (8 by default): that would silently drop test sentences
    --required-batch-size-multiple 1)
  if [[ "$DEVICE" == cpu ]]; then gen_args+=(--cpu)
  elif [[ "$PRECISION" == fp16 ]]; then gen_args+=(--fp16)
  elif [[ "$PRECISION" == bf16 ]]; then gen_args+=(--bf16); fi
  local score_args=()
  [[ "${TOKENIZED_BLEU:-0}" == 1 ]] && score_args+=(--tokenized-bleu)
  [[ "${COMPOUND_SPLIT:-0}" == 1 ]] && score_args+=(--compound-split)
  log "$RUN_NAME: average the last $AVERAGE_LAST checkpoints, decode $directions (beam $BEAM, lenpen $LENPEN), score"
  "$PYTHON" -m deepnet_fairseq.recipes.evaluate --run-dir "$RUN_DIR" --average-last "$AVERAGE_LAST" \
    --directions "$directions" --references "$DATA_DIR/raw" "${score_args[@]}" \
    -- "$BIN" "${gen_args[@]}" "$@" 2> "$RUN_DIR/evaluate.log" \
    || die "evaluation failed; see $RUN_DIR/evaluate.log"
  grep -E "sacreBLEU" "$RUN_DIR/evaluate.log" >&2 || true
  log "$RUN_NAME: results in $RUN_DIR/eval/eval.json"
}

# ---------------------------------------------------------------------------------------------
# Sweep

# sweep_main: train + evaluate every run of RUNS (or METHODS x DEPTHS), whatever happens to
# any one of them, then write the table, CSV and plot.
sweep_main() {
  local here spec method n m rc
  here=$(cd "$(dirname "$0")" && pwd)
  local specs=()
  if [[ -n "${RUNS:-}" ]]; then
    read -ra specs <<< "$RUNS"
  else
    for method in $METHODS; do for n in $DEPTHS; do specs+=("$method:$n:$n"); done; done
  fi
  [[ ${#specs[@]} -gt 0 ]] || die "nothing to run: set METHODS and DEPTHS, or RUNS"
  [[ -f "$BIN/.done" ]] || die "no prepared data in $BIN; run scripts/$DATASET/prepare.sh first (same SIZE and WORK)"
  log "sweep of ${#specs[@]} run(s): ${specs[*]}"
  for spec in "${specs[@]}"; do
    local fields overrides name label
    IFS=: read -ra fields <<< "$spec"
    [[ ${#fields[@]} -ge 3 ]] || die "bad run '$spec': expected METHOD:ENC_LAYERS:DEC_LAYERS[:KEY=VALUE...]"
    method=${fields[0]} n=${fields[1]} m=${fields[2]}
    overrides=("${fields[@]:3}")
    name=$(run_name "$method" "$n" "$m" "${overrides[@]}")
    label=$method
    [[ ${#overrides[@]} -eq 0 ]] || label="$method (${overrides[*]})"
    rc=0
    env "${overrides[@]}" METHOD="$method" ENC_LAYERS="$n" DEC_LAYERS="$m" RUN_NAME="$name" \
      RUN_LABEL="$label" bash "$here/train.sh" || rc=$?
    if [[ $rc -eq 0 ]]; then
      env "${overrides[@]}" METHOD="$method" ENC_LAYERS="$n" DEC_LAYERS="$m" RUN_NAME="$name" \
        bash "$here/evaluate.sh" || log "$name: evaluation failed (see $RUNS_DIR/$name/evaluate.log); going on"
    elif [[ ! -f "$RUNS_DIR/$name/status.json" ]]; then
      # train.sh stopped before fairseq ran (bad option, missing tool): record it as failed
      "$PYTHON" -c 'import sys; from deepnet_fairseq.recipes import write_json
write_json(sys.argv[1], dict(zip(["dataset", "method", "encoder_layers", "decoder_layers", "label"],
           sys.argv[2:])) | {"status": "failed", "reason": "train.sh exited before training"})' \
        "$RUNS_DIR/$name/status.json" "$DATASET" "$method" "$n" "$m" "$label"
      log "$name: failed before training; going on"
    else
      log "$name: not evaluated ($( [[ $rc -eq 3 ]] && echo diverged || echo failed)); going on"
    fi
  done
  "$PYTHON" -m deepnet_fairseq.recipes.report --dataset "$DATASET" --runs "$RUNS_DIR" --out "$WORK/results"
}
