#!/usr/bin/env bash
# ctest CheckControl.PlantedResults: tools/check_control.sh (the default job's check of its
# positive control) on planted results.csv files: every seed at or above the bar and converged
# passes with one line; a seed below the bar, a seed that missed its criterion, a row or length
# that is not there and a file that is not a results.csv each fail with exit 1 and one line on
# stderr naming what; a wrong command line exits 2.
#   tests/check_control_test.sh SOURCE_DIR
set -u
src="$1"
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$t/out"; echo "--- stderr"; cat "$t/err"; exit 1; }
hdr="scheme,variant,seed,split,length,in_distribution,status,loss,perplexity,token_accuracy,exact_match,train_wall_s,eval_wall_s,converged,criterion_step"
row() { echo "$1,$2,$3,len_$4,$4,false,ok,0.1,1.1,0.99,$5,10,1,$6,1500"; }
check() {  # expected-rc csv row length min
  local want=$1; shift
  bash "$src/tools/check_control.sh" "$@" > "$t/out" 2> "$t/err"
  local rc=$?
  [ "$rc" -eq "$want" ] || fail "exit $rc, expected $want for: $*"
}
{ echo "$hdr"; row coupled+shaw "" 1 20 1.0 true; row coupled+shaw "" 2 20 0.95 true
  row coupled+shaw "" 3 20 0.99 true; row coupled+shaw "" 1 12 0.10 true
  row coupled+shaw randpos 1 20 0.0 true; row learned "" 1 20 0.0 true; } > "$t/ok.csv"
check 0 "$t/ok.csv" coupled+shaw 20 0.95
grep -q "every seed >= 95 % (100.0 95.0 99.0 %; n = 3)" "$t/out" || fail "pass line"
[ ! -s "$t/err" ] || fail "stderr on success"
{ cat "$t/ok.csv"; row coupled+shaw "" 4 20 0.94 true; } > "$t/low.csv"
check 1 "$t/low.csv" coupled+shaw 20 0.95
grep -q "seed 4 94.0 %" "$t/err" || fail "the low seed is not named"
[ "$(wc -l < "$t/err")" -eq 1 ] || fail "not one line"
{ cat "$t/ok.csv"; row coupled+shaw "" 5 20 1.0 false; } > "$t/unconv.csv"
check 1 "$t/unconv.csv" coupled+shaw 20 0.95
grep -q "seed 5 missed its criterion" "$t/err" || fail "the unconverged seed is not named"
{ cat "$t/ok.csv"; row coupled+shaw "" 6 20 1.0 ""; } > "$t/nocrit.csv"
check 1 "$t/nocrit.csv" coupled+shaw 20 0.95
grep -q "seed 6 missed its criterion" "$t/err" || fail "a seed without a criterion record passes"
{ cat "$t/ok.csv"; row coupled+shaw "" 7 20 "" true; } > "$t/noval.csv"
check 1 "$t/noval.csv" coupled+shaw 20 0.95
grep -q "seed 7" "$t/err" || fail "a seed without a value passes"
check 1 "$t/ok.csv" coupled+shaw 25 0.95
grep -q "no row coupled+shaw at length 25" "$t/err" || fail "missing length"
check 1 "$t/ok.csv" nope 20 0.95
grep -q "no row nope" "$t/err" || fail "missing row"
echo "a,b,c" > "$t/bad.csv"
check 1 "$t/bad.csv" coupled+shaw 20 0.95
grep -q "not a comparison results.csv" "$t/err" || fail "bad file"
check 1 "$t/none.csv" coupled+shaw 20 0.95
grep -q "no such file" "$t/err" || fail "missing file"
check 2 "$t/ok.csv" coupled+shaw 20
echo "check_control: all planted cases behave"
