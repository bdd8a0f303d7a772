#!/usr/bin/env bash
# Checks a positive control in a comparison's results.csv: every seed of ROW at LENGTH has
# exact_match >= MIN and met its stop criterion (converged = true; false or empty fails). Prints one line and exits 0,
# or names the failing seeds and exits 1; a file without ROW at LENGTH is an error too.
#   tools/check_control.sh RESULTS_CSV ROW LENGTH MIN
#   tools/check_control.sh reports/addition_quick/results.csv coupled+shaw 20 0.95
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: tools/check_control.sh RESULTS_CSV ROW LENGTH MIN" >&2; exit 2; }
csv=$1 row=$2 len=$3 min=$4
[ -f "$csv" ] || { echo "check_control: $csv: no such file" >&2; exit 1; }
awk -F, -v row="$row" -v len="$len" -v min="$min" -v file="$csv" '
  NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i
            if (!("scheme" in col) || !("seed" in col) || !("length" in col) ||
                !("exact_match" in col) || !("converged" in col) || !("variant" in col)) {
              print "check_control: " file ": not a comparison results.csv (missing columns)" > "/dev/stderr"
              bad_file = 1; exit 1 }
            next }
  $col["scheme"] == row && $col["variant"] == "" && $col["length"] == len {
    n++
    v = $col["exact_match"]
    if (v == "" || v + 0 < min + 0) fails = fails sprintf(" seed %s %.1f %%,", $col["seed"], 100 * v)
    if ($col["converged"] != "true") fails = fails sprintf(" seed %s missed its criterion,", $col["seed"])
    shown = shown sprintf(" %.1f", 100 * v) }
  END {
    if (bad_file) exit 1
    if (n == 0) { printf "check_control: %s: no row %s at length %s\n", file, row, len > "/dev/stderr"; exit 1 }
    if (fails != "") { sub(/,$/, "", fails)
      printf "check_control: %s at length %s below %.0f %% exact match or unconverged:%s (%s)\n", row, len, 100 * min, fails, file > "/dev/stderr"; exit 1 }
    printf "check_control: %s at length %s: every seed >= %.0f %% (%s %%; n = %d)\n", row, len, 100 * min, substr(shown, 2), n }
' "$csv"
