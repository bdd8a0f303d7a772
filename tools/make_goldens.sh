#!/usr/bin/env bash
# Regenerates the golden files in tests/golden/ (docs/testing.md):
#   1. builds pelab (build-golden/ unless PELAB_BUILD_DIR is set),
#   2. writes every case's input (a pelab checkpoint + the batch) with
#      PELAB_WRITE_GOLDEN_INPUTS=DIR pelab_tests --gtest_filter=Golden.MatchesTorchReference,
#   3. runs tools/torch_reference.py (PyTorch, float64) on each input,
#   4. replaces tests/golden/ with the new inputs and goldens and runs the Golden tests.
# Needs PyTorch, h5py and PyYAML for /usr/bin/python3: PELAB_WITH_TORCH=1 tools/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build=${PELAB_BUILD_DIR:-build-golden}
python=${PELAB_PYTHON:-/usr/bin/python3}
"$python" -c "import torch, h5py, yaml" 2>/dev/null || {
  echo "make_goldens: $python needs torch, h5py and yaml: run PELAB_WITH_TORCH=1 tools/setup.sh" >&2
  exit 1
}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target pelab_tests -j "${PELAB_JOBS:-$(nproc)}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PELAB_WRITE_GOLDEN_INPUTS="$tmp" "$build/pelab_tests" --gtest_filter=Golden.MatchesTorchReference \
  --gtest_brief=1
n=0
for in in "$tmp"/*.input.h5; do
  "$python" tools/torch_reference.py "$in" "${in%.input.h5}.golden.h5"
  n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "make_goldens: no inputs were written" >&2; exit 1; }
mkdir -p tests/golden
rm -f tests/golden/*.input.h5 tests/golden/*.golden.h5
cp "$tmp"/*.input.h5 "$tmp"/*.golden.h5 tests/golden/
echo "make_goldens: $n cases, $(du -sh tests/golden | cut -f1) in tests/golden"
"$build/pelab_tests" --gtest_filter='Golden*'
