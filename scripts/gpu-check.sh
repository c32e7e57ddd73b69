#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build with the CUDA kernels and run every GPU kernel against
# the naive CPU references (tests/test_gpu_kernels.cpp), then the CPU suite's kernel tests.
# The engine does not run plans on the GPU yet, so there is no GPU benchmark here yet.
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
bash scripts/install-deps.sh >/dev/null 2>&1 || true
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIMI_CUDA=ON ${CUDAARCHS:+-DCMAKE_CUDA_ARCHITECTURES=$CUDAARCHS} >/dev/null &&
  cmake --build build-gpu -j "$(nproc)" --target test_gpu_kernels test_kernels || exit 1
build-gpu/tests/test_gpu_kernels; rc=$?
build-gpu/tests/test_kernels | tail -3
echo "gpu-check: test_gpu_kernels exit code $rc (0 = every GPU kernel matches the references, 77 = no device)"
exit $rc
