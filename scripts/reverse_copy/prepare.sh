#!/usr/bin/env bash
# The depth study's task (the reverse_copy dataset: Table 1's pattern at tiny scale): generate 4,000 / 200 / 200 sentences of 30
# words and their reversals, then clean, sentencepiece and fairseq-preprocess them as every
# dataset's text. deepnet-depth-study runs this and sweep.sh for you.
#
#   bash scripts/reverse_copy/prepare.sh
#
# Hardware: any. Time: about 15 s on 2 CPU cores. Re-running skips finished steps.
# Environment (DEEPNET_<NAME> or <NAME>; the rest in docs/presets.md; --dry-run prints the
# settings and stops):
#   DEEPNET_WORK  output directory                             [runs/reverse_copy]
# Output: $DEEPNET_WORK/data/{bin, spm.model, raw/ (the references), config.json}.
set -euo pipefail
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/recipe.sh"
recipe_exec reverse_copy prepare "$@"
