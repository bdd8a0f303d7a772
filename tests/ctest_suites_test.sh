#!/usr/bin/env bash
# ctest CtestSuites.EntriesCoverEveryTestOnce: tests/ctest_suites.cmake on a stand-in binary whose
# --gtest_list_tests has a plain suite, a parametrized one with GetParam comments, a typed one and a
# suite large enough to shard; every test must be covered by exactly one entry's filter and shard,
# and the shard variables must add up. Then the real binary ($1): the entries' suites are exactly
# the suites it lists.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
bin="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "CtestSuites: $*" >&2; exit 1; }

{
  echo '#!/usr/bin/env bash'
  echo 'cat <<"LIST"'
  echo 'Plain.'
  echo '  A'
  echo '  B'
  echo 'Grid/Param.'
  echo '  Case/0  # GetParam() = 0'
  echo '  Case/1  # GetParam() = (1; 2)'
  echo 'Typed/0.  # TypeParam = float'
  echo '  Works'
  echo 'Big.'
  for i in $(seq 1 7); do echo "  T$i"; done
  echo 'LIST'
} > "$tmp/fake"
chmod +x "$tmp/fake"
cmake -D TEST_EXECUTABLE="$tmp/fake" -D CTEST_FILE="$tmp/out.cmake" -D SHARD_TESTS=3 \
      -D TEST_TIMEOUT=60 -P "$src/tests/ctest_suites.cmake" >/dev/null
out="$tmp/out.cmake"
[ "$(grep -c '^add_test' "$out")" = 6 ] || fail "expected 6 entries (Plain, Grid/Param, Typed/0, Big x3):
$(cat "$out")"
for f in 'Plain.*' 'Grid/Param.*' 'Typed/0.*' 'Big.*'; do
  grep -qF -- "--gtest_filter=$f]==]" "$out" || fail "no entry filters $f"
done
[ "$(grep -cF -- '--gtest_filter=Big.*' "$out")" = 3 ] || fail "Big (7 tests, shards of 3) is not 3 entries"
for i in 0 1 2; do
  grep -qF "GTEST_TOTAL_SHARDS=3;GTEST_SHARD_INDEX=$i]==]" "$out" || fail "Big's shard $i is missing"
done
[ "$(grep -c 'SKIP_RETURN_CODE 77' "$out")" = 6 ] || fail "an entry lacks SKIP_RETURN_CODE 77"

# The real binary: one entry per suite it lists (a suite's shards count once).
[ -x "$bin" ] || fail "no test binary at $bin"
listed=$("$bin" --gtest_list_tests | grep -E '^[^ ]' | sed -E 's/\.( +#.*)?$//' | sort -u)
cmake -D TEST_EXECUTABLE="$bin" -D CTEST_FILE="$tmp/real.cmake" -D SHARD_TESTS=40 \
      -D TEST_TIMEOUT=60 -P "$src/tests/ctest_suites.cmake" >/dev/null
covered=$(grep -oE -- '--gtest_filter=[^]]+' "$tmp/real.cmake" | sed -E 's/^--gtest_filter=//; s/\.\*$//' | sort -u)
[ "$listed" = "$covered" ] || fail "suites listed and entries differ: $(diff <(echo "$listed") <(echo "$covered") | head -5)"

# test_main: a run whose tests all skipped exits PELAB_TESTS_SKIP_RC; one test that ran does not.
skipped=$("$bin" --gtest_list_tests --gtest_filter='CudaKernels.*' | grep -c '^  ' || true)
if [ "$skipped" -gt 0 ] && ! "$bin" --gtest_filter='CudaKernels.*' 2>/dev/null | grep -q '^\[  PASSED  \] [1-9]'; then
  rc=0; PELAB_TESTS_SKIP_RC=77 "$bin" --gtest_filter='CudaKernels.*' >/dev/null 2>&1 || rc=$?
  [ "$rc" = 77 ] || fail "an all-skipped run exits $rc, not 77"
fi
rc=0; PELAB_TESTS_SKIP_RC=77 "$bin" --gtest_filter='OpsBasic.*' >/dev/null 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "a passing run exits $rc with PELAB_TESTS_SKIP_RC set"
echo "CtestSuites: ok"
