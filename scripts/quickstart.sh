#!/usr/bin/env bash
# Quickstart: a small DeepNet en->de trained on the shipped Multi30k, decoded and scored with
# sacreBLEU, with progress while it trains and three example translations at the end.
#
#   bash scripts/quickstart.sh               # a translating model: ~8 min on 2 CPU cores
#   SIZE=smoke bash scripts/quickstart.sh    # ~1 min: checks the chain (its model does not translate)
#   bash scripts/quickstart.sh --help        # settings, what it writes, how it resumes
#
# The program is deepnet_fairseq/recipes/quickstart.py (python -m deepnet_fairseq.recipes quickstart):
# the wmt17 recipe at the quickstart size, through the same runtime as scripts/wmt17/*.sh.
set -euo pipefail
exec "${DEEPNET_PYTHON:-python}" -m deepnet_fairseq.recipes quickstart "$@"
