#!/usr/bin/env bash
# Prepared for the next GPU loan (issue 40, stage 5; a loan is 15 minutes, start included, one
# command): seconds per update of the deep multilingual cells at the sweep's own settings (fp32,
# 1,024 tokens per update, 64 wide, the depth rule's rates; no activation checkpointing, which the
# CPU cells use from 200 layers on), each alone on the GPU, then as much
# of DeepNet 500L-500L as the rest of the loan allows, validated every 100 updates. Its figures
# turn stage 5's cost estimate into a measurement. It was tried on this CPU at 2 and 3 layers
# (the same arguments with --cpu); the loan of 2026-11-29 was withdrawn before it could run.
#
# Before the call, in the checkout (both paths ignored through .git/info/exclude):
#   .whl/      fairseq-fixed 0.12.3.1 (cp312) and its pure-Python needs as wheels: hydra-core
#              1.3.2, omegaconf 2.3.0, antlr4-python3-runtime 4.9.3, bitarray, sacremoses 0.1.1
#              (results/gpu-check/README.md: the image's own torch serves)
#   .gpudata/  bin/, the study's binarised data ($DEEPNET_WORK/data/bin, 8.6 MB), and this script
# The call: run(command="bash .gpudata/probe.sh 2>&1 | tee $OUT/probe.out", carry=[".whl",
# ".gpudata"], timeout_s=590); each training's log comes back in $OUT.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, fairseq, sys; print('torch', torch.__version__, 'cuda',
    torch.version.cuda, 'fairseq', fairseq.__version__, 'python', sys.version.split()[0],
    torch.cuda.get_device_name())"
  nproc; } > $OUT/device.txt 2>&1
cat $OUT/device.txt
source results/multilingual-depth/sweep-args.sh
run() {  # name seconds args...
  local name=$1 secs=$2; shift 2
  echo "== $name ($secs s) $(date -u +%T)"
  timeout -s INT $secs fairseq-train .gpudata/bin "${SWEEP_ARGS[@]}" "$@" > $OUT/$name.log 2>&1
  echo "rc=$? $(date -u +%T)"; grep -E "train_inner|valid on" $OUT/$name.log | tail -3 | cut -c1-230
}
run deepnet-100L-100L 80 --arch deepnet_transformer --encoder-layers 100 --decoder-layers 100 \
  --lr $DEEPNET_100_LR
run pre_ln_completep-100L-100L 80 "${COMPLETEP_ARGS[@]}" --encoder-layers 100 --decoder-layers 100
LEFT=$(( 540 - ($(date +%s) - T0) ))
run deepnet-500L-500L $LEFT --arch deepnet_transformer --encoder-layers 500 --decoder-layers 500 \
  --lr $DEEPNET_500_LR --validate-interval-updates 100
echo "total $(( $(date +%s) - T0 )) s"
