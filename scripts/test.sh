#!/usr/bin/env bash
# The test command: installs missing build deps, then runs every suite and ends with one closing
# line for the whole run ("N passed, N failed, N skipped"); exits non-zero when anything failed.
#   1. HIP backend, compile only (scripts/build-hip.sh; skipped without hipcc)
#   2. ASan+UBSan build running the fast suites (scripts/test-sanitize.sh)
#   3. the GPU kernels on CPU threads (MIMI_GPU_EMULATE): the emulator's own tests (warp 32 and 64,
#      graphs), kernel sweeps, golden tiny/tiny-window and full on its short cases, streaming and
#      the CLI on --device cuda; then the kernel tests again under ThreadSanitizer (test-tsan.sh)
#   4. fuzz smoke: every libFuzzer target (tests/fuzz/) for 10 s from its seeds
#   5. the aarch64 (NEON) build, cross-compiled and run under qemu-user: kernel and vector-math
#      sweeps, the op table's smaller cases, golden tiny/tiny-window/full-short, streaming and the CLI
#      on tiny weights (scripts/test-arm64.sh)
#   6. the Python module: `pip install .` into build/pyenv and its pytest suite (scripts/test-python.sh)
#   7. the main build (a CUDA build where nvcc is found: then also packed as the GPU bundle and run
#      through the bundle's loader, tests/bundle_test.sh) and its whole ctest suite (kernels,
#      weights, engine, golden parity for tiny / tiny-window / full in both weight dialects,
#      streaming, CLI, bad-input catalogue) - last, so its ctest summary is the last test-runner
#      summary before the closing line.
# MIMI_TEST_QUICK=1 runs only steps 6 and 7. Extra arguments go to the main ctest.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib-suite.sh

bash scripts/install-deps.sh || exit 1

if [ "${MIMI_TEST_QUICK:-0}" != 1 ]; then
  step "HIP backend (compile only)" bash scripts/build-hip.sh
  bash scripts/test-sanitize.sh  # records its own build step and tests
  # The GPU kernel source compiled by g++ and run on CPU threads (MIMI_GPU_EMULATE, docs: kernels/gpu/
  # emulate.h): the op table against kernels/ref (ops_gpu), the GPU kernels' bitwise properties
  # and the small golden configs on the device plans.
  emu_build() {
    cmake -S . -B build-gpu-emu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIMI_GPU_EMULATE=ON -DMIMI_CUDA=OFF >/dev/null &&
      cmake --build build-gpu-emu -j "${MIMI_JOBS:-2}" --target mimi test_ops test_gpu_kernels test_gpu_emulator test_golden \
        test_streaming test_cli_gpu test_batch
  }
  step "emulated GPU build" emu_build &&
    suite emulated-gpu build-gpu-emu --output-on-failure \
      -R '^(ops_gpu|ops_gpu_subset|gpu_kernels|gpu_emulator|gpu_emulator_warp64|golden_gpu_tiny|golden_gpu_full_short|streaming_gpu|cli_gpu|batch_gpu)$'
  bash scripts/test-tsan.sh  # the same kernels under ThreadSanitizer; records its own steps
  # One count per target (fuzz.sh records them); a build failure before any target counts as one.
  before=$(wc -l <"$MIMI_SUITE_COUNTS")
  echo "=== fuzz smoke (every libFuzzer target, 10 s each)"
  if ! bash scripts/fuzz.sh --smoke && [ "$(wc -l <"$MIMI_SUITE_COUNTS")" -eq "$before" ]; then
    record "fuzz smoke" 0 1 0
  fi
  bash scripts/test-arm64.sh  # the aarch64 cross build under qemu-user; records its own steps
fi

# The main build and `pip install .` (step 6) compile the same engine sources: built
# position-independent (as the module must be), by the same compiler name (a hit needs it;
# scikit-build-core would otherwise take Python's CXX) and through ccache where it is installed,
# the module's build takes the main build's objects from the cache (about 30 s instead of 5 min
# on 2 cores). Depend mode: ccache hashes the compiler's own -MD list instead of preprocessing
# every file a second time on a miss.
main_args=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_DIR=${CCACHE_DIR:-$PWD/build/ccache} CCACHE_DEPEND=1 CXX=${CXX:-g++} CC=${CC:-gcc} \
    CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  main_args=(-DCMAKE_POSITION_INDEPENDENT_CODE=ON)
fi
main_built=0
step "main build" bash scripts/build.sh "${main_args[@]}" && main_built=1
# The path the lent GPU machine runs (issue 27): the main build (a CUDA build where nvcc is found)
# packed with its loader and libraries by scripts/gpu-bundle.sh, run through that loader here, and
# gpu-check.sh's CPU dry run through it.
if [ "${MIMI_TEST_QUICK:-0}" != 1 ]; then
  if [ $main_built = 1 ] && build/mimi info --json 2>/dev/null | grep -q '"gpu_backend":"CUDA"'; then
    step "GPU bundle packing" env MIMI_GPU_BUNDLE_FROM=build bash scripts/gpu-bundle.sh &&
      check "GPU bundle" bash tests/bundle_test.sh
  else
    echo "=== GPU bundle: the main build has no CUDA (no nvcc), skipped"
    record "GPU bundle" 0 0 1
  fi
fi
# The Python module (pip install ., tests/python against the main build's CLI).
[ $main_built = 1 ] && bash scripts/test-python.sh
[ $main_built = 1 ] && suite main build --output-on-failure -j "${MIMI_TEST_JOBS:-1}" "$@"

closing_line
