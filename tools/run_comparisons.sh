#!/usr/bin/env bash
# Runs the provided length-extrapolation comparisons (configs/compare/*.yaml) and copies each
# report (report.md, results.csv, the tables, the plots and the data behind them) and its runs'
# records (records.tar.xz, written by --archive: what --merge, reuse and --report-only read; not
# the run directories) into docs/results/<name>/, as docs/experiments.md shows them.
#   tools/run_comparisons.sh [NAME...]        (default: quick seq2seq decoder_count lm)
#   PELAB=build-release/pelab tools/run_comparisons.sh quick
# A comparison that is interrupted (Ctrl-C) continues where it stopped when run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PELAB=${PELAB:-build/pelab}
names=("$@")
[ ${#names[@]} -eq 0 ] && names=(quick seq2seq decoder_count lm)
for name in "${names[@]}"; do
  echo "== $name: $PELAB compare configs/compare/$name.yaml"
  start=$(date +%s)
  "$PELAB" compare "configs/compare/$name.yaml" --progress lines --archive
  echo "== $name: $(( $(date +%s) - start )) s wall"
  dest="docs/results/$name"
  mkdir -p "$dest"
  rm -f "$dest"/*.png "$dest"/*.csv "$dest"/*.dat "$dest"/report.md
  cp "reports/$name"/report.md "reports/$name"/*.csv "reports/$name"/*.dat \
     "reports/$name"/records.tar.xz "$dest"/
  cp "reports/$name"/*.png "$dest"/ 2>/dev/null || echo "(no PNG plots: is gnuplot installed?)"
done
