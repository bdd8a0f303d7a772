#!/usr/bin/env bash
# ctest GpuCheck.RunWithoutDeviceFailsCleanly: `tools/gpu_check.sh run` on a machine without a usable
# CUDA device must stop within seconds with exactly one line "gpu_check: no CUDA device: ..." on
# stderr, a non-zero exit status, and its one result file OUT/results.txt (nothing else under OUT,
# under 1 MB) saying so (device FAIL, every GPU step skipped, result FAIL). It runs the binaries of this build (bin/ and src/ of a tree linked to the build and
# source folders), not a bundle: the CUDA bundle is too slow to build in the suite.
# Then, run from a relative folder with CDPATH exported (a `cd` through CDPATH prints, and OUT was
# once captured as two lines: every log and the summary lost, host and libs reported PASS), the logs
# (PELAB_GPU_KEEP_LOGS=1) and results.txt must land in the relative OUT; and with a stub device probe
# that passes, a results.txt that cannot be written (a folder in its place) must make the exit
# status non-zero.
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
  echo "--- results.txt"; cat "$t/out/results.txt" 2>/dev/null
  exit 1
}
[ "$rc" -ne 0 ] || fail "exit status 0 without a device"
[ "$(wc -l < "$t/stderr")" -eq 1 ] || fail "stderr is not one line"
grep -q '^gpu_check: no CUDA device: .' "$t/stderr" || fail "stderr does not say 'no CUDA device: <why>'"
[ -f "$t/out/results.txt" ] || fail "no results.txt"
[ "$(ls -A "$t/out")" = results.txt ] || fail "OUT holds more than results.txt: $(ls -A "$t/out" | tr '\n' ' ')"
[ "$(stat -c %s "$t/out/results.txt")" -lt 1000000 ] || fail "results.txt is 1 MB or more"
for want in '^device +FAIL +[0-9.]+ +no CUDA device: ' '^host +(PASS|FAIL) ' '^tests_cuda +SKIP ' \
            '^overhead +SKIP ' '^bench_cuda +SKIP ' '^bench_torch +SKIP ' '^compare +SKIP ' \
            '^tests_rest +SKIP ' '^result: FAIL$' '^==== device: FAIL '; do
  grep -Eq "$want" "$t/out/results.txt" || fail "results.txt has no line matching '$want'"
done
[ "$secs" -le 60 ] || fail "took $secs s (should stop within seconds)"
first="exit $rc in $secs s; $(cat "$t/stderr")"

# CDPATH exported, relative tree and OUT.
mkdir "$t/rel" && ln -s "$t/tree" "$t/rel/tree" || exit 1
(cd "$t/rel" && CDPATH="$t/rel:." PELAB_GPU_KEEP_LOGS=1 bash "$src/tools/gpu_check.sh" run --tree tree out) \
  > "$t/stdout" 2> "$t/stderr"
rc=$?
[ "$rc" -ne 0 ] || fail "CDPATH: exit status 0 without a device"
[ -f "$t/rel/out/results.txt" ] || fail "CDPATH: no results.txt in the relative OUT"
[ -f "$t/rel/out/logs/host.log" ] && [ -f "$t/rel/out/logs/device.log" ] || fail "CDPATH: host.log/device.log lost"
grep -Eq '^result: FAIL$' "$t/rel/out/results.txt" || fail "CDPATH: results.txt does not say FAIL"

# A stub probe that passes: --only device then passes; with no results.txt it must fail.
mkdir -p "$t/stub/bin" && ln -s "$src" "$t/stub/src" && ln -s "$bin/pelab_tests" "$t/stub/bin/pelab_tests" &&
  ln -s "$bin/pelab" "$t/stub/bin/pelab" &&
  printf '#!/bin/sh\necho "device: stub probe (tests/gpu_check_test.sh)"\n' > "$t/stub/bin/bench_cuda" &&
  chmod +x "$t/stub/bin/bench_cuda" || exit 1
bash "$src/tools/gpu_check.sh" run --tree "$t/stub" --only device "$t/ok" > "$t/stdout" 2> "$t/stderr"
rc=$?
[ "$rc" -eq 0 ] || fail "stub probe: exit status $rc where every step passed"
grep -Eq '^result: PASS$' "$t/ok/results.txt" || fail "stub probe: results.txt does not say PASS"
mkdir -p "$t/nosummary/results.txt" || exit 1
bash "$src/tools/gpu_check.sh" run --tree "$t/stub" --only device "$t/nosummary" > "$t/stdout" 2> "$t/stderr"
rc=$?
[ "$rc" -ne 0 ] || fail "no results.txt written, yet exit status 0"
grep -q 'cannot write .*results.txt' "$t/stderr" || fail "no results.txt written, and stderr does not say so"
echo "ok: $first; CDPATH and relative OUT kept every log; no results.txt: exit $rc"
