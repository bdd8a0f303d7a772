#!/usr/bin/env bash
# ctest DeviceSize.TreeAndGpuBundleFitTheDeviceTool: this checkout's working tree plus the GPU
# bundle (.gpu/ where prepared, else the measured bound in tools/device_size.sh) fit the device
# tool's 64 MiB, and the check does refuse what would not: the same tree beside a 60 MiB bundle
# (a sparse file, so no disk is used) exits 1 saying by how much it is over.
#   tests/device_size_test.sh SOURCE_DIR        exit 77 (skipped) outside a git checkout
set -u
src="$1"
bash "$src/tools/device_size.sh"
rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
truncate -s 60M "$t/pelab-gpu.tar.xz" || exit 1
if bash "$src/tools/device_size.sh" "$t" > "$t/out" 2>&1; then
  echo "FAIL: a 60 MiB bundle beside the tree passed"; cat "$t/out"; exit 1
fi
grep -q "over the device tool's limit by" "$t/out" || { echo "FAIL: no 'over the limit' line"; cat "$t/out"; exit 1; }
echo "PASS: a 60 MiB bundle beside this tree is refused"
