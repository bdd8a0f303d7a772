#!/usr/bin/env bash
# Builds pelab (Release) and runs the whole test suite, then the same suite under
# AddressSanitizer + UndefinedBehaviorSanitizer. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${PELAB_JOBS:-$(nproc)}
# Idle OpenMP threads must not spin while ctest runs several test processes on few cores.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 1800
if [ "${PELAB_SKIP_SANITIZE:-0}" != 1 ]; then
  # -O1 with line tables (-g1): what the sanitizers need (ASan's own advice is -O1; a report's
  # stack names file:line from the line tables), at 36 % of the CPU time of -O2 -g per file.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPELAB_SANITIZE=ON -DPELAB_CUDA=OFF \
        "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" >/dev/null
  cmake --build build-asan -j "$jobs" --target pelab_tests pelab
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
  export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp  # HDF5 1.10's own leaks on corrupt files
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export PELAB_SANITIZED=1
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 1800
fi
echo "tools/test.sh: all tests passed"
