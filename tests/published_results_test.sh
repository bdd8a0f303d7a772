#!/usr/bin/env bash
# ctest Published.ResultsReproduceFromTheirRecords: a published study's results.csv and tables
# reproduce from its records.tar.xz alone, through --merge and --report-only
# (tools/check_published.sh on the Kazemnejad suite's parity task, a few seconds), and the check
# does fail when they do not: the same task copied with one digit of its results.csv changed, and
# with its archive cut short, is each refused with a non-zero exit.
#   tests/published_results_test.sh PELAB SOURCE_DIR
set -u
pelab="$1" src="$2"
task="$src/docs/results/suite_kazemnejad/parity"
[ -f "$task/records.tar.xz" ] || { echo "FAIL: $task/records.tar.xz is missing"; exit 1; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: $*"; cat "$t/out" 2>/dev/null; exit 1; }

bash "$src/tools/check_published.sh" "$pelab" "$task" > "$t/out" 2>&1 ||
  fail "the published parity task does not reproduce from its records"
grep -q 'reproduce from the records' "$t/out" || fail "no line saying what was checked"
cat "$t/out"

# The same task in a copy of the suite's folder (the check finds the suite by its summary.md).
mkdir -p "$t/suite_kazemnejad" && cp -r "$task" "$t/suite_kazemnejad/" &&
  cp "$src/docs/results/suite_kazemnejad/summary.md" "$t/suite_kazemnejad/" || fail "cannot copy"
copy="$t/suite_kazemnejad/parity"

# One published number changed: the first row's last field gains a digit.
cp "$copy/results.csv" "$t/results.csv.orig"
awk -F, -v OFS=, 'NR == 2 { $NF = $NF "1" } { print }' "$t/results.csv.orig" > "$copy/results.csv"
cmp -s "$copy/results.csv" "$t/results.csv.orig" && fail "the injected change changed nothing"
if (cd "$src" && bash tools/check_published.sh "$pelab" "$copy") > "$t/out" 2>&1; then
  fail "a changed results.csv passed the check"
fi
grep -q 'results.csv does not reproduce from its records' "$t/out" ||
  fail "the refusal does not name results.csv"

# The archive cut short: the check fails (pelab refuses the archive), it does not pass on nothing.
cp "$t/results.csv.orig" "$copy/results.csv"
head -c 20000 "$task/records.tar.xz" > "$copy/records.tar.xz"
if (cd "$src" && bash tools/check_published.sh "$pelab" "$copy") > "$t/out" 2>&1; then
  fail "a truncated archive passed the check"
fi
grep -q 'records.tar.xz' "$t/out" || fail "the refusal does not name the archive"
echo "PASS: a changed results.csv and a truncated archive are each refused"
