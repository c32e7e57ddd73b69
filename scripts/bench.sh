#!/usr/bin/env bash
# The benchmark, run the same way every time: full-size PRNG test weights (same shapes and FLOPs
# as the real Mimi), n_q 8, 10 s and 60 s inputs, 5 timed runs after a warm-up, 2 threads and 1.
# Prints the tables of `mimi bench` (wall time min/median/max, real-time factor, GFLOP/s, % of
# the measured FMA peak, per-stage breakdown, streaming per-frame latency).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/mimi ] || bash scripts/build.sh
echo "== $(date -u +%Y-%m-%dT%H:%MZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
build/mimi bench --seconds 10,60 --runs 5 --threads 2 "$@"
echo
build/mimi bench --seconds 10,60 --runs 5 --threads 1 --latency-frames 0 "$@"
