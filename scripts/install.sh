#!/usr/bin/env bash
# Install deepnet_fairseq and its exact dependency set into the active Python: 3.11, 3.12 or
# 3.13, as setup.py's python_requires says (transformers 5.24.0 needs >= 3.11). Use a virtual
# environment if you like: python3 -m venv .venv && . .venv/bin/activate
#
#   bash scripts/install.sh
#   bash scripts/install.sh --no-deploy   # without ctranslate2 and transformers (deepnet-export
#                                         # --ctranslate2, --transformers)
#
# Environment:
#   PYTHON            interpreter to install into (default: python3)
#   TORCH_INDEX_URL   extra pip index for torch, e.g. https://download.pytorch.org/whl/cpu
#                     (default: none; an installed torch 2.13.0, CUDA build or not, is kept)
#
# Steps (about 6 minutes on 2 cores, 5.5 measured; most of it compiling fairseq's extensions):
#   1. torch==2.13.0 first, so nothing below can pull another torch with its CUDA wheels;
#   2. fairseq's runtime dependencies and this plugin's (requirements.txt), pinned by
#      constraints.txt (hydra-core 1.3.2, omegaconf 2.3.0);
#   3. fairseq-fixed 0.12.3.1 (upstream fairseq main with the Python 3.11 fix) built from source
#      (--no-binary: PyPI's prebuilt cp312 wheel was compiled against another torch, and its
#      libbase extension fails to load with 2.13) without build isolation, so its build uses
#      the torch above, and with --no-deps, because its metadata asks for torchaudio, which
#      has no release for torch 2.13 (fairseq needs it only for speech tasks). Not fairscale
#      (unmaintained): fairseq imports it whenever it is installed, and the plugin needs none
#      of it (ZeRO-1 runs on torch's ZeroRedundancyOptimizer, docs/distributed.md); a
#      fairscale an earlier version of this script installed is named at the end;
#   4. this package, editable, with its "deploy" extra: ctranslate2 4.8.5 (a prebuilt wheel, about
#      40 MB; CTranslate2's converter and runtime for deepnet-export --ctranslate2 and
#      benchmarks/decode_speed.py) and transformers 5.24.0 with safetensors 0.8.0 (pure Python
#      and prebuilt wheels, with tokenizers and huggingface-hub; deepnet-export --transformers
#      writes a model that transformers' own FSMT and MarianTokenizer load). --no-deploy leaves
#      them out (pip install -e '.[deploy]' later).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
package=".[deploy]"
case "${1:-}" in
  "") ;;
  --no-deploy) package="." ;;
  *) echo "error: unknown argument '$1'; the only option is --no-deploy (see the header of $0)" >&2
     exit 2 ;;
esac
pip_install=("$PYTHON" -m pip install --progress-bar off -c constraints.txt)

echo "[install] 1/4 torch 2.13.0"
if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
  "${pip_install[@]}" --extra-index-url "$TORCH_INDEX_URL" torch==2.13.0
else
  "${pip_install[@]}" torch==2.13.0
fi
echo "[install] 2/4 dependencies (requirements.txt)"
"${pip_install[@]}" -r requirements.txt setuptools wheel
echo "[install] 3/4 fairseq-fixed 0.12.3.1 (compiles; a few minutes the first time)"
"${pip_install[@]}" --no-build-isolation --no-deps --no-binary fairseq-fixed \
  fairseq-fixed==0.12.3.1
echo "[install] 4/4 deepnet_fairseq (editable) $([[ $package == . ]] && echo "without" || echo "with") ctranslate2 and transformers"
"${pip_install[@]}" --no-build-isolation -e "$package"

"$PYTHON" - <<'PY'
import importlib.util
import fairseq, torch, deepnet_fairseq
print(f"[install] ok: torch {torch.__version__}, fairseq {fairseq.__version__}, "
      f"plugin at {deepnet_fairseq.USER_DIR}")
if importlib.util.find_spec("fairscale") is not None:
    print("[install] note: fairscale is installed in this Python (earlier versions of this script "
          "installed it). Nothing here needs it, but fairseq imports it whenever it is there; "
          "uninstall it with pip unless something else of yours uses it.")
PY
