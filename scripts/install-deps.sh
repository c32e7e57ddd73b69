#!/usr/bin/env bash
# Installs the build dependencies from Debian 12 that are missing (needs root or sudo); clang and
# its runtime are for the test command's libFuzzer smoke (scripts/fuzz.sh), not for the product.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config libcli11-dev libsndfile1-dev libsoxr-dev
          libspdlog-dev nlohmann-json3-dev doctest-dev clang libclang-rt-14-dev
          # the Python module (pip install .: python/README.md)
          python3-dev python3-venv
          # test-only: the dataset mode's engine tests (tests/dataset/: GNU parallel, a one-node Slurm)
          parallel slurm-wlm munge)
# Arguments: install those packages instead (scripts/test-arm64.sh's cross toolchain)
[ $# -eq 0 ] || packages=("$@")
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -eq 0 ]; then echo "install-deps: all packages present"; exit 0; fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
