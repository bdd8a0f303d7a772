#!/usr/bin/env bash
# ctest GpuCheck.RunWithoutDeviceFailsCleanly: `tools/gpu_check.sh run` on a machine without a usable
# CUDA device must stop within seconds with exactly one line "gpu_check: no CUDA device: ..." on
# stderr, a non-zero exit status, and OUT/summary.txt saying so (device FAIL, the GPU steps skipped,
# result FAIL). It runs the binaries of this build (bin/ and src/ of a tree linked to the build and
# source folders), not a bundle: the CUDA bundle is too slow to build in the suite.
#   tests/gpu_check_test.sh BUILD_DIR SOURCE_DIR      exit 77 (skipped) where a device is usable
set -u
bin="$1" src="$2"
if "$bin/bench_cuda" --check >/dev/null 2>&1; then
  echo "a CUDA device is usable here: run tools/gpu_check.sh instead"
  exit 77
fi
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
mkdir "$t/tree" && ln -s "$bin" "$t/tree/bin" && ln -s "$src" "$t/tree/src" || exit 1
start=$(date +%s)
bash "$src/tools/gpu_check.sh" run --tree "$t/tree" "$t/out" > "$t/stdout" 2> "$t/stderr"
rc=$?
secs=$(( $(date +%s) - start ))
fail() {
  echo "FAIL: $*"
  echo "--- stdout"; cat "$t/stdout"; echo "--- stderr"; cat "$t/stderr"
  echo "--- summary.txt"; cat "$t/out/summary.txt" 2>/dev/null
  exit 1
}
[ "$rc" -ne 0 ] || fail "exit status 0 without a device"
[ "$(wc -l < "$t/stderr")" -eq 1 ] || fail "stderr is not one line"
grep -q '^gpu_check: no CUDA device: .' "$t/stderr" || fail "stderr does not say 'no CUDA device: <why>'"
[ -f "$t/out/summary.txt" ] || fail "no summary.txt"
for want in '^device +FAIL +[0-9.]+ +no CUDA device: ' '^host +(PASS|FAIL) ' '^tests_cuda +SKIP ' \
            '^bench_cuda +SKIP ' '^tests_rest +SKIP ' '^result: FAIL$'; do
  grep -Eq "$want" "$t/out/summary.txt" || fail "summary.txt has no line matching '$want'"
done
[ "$secs" -le 60 ] || fail "took $secs s (should stop within seconds)"
echo "ok: exit $rc in $secs s; $(cat "$t/stderr")"
