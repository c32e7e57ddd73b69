#!/usr/bin/env bash
# The test command: installs missing build deps, builds, runs every test (kernels, weights,
# engine, golden parity for tiny / tiny-window / full in both weight dialects, CLI), then
# compiles the HIP backend too where hipcc is installed (scripts/build-hip.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
(cd build && ctest --output-on-failure -j "${MIMI_TEST_JOBS:-1}" "$@")
bash scripts/build-hip.sh
