#!/usr/bin/env bash
# Compile-only check of the HIP backend (the same kernel source as CUDA, through hipcc for AMD
# gfx90a and gfx1030) into ./build-hip (its GPU test needs an AMD GPU; none here, so it is not run).
# Does nothing without hipcc (install: apt-get install hipcc libamdhip64-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v hipcc >/dev/null 2>&1; then
  echo "build-hip: no hipcc; HIP backend not built"
  exit 0
fi
cmake -S . -B build-hip -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIMI_HIP=ON "$@" >/dev/null
# Only kernels/gpu differs under HIP (MIMI_USE_HIP appears nowhere else): the GPU kernels compiled
# by hipcc and linked into their test binary check the backend; the rest is the same C++ the
# other builds compile.
cmake --build build-hip -j "${MIMI_JOBS:-2}" --target test_gpu_kernels

