#!/usr/bin/env bash
# pelab — makes bench/.venv-peer: the environment bench/peer_position_coupling.py runs the authors'
# code of position coupling (HanseulJo/position-coupling) in. Prints the environment's python.
# Idempotent: an environment that already imports these exact versions is kept.
#
# The lightest path that runs their code on a CPU: a venv with --system-site-packages over Debian's
# python3-torch 1.13 (CPU-only, /usr/bin/python3) and Debian's numpy 1.24 (torch 1.13 was built
# against numpy 1.x: a numpy 2 in the venv would break it), plus their pure-Python dependencies
# pinned to the versions of their env.yaml (transformers 4.46.3, the last of 4.46, still imports
# on torch 1.13). No CUDA wheels, about 30 s and 360 MB (measured 2026-11-29, AMD EPYC, PyPI).
# Needs Debian's python3-torch, python3-numpy and python3-venv, and network access to PyPI (here,
# once; bench/peer_position_coupling.py itself downloads nothing).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${PELAB_PEER_VENV:-$ROOT/bench/.venv-peer}"
BASE="${PELAB_VENV_BASE_PYTHON:-/usr/bin/python3}"
PY="$VENV/bin/python"
PINS=(transformers==4.46.3 tokenizers==0.20.3 hydra-core==1.3.2 omegaconf==2.3.0 dotmap==1.3.30
      torchinfo==1.8.0 tqdm==4.66.5 matplotlib==3.9.2 wandb==0.16.6)
WANT="1.13 4.46.3 1.3.2 2.3.0 1.8.0 4.66.5 3.9.2 0.16.6 1"
probe() {
  "$PY" -c 'import torch, transformers, hydra, omegaconf, dotmap, torchinfo, tqdm, matplotlib, wandb, numpy
print(".".join(torch.__version__.split(".")[:2]), transformers.__version__, hydra.__version__,
      omegaconf.__version__, torchinfo.__version__, tqdm.__version__, matplotlib.__version__,
      wandb.__version__, numpy.__version__.split(".")[0])' 2>/dev/null
}
if [ -x "$PY" ] && [ "$(probe)" = "$WANT" ]; then
  echo "$PY"
  exit 0
fi
if ! "$BASE" -c 'import torch, numpy' 2>/dev/null; then
  echo "bench/peer_venv.sh: $BASE lacks torch or numpy (Debian: apt-get install python3-torch python3-numpy)" >&2
  exit 1
fi
. "$ROOT/bench/venv_lib.sh"
venv_create bench/peer_venv.sh "$BASE" "$VENV" --system-site-packages || exit 1
# Keep the system numpy: pinned to the version torch 1.13 was built with, pip leaves it in place.
NUMPY=$("$BASE" -c 'import numpy; print(numpy.__version__)')
venv_pip bench/peer_venv.sh "$VENV" probe "$WANT" "numpy==$NUMPY" "${PINS[@]}"
