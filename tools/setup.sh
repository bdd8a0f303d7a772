#!/usr/bin/env bash
# Installs what pelab needs from Debian's packages (only what is missing). Safe to re-run.
#   PELAB_WITH_TORCH=1 tools/setup.sh   also installs PyTorch (to regenerate goldens / run bench vs torch)
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config libopenblas-openmp-dev libhdf5-dev libyaml-cpp-dev libgtest-dev
      libarchive-dev liblzma-dev  # run records' archives (records.tar.xz)
      gnuplot-nox fortunes python3-numpy python3-h5py
      libopenmpi-dev openmpi-bin  # MPI: optional at build (PELAB_MPI), used by `mpirun pelab train`
      slurm-wlm munge)            # the test suite's private Slurm cluster (tests/slurm_cluster.sh)
if [ "${PELAB_WITH_TORCH:-0}" = 1 ]; then pkgs+=(python3-torch python3-yaml); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: dependencies present"
