#!/usr/bin/env bash
# The CPU pace of the multilingual sweep's 1,000-layer cells (issue 40, stage 5): DeepNet and
# Pre-LN + CompleteP 500L-500L at the sweep's settings (sweep-args.sh), each alone for SECONDS,
# then seconds per update (after the first 10 updates, which include building the model) and the
# process's peak RSS. What stage 5's cost is from; gpu-probe.sh is the same on a GPU.
#   bash results/multilingual-depth/cpu-pace.sh DATA_BIN [SECONDS per cell, 600] [LAYERS, 500]
# DATA_BIN: the study's binarised data ($DEEPNET_WORK/data/bin). Logs go to $PACE_OUT (a new
# folder under /tmp unless set). Threads: OMP_NUM_THREADS as set (the figures: 2, both cores).
set -eu
DATA=${1:?usage: cpu-pace.sh DATA_BIN [SECONDS] [LAYERS]}
SECS=${2:-600}
LAYERS=${3:-500}
[ -f "$DATA/dict.en.txt" ] || {
  echo "cpu-pace.sh: $DATA has no dict.en.txt: give the study's data/bin" >&2; exit 2; }
source results/multilingual-depth/sweep-args.sh
PACE_OUT=${PACE_OUT:-$(mktemp -d /tmp/cpu-pace.XXXXXX)}
mkdir -p "$PACE_OUT"
TIME=(); [ -x /usr/bin/time ] && TIME=(/usr/bin/time -v)
pace() {  # name args...: train for SECS, then print the pace measured from fairseq's log
  local name=$1; shift
  echo "== $name, ${SECS} s, $(date -u +%T), log $PACE_OUT/$name.log"
  "${TIME[@]}" timeout -s INT "$SECS" fairseq-train "$DATA" --cpu "${SWEEP_ARGS[@]}" "$@" \
    > "$PACE_OUT/$name.log" 2>&1 || true  # timeout's 124 is the plan
  python3 - "$PACE_OUT/$name.log" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
points = [(int(u), float(w)) for u, w in
          re.findall(r"train_inner .*num_updates=(\d+),.* wall=(\d+)", text)]
if len(points) < 3:
    sys.exit(f"  fewer than 3 logged intervals in {sys.argv[1]}: give it more seconds")
(u0, w0), (u1, w1) = points[0], points[-1]
rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
print(f"  {(w1 - w0) / (u1 - u0):.2f} s an update (updates {u0} to {u1})"
      + (f", peak RSS {int(rss.group(1)) / 2**20:.1f} GiB" if rss else ""))
PY
}
# DeepNet keeps 500L-500L's rate at any LAYERS: the pace does not depend on the rate
pace "deepnet-${LAYERS}L-${LAYERS}L" --arch deepnet_transformer \
  --encoder-layers "$LAYERS" --decoder-layers "$LAYERS" --lr "$DEEPNET_500_LR"
pace "pre_ln_completep-${LAYERS}L-${LAYERS}L" "${COMPLETEP_ARGS[@]}" \
  --encoder-layers "$LAYERS" --decoder-layers "$LAYERS"
