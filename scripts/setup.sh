#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: installs the build dependencies, builds mimi, gets
# the weights (the official ones where there is internet; otherwise the deterministic test
# weights, which exercise the same code but do not sound like speech), and runs a roundtrip of
# examples/hello.wav -> build/hello.roundtrip.wav.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
command -v curl >/dev/null || { SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo; $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq curl; }
bash scripts/build.sh
weights=()
if [ -n "${MIMI_WEIGHTS:-}" ]; then
  echo "using MIMI_WEIGHTS=$MIMI_WEIGHTS"
elif bash scripts/download-weights.sh; then
  :
else
  echo "setup: could not download kyutai/mimi (no internet?); using the deterministic test weights instead"
  [ -s build/test-weights/model.safetensors ] ||
    build/mimi gen-weights --config full --dialect hf -o build/test-weights/model.safetensors
  weights=(--weights build/test-weights/model.safetensors)
fi
build/mimi roundtrip examples/hello.wav -o build/hello.roundtrip.wav --force "${weights[@]}"
echo "setup: done. Try: build/mimi encode examples/hello.wav -o build/hello.mimi ${weights[*]}"
