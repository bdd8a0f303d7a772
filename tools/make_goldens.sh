#!/usr/bin/env bash
# Regenerates the golden files in tests/golden/ (docs/testing.md):
#   1. builds pelab (build-golden/ unless PELAB_BUILD_DIR is set),
#   2. writes every case's input (a pelab checkpoint + the batch) with
#      PELAB_WRITE_GOLDEN_INPUTS=DIR pelab_tests --gtest_filter=Golden.MatchesTorchReference,
#   3. runs tools/torch_reference.py (PyTorch, float64) on each input,
#   4. replaces tests/golden/ with the new inputs and goldens and runs the Golden tests.
# With --scheme NAME only the cases of pe.scheme NAME are made (PELAB_GOLDEN_SCHEME=NAME), and
# only their files in tests/golden/ are replaced; every other scheme's files stay as they are.
# Needs PyTorch, h5py and PyYAML for /usr/bin/python3: PELAB_WITH_TORCH=1 tools/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: tools/make_goldens.sh [--scheme NAME]"
scheme=
while [ $# -gt 0 ]; do
  case $1 in
    --scheme) [ $# -ge 2 ] && [ -n "$2" ] || { echo "make_goldens: --scheme needs a name; $usage" >&2; exit 2; }
              scheme=$2; shift 2 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "make_goldens: unknown argument '$1'; $usage" >&2; exit 2 ;;
  esac
done
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
if [ -n "$scheme" ]; then export PELAB_GOLDEN_SCHEME=$scheme; else unset PELAB_GOLDEN_SCHEME; fi
PELAB_WRITE_GOLDEN_INPUTS="$tmp" "$build/pelab_tests" --gtest_filter=Golden.MatchesTorchReference \
  --gtest_brief=1
n=0
for in in "$tmp"/*.input.h5; do
  [ -e "$in" ] || break
  "$python" tools/torch_reference.py "$in" "${in%.input.h5}.golden.h5"
  n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "make_goldens: no inputs were written" >&2; exit 1; }
mkdir -p tests/golden
if [ -z "$scheme" ]; then
  rm -f tests/golden/*.input.h5 tests/golden/*.golden.h5
else
  # The committed cases of this scheme (by the pe.scheme their input stores), so that a case the
  # test no longer has does not stay behind; no other scheme's file is touched.
  "$python" - "$scheme" tests/golden/*.input.h5 <<'PY' | while IFS= read -r old; do
import sys, h5py, yaml
for p in sys.argv[2:]:
    with h5py.File(p, "r") as f:
        v = f["config"][()]
        c = yaml.safe_load(v.decode() if isinstance(v, bytes) else str(v))
    if c["pe"]["scheme"] == sys.argv[1]:
        print(p)
PY
    rm -f "$old" "${old%.input.h5}.golden.h5"
  done
fi
cp "$tmp"/*.input.h5 "$tmp"/*.golden.h5 tests/golden/
echo "make_goldens: $n cases${scheme:+ of scheme $scheme}, $(du -sh tests/golden | cut -f1) in tests/golden"
unset PELAB_GOLDEN_SCHEME
"$build/pelab_tests" --gtest_filter='Golden*'
