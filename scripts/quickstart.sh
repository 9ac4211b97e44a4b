#!/usr/bin/env bash
# Quickstart: train a small DeepNet en->de model on Multi30k (Elliott et al. 2016) on CPU and
# print its sacreBLEU on test_2016_flickr. Not a paper reproduction (see scripts/ recipes):
# it shows the whole chain sentencepiece -> fairseq-preprocess -> fairseq-train (DeepNorm) ->
# fairseq-generate -> sacrebleu in minutes.
#
#   bash scripts/quickstart.sh            # about 10 minutes on 2 CPU cores
#   SIZE=smoke bash scripts/quickstart.sh # about 1 minute: the CI / set-up check
#
# Hardware: any CPU (add DEVICE=cuda on a GPU machine). Re-running reuses finished steps and
# resumes training from checkpoint_last.pt.
#
# Environment (defaults in brackets):
#   SIZE      quickstart | smoke                                  [quickstart]
#   DATA      directory with Multi30k {train,val,test_2016_flickr}.{en,de}.gz
#                                                  [deepnet_fairseq/corpora/multi30k, shipped]
#   WORK      output directory                                    [runs/quickstart-$SIZE]
#   DEVICE    cpu | cuda                                          [cpu]
#   UPDATES   training updates                      [1000 for quickstart, 60 for smoke]
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then usage; exit 0; fi

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SIZE=${SIZE:-quickstart}
DATA=${DATA:-$REPO/deepnet_fairseq/corpora/multi30k}
WORK=${WORK:-$REPO/runs/quickstart-$SIZE}
DEVICE=${DEVICE:-cpu}

case "$SIZE" in
  # 6L-6L DeepNet at 128 hidden: deep enough that DeepNorm matters, small enough for a CPU.
  quickstart) TRAIN_LINES=29000; LAYERS=6; DIM=128; FFN=512;  HEADS=4; SIZE_UPDATES=1000; VOCAB=4000 ;;
  smoke)      TRAIN_LINES=3000;  LAYERS=6; DIM=64;  FFN=128;  HEADS=2; SIZE_UPDATES=60;   VOCAB=1000 ;;
  *) echo "error: SIZE must be 'quickstart' or 'smoke', got '$SIZE'" >&2; exit 2 ;;
esac
UPDATES=${UPDATES:-$SIZE_UPDATES}
case "$DEVICE" in
  cpu) DEVICE_ARGS=(--cpu) ;;
  cuda) DEVICE_ARGS=(--fp16) ;;
  *) echo "error: DEVICE must be 'cpu' or 'cuda', got '$DEVICE'" >&2; exit 2 ;;
esac

for split in train val test_2016_flickr; do
  for lang in en de; do
    if [[ ! -f "$DATA/$split.$lang.gz" ]]; then
      echo "error: $DATA/$split.$lang.gz not found; set DATA to the Multi30k raw directory" >&2
      exit 1
    fi
  done
done
for tool in fairseq-preprocess fairseq-train fairseq-generate sacrebleu; do
  command -v "$tool" >/dev/null || { echo "error: $tool not found; run bash scripts/install.sh" >&2; exit 1; }
done

mkdir -p "$WORK/raw"
log() { echo "[quickstart:$SIZE] $*"; }

log "1/5 raw text ($TRAIN_LINES training sentences) -> $WORK/raw"
for lang in en de; do
  zcat "$DATA/train.$lang.gz" | awk -v n="$TRAIN_LINES" 'NR <= n' > "$WORK/raw/train.$lang"
  zcat "$DATA/val.$lang.gz" > "$WORK/raw/valid.$lang"
  zcat "$DATA/test_2016_flickr.$lang.gz" > "$WORK/raw/test.$lang"
done

if [[ ! -f "$WORK/spm.model" ]]; then
  log "2/5 joint sentencepiece model, vocabulary $VOCAB"
  python -m deepnet_fairseq.spm train --inputs "$WORK/raw/train.en" "$WORK/raw/train.de" \
    --model-prefix "$WORK/spm" --vocab-size "$VOCAB"
fi

if [[ ! -f "$WORK/bin/.done" ]]; then
  log "3/5 sentencepiece + fairseq-preprocess -> $WORK/bin"
  mkdir -p "$WORK/spm"
  for split in train valid test; do
    for lang in en de; do
      python -m deepnet_fairseq.spm encode --model "$WORK/spm.model" \
        < "$WORK/raw/$split.$lang" > "$WORK/spm/$split.$lang"
    done
  done
  rm -rf "$WORK/bin.tmp"
  fairseq-preprocess --source-lang en --target-lang de --joined-dictionary \
    --trainpref "$WORK/spm/train" --validpref "$WORK/spm/valid" --testpref "$WORK/spm/test" \
    --destdir "$WORK/bin.tmp" --workers 2 > "$WORK/preprocess.log" 2>&1
  rm -rf "${WORK:?}/bin" && mv "$WORK/bin.tmp" "$WORK/bin" && touch "$WORK/bin/.done"
fi

log "4/5 fairseq-train deepnet_transformer ${LAYERS}L-${LAYERS}L, $DIM hidden, $UPDATES updates (log: $WORK/train.log)"
fairseq-train "$WORK/bin" --user-dir "$REPO/deepnet_fairseq" "${DEVICE_ARGS[@]}" \
  --arch deepnet_transformer --encoder-layers "$LAYERS" --decoder-layers "$LAYERS" \
  --encoder-embed-dim "$DIM" --encoder-ffn-embed-dim "$FFN" --encoder-attention-heads "$HEADS" \
  --decoder-embed-dim "$DIM" --decoder-ffn-embed-dim "$FFN" --decoder-attention-heads "$HEADS" \
  --share-all-embeddings --dropout 0.1 \
  --optimizer adam --adam-betas '(0.9, 0.98)' --lr 2e-3 --lr-scheduler inverse_sqrt \
  --warmup-updates $((UPDATES / 10)) --clip-norm 0.0 \
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --max-tokens 2048 --max-update "$UPDATES" --seed 1 \
  --save-dir "$WORK/checkpoints" --no-epoch-checkpoints --log-format simple --log-interval 50 \
  2>&1 | tee "$WORK/train.log" | grep --line-buffered -E "\| (train|valid) \||done training" || true
[[ -f "$WORK/checkpoints/checkpoint_best.pt" ]] \
  || { echo "error: training wrote no checkpoint; see $WORK/train.log" >&2; exit 1; }

log "5/5 fairseq-generate (beam 5) + sacreBLEU on test_2016_flickr"
fairseq-generate "$WORK/bin" --user-dir "$REPO/deepnet_fairseq" "${DEVICE_ARGS[@]}" \
  --path "$WORK/checkpoints/checkpoint_best.pt" --gen-subset test \
  --beam 5 --lenpen 1.0 --batch-size 128 --required-batch-size-multiple 1 --bpe sentencepiece \
  --sentencepiece-model "$WORK/spm.model" > "$WORK/generate.log" 2>&1
grep '^D-' "$WORK/generate.log" | sort -t- -k2,2n | cut -f3 > "$WORK/test.hyp.de"
if [[ $(wc -l < "$WORK/test.hyp.de") -ne $(wc -l < "$WORK/raw/test.de") ]]; then
  echo "error: fairseq-generate did not translate every test sentence; see $WORK/generate.log" >&2
  exit 1
fi
sacrebleu "$WORK/raw/test.de" -i "$WORK/test.hyp.de" -m bleu -b > "$WORK/bleu.txt"
sacrebleu "$WORK/raw/test.de" -i "$WORK/test.hyp.de" -m bleu > "$WORK/bleu.json"
log "done: sacreBLEU $(cat "$WORK/bleu.txt") on Multi30k test_2016_flickr en->de (details: $WORK/bleu.json)"
