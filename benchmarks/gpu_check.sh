#!/usr/bin/env bash
# GPU check: fp16/bf16 training of DeepNet 18L-18L and 100L-100L (activation checkpointing) on
# Multi30k, fp16 fairseq-generate + sacreBLEU, and the throughput/peak-memory benchmark against
# fairseq's Post-LN transformer; one report, OUT/report.{json,md}. docs/gpu-check.md explains it.
#
#   bash benchmarks/gpu_check.sh                      # on one GPU
#   bash benchmarks/gpu_check.sh --device cpu --tiny  # the chain at toy size on CPU
#   bash benchmarks/gpu_check.sh --help               # every option, the checks, exit statuses
#
# A thin wrapper: the work is done by benchmarks/gpu_check.py, which gets every argument.
set -euo pipefail
exec python "$(dirname "${BASH_SOURCE[0]}")/gpu_check.py" "$@"
