# shellcheck shell=bash
# Shared start of the recipes (scripts/<dataset>/*.sh, one directory per dataset); sourced, not
# run. Every step (prepare, train, evaluate, sweep) is Python: python -m deepnet_fairseq.recipes
# DATASET STEP (deepnet_fairseq/recipes/__main__.py). Settings: docs/running.md, docs/presets.md.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${DEEPNET_PYTHON:-python}

die() { echo "error: $*" >&2; exit 1; }

# recipe_args "$@": --help prints the calling script's header (line 2 to `set -euo pipefail`),
# then every setting (generated from their declarations, deepnet_fairseq/recipes/spec/settings.py);
# the only other argument is --dry-run.
recipe_args() {
  if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    echo
    "$PY" -m deepnet_fairseq.recipes.spec.settings \
      || echo "(the list of settings needs the package installed: bash scripts/install.sh)"
    exit 0
  fi
  [[ $# -eq 0 || ( $# -eq 1 && "$1" == --dry-run ) ]] \
    || die "$RECIPE takes no arguments but --dry-run or --help (settings are environment variables)"
}

# recipe_exec DATASET STEP "$@": hand over to the runtime (exec: a scheduler's signal reaches it,
# and it passes the signal on to the processes it started).
recipe_exec() {
  RECIPE="$1/$2"
  local dataset=$1 step=$2
  shift 2
  recipe_args "$@"
  command -v "$PY" >/dev/null || die "$PY not found on PATH; run: bash scripts/install.sh"
  exec "$PY" -m deepnet_fairseq.recipes --repo "$REPO" "$dataset" "$step" "$@"
}
