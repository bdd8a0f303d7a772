#!/usr/bin/env bash
# pelab — will this checkout travel to a GPU machine? The device tool sends the working tree (the
# files git tracks, and the untracked ones it does not ignore) together with the carried GPU bundle
# (.gpu/, made by tools/gpu_check.sh prepare), and refuses more than 64 MiB in all: over that, no
# GPU check can run from this repository (docs/cuda.md, "One-call GPU check").
#
#   tools/device_size.sh [BUNDLE_DIR]
#
# Prints the tree's size (and file count), the bundle's and their sum; exits 1 when the sum is over
# 64 MiB, 77 outside a git checkout (nothing to measure). The bundle is BUNDLE_DIR (default .gpu/)
# when it has been prepared, else an upper bound measured on the bundle itself (BUNDLE_BOUND
# below), so that the check also runs where no CUDA build is made (CI: ctest
# DeviceSize.TreeAndGpuBundleFitTheDeviceTool). Build folders are ignored by git, so not counted.
set -euo pipefail

LIMIT=$((64 << 20))
# The packed bundle (every file of .gpu/), as tools/gpu_check.sh prepare made it with
# PELAB_GPU_ARCHS=90 PELAB_GPU_CMAKE_ARGS='-DPELAB_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3':
# 31,322,179 bytes (29.9 MiB) at 2026-11-29 (stripped, without docs/results and bench/results,
# xz -9e in one block; ICU's data, which libarchive brings in through libxml2, is about 7 MiB of
# it), rounded up to 31 MiB. Raise it when prepare reports a larger bundle (prepare checks the
# real one).
BUNDLE_BOUND=$((31 << 20))

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bundle="${1:-$root/.gpu}"
git -C "$root" rev-parse --git-dir >/dev/null 2>&1 ||
  { echo "device_size: $root is not a git checkout: nothing to measure" >&2; exit 77; }

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# What the device tool sends: tracked files as they are now (deleted ones count nothing) and the
# untracked files git does not ignore. Links count as links.
read -r files tree < <(cd "$root" && git ls-files -co --exclude-standard -z |
                       xargs -0 -r stat -c %s -- 2>/dev/null |
                       awk '{ n++; s += $1 } END { print n + 0, s + 0 }')
if [ -d "$bundle" ]; then
  packed=$(du -sb --apparent-size "$bundle" | cut -f1)
  what="$bundle, prepared"
else
  packed=$BUNDLE_BOUND
  what="not prepared here: the measured bound in tools/device_size.sh"
fi
total=$((tree + packed))
echo "device_size: tree $(mib "$tree") in $files files + GPU bundle $(mib "$packed") ($what)" \
     "= $(mib "$total") of the device tool's $(mib "$LIMIT")"
if [ "$total" -gt "$LIMIT" ]; then
  echo "device_size: over the device tool's limit by $(mib $((total - LIMIT))): it would refuse" \
       "every GPU call; keep results out of the tree (docs/experiments.md, \"records.tar.xz\")" \
       "or slim the bundle" >&2
  exit 1
fi
