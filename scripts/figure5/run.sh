#!/usr/bin/env bash
# docs/findings.md (Figure 5): DeepNet's model update at 6L-6L and 100L-100L (64-128-2, 3 updates, the
# update read at step 1, seeds 1,2,3), with parameter groups frozen or attributed, and with the
# LayerNorm learning-rate multiplier. One deepnet-model-update command per table row; each
# writes results/figure5/<row>/ (CSV, plots, summary.txt). About 2 minutes a row on one core.
#
#   bash scripts/figure5/run.sh               # every row
#   bash scripts/figure5/run.sh sgd_deepnet   # the rows named
#
# Environment: OUT (results/figure5), DEPTHS (6,100), SEEDS (1,2,3) -- smaller values for a
# quick check of the chain (the tests run one row at DEPTHS=2,3 SEEDS=1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
OUT=${OUT:-results/figure5}
COMMON=(--depths "${DEPTHS:-6,100}" --steps 3 --report-step 1 --seed "${SEEDS:-1,2,3}" --attribute --quiet)
SGD=(--optimizer sgd --lr 1e-3)
ADAM=(--optimizer adam --lr 1e-4)
REMEDY=(--fairseq-args "--deepnorm-ln-lr-multiplier auto")

declare -A ROWS=(
  # the model update with the LayerNorms trained, frozen, or frozen with the embeddings
  [sgd_post_ln]="--methods post_ln ${SGD[*]}"
  [sgd_deepnet]="--methods deepnet ${SGD[*]}"
  [sgd_deepnet_frozen_ln]="--methods deepnet ${SGD[*]} --freeze layernorm"
  [sgd_deepnet_frozen_ln_embed]="--methods deepnet ${SGD[*]} --freeze layernorm,embed"
  [adam_deepnet]="--methods deepnet ${ADAM[*]}"
  [adam_deepnet_frozen_ln]="--methods deepnet ${ADAM[*]} --freeze layernorm"
  [adam_deepnet_adam_frozen_ln]="--methods deepnet_adam ${ADAM[*]} --freeze layernorm"
  # the LayerNorm learning-rate multiplier, and the runs without it that it is compared with
  [adam_deepnet_adam]="--methods deepnet_adam ${ADAM[*]}"
  [adam_deepnet_adam_ln_lr]="--methods deepnet_adam ${ADAM[*]} REMEDY"
  [sgd_deepnet_ln_lr]="--methods deepnet ${SGD[*]} REMEDY"
  [adam_deepnet_ln_lr]="--methods deepnet ${ADAM[*]} REMEDY"
  [sgd_deepnet_sgd]="--methods deepnet_sgd ${SGD[*]}"
  [sgd_deepnet_sgd_ln_lr]="--methods deepnet_sgd ${SGD[*]} REMEDY"
)
ORDER=(sgd_post_ln sgd_deepnet sgd_deepnet_frozen_ln sgd_deepnet_frozen_ln_embed adam_deepnet
       adam_deepnet_frozen_ln adam_deepnet_adam_frozen_ln adam_deepnet_adam
       adam_deepnet_adam_ln_lr sgd_deepnet_ln_lr adam_deepnet_ln_lr sgd_deepnet_sgd
       sgd_deepnet_sgd_ln_lr)

for row in "${@:-${ORDER[@]}}"; do
  [[ -n "${ROWS[$row]:-}" ]] || { echo "unknown row $row; rows: ${ORDER[*]}" >&2; exit 2; }
  read -r -a args <<< "${ROWS[$row]/REMEDY/}"
  [[ "${ROWS[$row]}" == *REMEDY* ]] && args+=("${REMEDY[@]}")
  echo "[figure5] $row: python -m deepnet_fairseq.diagnostics.model_update ${args[*]} ${COMMON[*]}" >&2
  mkdir -p "$OUT/$row"
  python -m deepnet_fairseq.diagnostics.model_update "${args[@]}" "${COMMON[@]}" \
    --output-dir "$OUT/$row" > "$OUT/$row/summary.tmp"
  mv "$OUT/$row/summary.tmp" "$OUT/$row/summary.txt"
  cat "$OUT/$row/summary.txt"
done
