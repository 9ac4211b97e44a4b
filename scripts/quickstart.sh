#!/usr/bin/env bash
# Quickstart: train a small DeepNet en->de model on Multi30k (Elliott et al. 2016, shipped in
# deepnet_fairseq/corpora/multi30k) and print its sacreBLEU on test_2016_flickr. Not a paper
# reproduction (see the recipes in scripts/): the whole chain sentencepiece -> fairseq-preprocess
# -> fairseq-train (DeepNorm) -> fairseq-generate -> sacreBLEU, on the stock fairseq CLIs.
#
#   bash scripts/quickstart.sh                  # a translating model: ~16 min on 2 CPU cores, sacreBLEU ~28
#   SIZE=smoke bash scripts/quickstart.sh       # about 1 minute: checks the chain, BLEU ~0
#   DEVICE=cuda bash scripts/quickstart.sh      # on one GPU: a larger model, BLEU in the 30s
#
# Re-running reuses finished steps and resumes training from checkpoint_last.pt; raising
# QUICKSTART_UPDATES trains further with the same learning-rate schedule.
#
# Environment (defaults in brackets):
#   SIZE                quickstart | smoke                                [quickstart]
#   DEVICE              cpu | cuda                                        [cpu]
#   QUICKSTART_DIR      output directory                    [runs/quickstart-$SIZE-$DEVICE]
#   QUICKSTART_DATA     Multi30k {train,val,test_2016_flickr}.{en,de}.gz
#                                               [deepnet_fairseq/corpora/multi30k, shipped]
#   QUICKSTART_UPDATES  training updates                     [per size and device, below]
set -euo pipefail
trap 'echo "error: quickstart stopped at line $LINENO: $BASH_COMMAND" >&2' ERR

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then usage; exit 0; fi
[[ $# -eq 0 ]] || { echo "error: unexpected argument '$1'; settings are environment variables (see --help)" >&2; exit 2; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SIZE=${SIZE:-quickstart}
DEVICE=${DEVICE:-cpu}
DATA=${QUICKSTART_DATA:-$REPO/deepnet_fairseq/corpora/multi30k}
DIR=${QUICKSTART_DIR:-$REPO/runs/quickstart-$SIZE-$DEVICE}

# Sizes. Every value was chosen from measured learning curves (docs/real-text.md).
# WARMUP is fixed per size (not derived from the update count), so raising QUICKSTART_UPDATES
# on a resumed run continues the same schedule.
case "$SIZE/$DEVICE" in
  quickstart/cpu)
    TRAIN_LINES=29000 VOCAB=4000 LAYERS=6 DIM=128 FFN=512 HEADS=4 DROPOUT=0.1
    LR=1.5e-3 WARMUP=400 MAX_TOKENS=2048 DEFAULT_UPDATES=1200 ;;
  quickstart/cuda)  # not measured here (no GPU was lent while writing it); see the README, "Quickstart"
    TRAIN_LINES=29000 VOCAB=8000 LAYERS=6 DIM=512 FFN=2048 HEADS=8 DROPOUT=0.3
    LR=7e-4 WARMUP=1000 MAX_TOKENS=8192 DEFAULT_UPDATES=6000 ;;
  smoke/*)
    TRAIN_LINES=3000 VOCAB=1000 LAYERS=6 DIM=64 FFN=128 HEADS=2 DROPOUT=0.1
    LR=2e-3 WARMUP=10 MAX_TOKENS=2048 DEFAULT_UPDATES=60 ;;
  *) echo "error: SIZE must be quickstart or smoke and DEVICE cpu or cuda, got SIZE=$SIZE DEVICE=$DEVICE" >&2
     exit 2 ;;
esac
UPDATES=${QUICKSTART_UPDATES:-$DEFAULT_UPDATES}
[[ "$UPDATES" =~ ^[1-9][0-9]*$ ]] || { echo "error: QUICKSTART_UPDATES must be a positive integer, got '$UPDATES'" >&2; exit 2; }
case "$DEVICE" in
  cpu) DEVICE_ARGS=(--cpu) ;;
  cuda) DEVICE_ARGS=(--fp16) ;;
esac

for split in train val test_2016_flickr; do
  for lang in en de; do
    [[ -f "$DATA/$split.$lang.gz" ]] || {
      echo "error: $DATA/$split.$lang.gz not found; QUICKSTART_DATA must be a Multi30k raw directory" \
           "(the shipped one is deepnet_fairseq/corpora/multi30k)" >&2; exit 1; }
  done
done
for tool in fairseq-preprocess fairseq-train fairseq-generate sacrebleu; do
  command -v "$tool" >/dev/null || { echo "error: $tool not found; run bash scripts/install.sh" >&2; exit 1; }
done

mkdir -p "$DIR/raw"
log() { echo "[quickstart:$SIZE] $*"; }
start=$SECONDS

log "1/5 raw text ($TRAIN_LINES training sentences) -> $DIR/raw"
for lang in en de; do
  # awk, not head: head would close the pipe early and pipefail would stop the script
  zcat "$DATA/train.$lang.gz" | awk -v n="$TRAIN_LINES" 'NR <= n' > "$DIR/raw/train.$lang"
  zcat "$DATA/val.$lang.gz" > "$DIR/raw/valid.$lang"
  zcat "$DATA/test_2016_flickr.$lang.gz" > "$DIR/raw/test.$lang"
done

if [[ ! -f "$DIR/spm.model" ]]; then
  log "2/5 joint sentencepiece model, vocabulary $VOCAB"
  python -m deepnet_fairseq.spm train --inputs "$DIR/raw/train.en" "$DIR/raw/train.de" \
    --model-prefix "$DIR/spm" --vocab-size "$VOCAB"
fi

if [[ ! -f "$DIR/bin/.done" ]]; then
  log "3/5 sentencepiece + fairseq-preprocess -> $DIR/bin"
  mkdir -p "$DIR/spm"
  for split in train valid test; do
    for lang in en de; do
      python -m deepnet_fairseq.spm encode --model "$DIR/spm.model" \
        < "$DIR/raw/$split.$lang" > "$DIR/spm/$split.$lang"
    done
  done
  # binarise into a folder of this run's own, then publish it whole: bin/ exists only complete
  tmp=$DIR/bin.tmp$$
  fairseq-preprocess --source-lang en --target-lang de --joined-dictionary \
    --trainpref "$DIR/spm/train" --validpref "$DIR/spm/valid" --testpref "$DIR/spm/test" \
    --destdir "$tmp" --workers 2 > "$DIR/preprocess.log" 2>&1 \
    || { echo "error: fairseq-preprocess failed; see $DIR/preprocess.log" >&2; exit 1; }
  touch "$tmp/.done" && mv -T "$tmp" "$DIR/bin"
fi

log "4/5 fairseq-train deepnet_transformer ${LAYERS}L-${LAYERS}L, $DIM hidden, $UPDATES updates" \
    "(progress every 100 updates; full log: $DIR/train.log)"
set +e
fairseq-train "$DIR/bin" --user-dir "$REPO/deepnet_fairseq" "${DEVICE_ARGS[@]}" \
  --arch deepnet_transformer --encoder-layers "$LAYERS" --decoder-layers "$LAYERS" \
  --encoder-embed-dim "$DIM" --encoder-ffn-embed-dim "$FFN" --encoder-attention-heads "$HEADS" \
  --decoder-embed-dim "$DIM" --decoder-ffn-embed-dim "$FFN" --decoder-attention-heads "$HEADS" \
  --share-all-embeddings --dropout "$DROPOUT" \
  --optimizer adam --adam-betas '(0.9, 0.98)' --lr "$LR" --lr-scheduler inverse_sqrt \
  --warmup-updates "$WARMUP" --clip-norm 0.0 \
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --max-tokens "$MAX_TOKENS" --max-update "$UPDATES" --seed 1 \
  --save-dir "$DIR/checkpoints" --no-epoch-checkpoints --log-format simple --log-interval 100 \
  >> "$DIR/train.log" 2>&1 &
train_pid=$!
# progress while it runs: fairseq's own train/valid lines, as they are written
tail -n 0 -f "$DIR/train.log" --pid "$train_pid" \
  | grep --line-buffered -E "\| (train_inner|valid|train) \||done training|Error|error" &
wait "$train_pid"
train_rc=$?
set -e
sleep 1  # let the progress filter print the last lines
if [[ $train_rc -ne 0 ]]; then
  echo "error: fairseq-train exited with status $train_rc; the end of $DIR/train.log:" >&2
  tail -n 20 "$DIR/train.log" >&2
  exit 1
fi

log "5/5 fairseq-generate (beam 5) + sacreBLEU on test_2016_flickr"
fairseq-generate "$DIR/bin" --user-dir "$REPO/deepnet_fairseq" "${DEVICE_ARGS[@]}" \
  --path "$DIR/checkpoints/checkpoint_last.pt" --gen-subset test \
  --beam 5 --lenpen 1.0 --batch-size 128 --required-batch-size-multiple 1 --bpe sentencepiece \
  --sentencepiece-model "$DIR/spm.model" > "$DIR/generate.log" 2>&1 \
  || { echo "error: fairseq-generate failed; see $DIR/generate.log" >&2; exit 1; }
grep '^D-' "$DIR/generate.log" | sort -t- -k2,2n | cut -f3 > "$DIR/test.hyp.de"
if [[ $(wc -l < "$DIR/test.hyp.de") -ne $(wc -l < "$DIR/raw/test.de") ]]; then
  echo "error: fairseq-generate did not translate every test sentence; see $DIR/generate.log" >&2
  exit 1
fi
# a model that ignores its source writes the same few sentences for every input: say so loudly
distinct_rc=0
python -m deepnet_fairseq.recipes.distinct "$DIR/test.hyp.de" || distinct_rc=$?
[[ $distinct_rc -eq 0 || $distinct_rc -eq 3 ]] || exit 1  # 3: the warning above was printed
sacrebleu "$DIR/raw/test.de" -i "$DIR/test.hyp.de" -m bleu -b > "$DIR/bleu.txt"
sacrebleu "$DIR/raw/test.de" -i "$DIR/test.hyp.de" -m bleu > "$DIR/bleu.json"
note=""
[[ "$SIZE" == smoke ]] && note=" (smoke size: a one-minute check that the chain runs, not a trained model)"
log "done in $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s: sacreBLEU $(cat "$DIR/bleu.txt")" \
    "on Multi30k test_2016_flickr en->de$note (details: $DIR/bleu.json)"
