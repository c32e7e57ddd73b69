#!/usr/bin/env bash
# ASan + UBSan (no recovery: the first report fails the test) build in ./build-asan, running the
# fast suites: kernels, weights, engine, tiny and tiny-window golden cases, CLI, the bad-input
# catalogue and the fuzz regression inputs, and, because it is a MIMI_GPU_EMULATE build, the op
# table on the GPU kernels (ops_gpu), their properties and the emulator's tests on the emulated
# device (threads executor). The full-size
# golden cases and the long streaming test run in the main build only (minutes under ASan, the
# same code paths as the tiny cases); the emulated golden runs in scripts/test.sh's emulated suite.
# The class sweeps (ctest classes) run mimi through an LD_PRELOAD errno shim, which ASan refuses
# to come after; the sanitized catalogue runs the same binary over bad inputs.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib-suite.sh
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Only the binaries of the suites run below (the classes sweeps, the streaming and GPU-CLI tests
# are excluded there, so they are not built here: about a third of the build). A test whose binary
# is missing from this list shows as "Not Run" and fails the suite, never passes silently.
asan_targets="mimi test_kernels test_vmath test_ops test_weights test_engine test_golden test_cli test_read_ahead test_catalogue
  test_batch test_threads test_thread_pool fuzz_regressions test_dataset test_weights_frozen test_weights_cache test_gpu_kernels
  test_gpu_emulator"
asan_build() {
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIMI_SANITIZE=ON -DMIMI_CUDA=OFF -DMIMI_GPU_EMULATE=ON "$@" >/dev/null &&
    cmake --build build-asan -j "${MIMI_JOBS:-2}" --target $asan_targets
}
step "ASan+UBSan build" asan_build "$@" || exit 1
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0}
# Two tests at a time: most of this suite is instrumented processes starting and doing file work
# on one core (488 -> 279 s, 2 cores; the main suite gains little, -j1).
suite sanitize build-asan --output-on-failure -j "${MIMI_SANITIZE_JOBS:-2}" -E 'golden_full|golden_devicepath|golden_gpu|streaming|cli_gpu|batch_gpu|batch_full|classes'
if [ -n "${MIMI_SUITE_OWNER:-}" ]; then closing_line; fi
