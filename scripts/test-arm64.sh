#!/usr/bin/env bash
# The aarch64 build, cross-compiled here (cmake/aarch64-linux-gnu.cmake) and tested under qemu-user:
# the NEON kernels against the reference (the op table, the kernel and vector-math sweeps), the
# tiny, tiny-window and a short full-size golden case, streaming == offline, and the CLI on tiny
# weights. qemu runs about 40x slower than the machine, so the long sweeps stay on x86 (the same
# code, compiled for both): tests/CMakeLists.txt's *_qemu subsets say what is left out. Installs
# the cross compiler, qemu-user and the arm64 -dev packages (multiarch) when missing. Records its
# counts through scripts/lib-suite.sh (called by scripts/test.sh, or alone).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib-suite.sh

install_cross() {
  local SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64 || return 1
  bash scripts/install-deps.sh g++-aarch64-linux-gnu qemu-user libsndfile1-dev:arm64 libsoxr-dev:arm64 \
    libspdlog-dev:arm64 libfmt-dev:arm64
}

arm64_build() {
  # (ccache where the caller set it up: scripts/test.sh exports CMAKE_CXX_COMPILER_LAUNCHER)
  cmake -S . -B build-arm64 -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIMI_CUDA=OFF \
    -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake >/dev/null &&
    cmake --build build-arm64 -j "${MIMI_JOBS:-2}" --target mimi test_kernels test_vmath test_ops test_golden \
      test_streaming test_cli
}

step "aarch64 cross toolchain" install_cross &&
  step "aarch64 build" arm64_build &&
  suite arm64-qemu build-arm64 --output-on-failure -j "${MIMI_TEST_JOBS:-2}" \
    -R '^(kernels_qemu|vmath|ops_qemu|golden_tiny_moshi|golden_tiny_hf|golden_tiny-window_moshi|golden_full_short|streaming_qemu|cli_qemu)$'
if [ -n "${MIMI_SUITE_OWNER:-}" ]; then closing_line; fi
