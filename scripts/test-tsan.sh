#!/usr/bin/env bash
# ThreadSanitizer over the GPU kernels on the emulated device (MIMI_GPU_EMULATE, MIMI_SANITIZE=thread):
# every block of every kernel on real threads (MIMI_EMU_EXEC=threads-all), so a missing
# __syncthreads()/__syncwarp() or a non-atomic shared update is reported as a data race, which
# fails the test (TSan's exit code 66). test_gpu_emulator also checks that such a race IS reported.
# Also the reader threads of `encode --batch` (app/engine_io/read_ahead.h, test_read_ahead), and the
# CPU kernels' worker teams (kernels/cpu/thread_pool.h: test_thread_pool, and the op table on them).
# Records its counts through scripts/lib-suite.sh (called by scripts/test.sh, or alone).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib-suite.sh

tsan_build() {
  cmake -S . -B build-gpu-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIMI_GPU_EMULATE=ON -DMIMI_CUDA=OFF \
    -DMIMI_SANITIZE=thread >/dev/null &&
    cmake --build build-gpu-tsan -j "${MIMI_JOBS:-2}" --target test_ops test_gpu_kernels test_gpu_emulator test_read_ahead test_thread_pool
}
export MIMI_EMU_EXEC=threads-all TSAN_OPTIONS="second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
step "emulated GPU build (ThreadSanitizer)" tsan_build &&
  suite tsan-emulated-gpu build-gpu-tsan --output-on-failure -R '^(ops_gpu|gpu_kernels|gpu_emulator|gpu_emulator_warp64|read_ahead|thread_pool|ops_cpu_threads)$'
if [ -n "${MIMI_SUITE_OWNER:-}" ]; then closing_line; fi
