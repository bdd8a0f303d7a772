#!/usr/bin/env bash
# pelab — makes bench/.venv-torch: a virtual environment with PyTorch from PyPI, the peer users get
# from `pip install torch` (bench/run.sh --peers pypi-eager,pypi-compile uses it). Prints the
# environment's python. Idempotent: an environment that already has this exact torch is kept.
#
# torch is pinned (PELAB_TORCH_VERSION overrides). PyPI's Linux x86_64 wheel is the CUDA build:
# pip also installs the CUDA runtime packages (nvidia-*, cuda-*, triton; several GB). Tried
# 2026-11-26 with torch 2.15.0: `pip install --no-deps torch` plus its pure-Python dependencies does
# NOT import (`ImportError: libcufile.so.0`: libtorch links the CUDA libraries), and the CPU-only
# wheels live on download.pytorch.org, which this machine cannot reach — so this installs the
# ordinary way. The wheel links MKL statically (BLAS_INFO=mkl) and ships its own libgomp;
# torch.compile's CPU path (inductor) compiles the C++ it generates with the system's g++.
# numpy is installed too (pinned): tools/torch_reference.py, whose PE classes bench_torch.py trains,
# imports it. Needs network access to PyPI and Debian's python3-venv (`apt-get install python3-venv`).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${PELAB_TORCH_VENV:-$ROOT/bench/.venv-torch}"
VERSION="${PELAB_TORCH_VERSION:-2.15.0}"
NUMPY_VERSION="${PELAB_NUMPY_VERSION:-2.4.6}"
BASE="${PELAB_VENV_BASE_PYTHON:-/usr/bin/python3}"
PY="$VENV/bin/python"
# torch.__version__ carries the wheel's local tag ("2.15.0+cu132"): compare the public part.
installed() { "$PY" -c 'import numpy, torch; print(torch.__version__.split("+")[0])' 2>/dev/null; }
if [ -x "$PY" ] && [ "$(installed)" = "$VERSION" ]; then
  echo "$PY"
  exit 0
fi
. "$ROOT/bench/venv_lib.sh"
venv_create bench/torch_venv.sh "$BASE" "$VENV" || exit 1
venv_pip bench/torch_venv.sh "$VENV" installed "$VERSION" "torch==$VERSION" "numpy==$NUMPY_VERSION"
