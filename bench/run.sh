#!/usr/bin/env bash
# pelab — one command for the CPU training benchmark: builds Release (build-perf), then times full
# training steps of pelab and of each PyTorch peer ALTERNATELY for every PE scheme and
# prints/writes the table (bench/results/train_bench.{md,csv.xz,json.xz}). Extra arguments go to run_bench.py,
# e.g. bench/run.sh --configs ref --reps 3 --steps 10, or with PyPI's torch eager and compiled:
# bench/run.sh --configs ref,tiny --peers debian,pypi-eager,pypi-compile.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${PELAB_BENCH_BUILD:-$ROOT/build-perf}"
PY="${PELAB_TORCH_PYTHON:-/usr/bin/python3}"
# CPU-only build: PyTorch's Debian build has no CUDA either (a CUDA-enabled bench_train no longer
# maps cudart / cuBLAS / cuBLASLt on the CPU: the backend is libpelab_cuda.so, loaded on demand). Likewise without MPI (bench_train is one process; the 2026-11-24 figures
# predate the MPI option). Each run records every BLAS library mapped into each side's processes.
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPELAB_CUDA=OFF -DPELAB_MPI=OFF >/dev/null
ninja -C "$BUILD" bench_train pelab   # pelab: run_bench.py reads the registered schemes from `pelab config-reference`
mkdir -p "$ROOT/bench/results"
lscpu | sed -n '1,20p' > "$ROOT/bench/results/machine.txt"
# The OpenMP wait policy is set per process by run_bench.py (--policies): each side is tried under
# every setting and reported under its fastest.
# The PyTorch peers (--peers, default debian: Debian's python3-torch, no network needed). A pypi-*
# peer (pypi-eager, pypi-compile: PyTorch 2.x from PyPI, eager and torch.compile) makes or reuses
# the venv bench/.venv-torch first (bench/torch_venv.sh; needs PyPI the first time).
peers=debian
prev=
for arg in "$@"; do
  case "$arg" in --peers=*) peers="${arg#--peers=}" ;; esac
  [ "$prev" = "--peers" ] && peers="$arg"
  prev="$arg"
done
venv=()
case ",$peers," in *,pypi-*) venv=(--venv-python "$("$ROOT/bench/torch_venv.sh")") ;; esac
exec "$PY" "$ROOT/bench/run_bench.py" --bin "$BUILD/bench_train" --python "$PY" "${venv[@]}" \
  --out "$ROOT/bench/results/train_bench" "$@"
