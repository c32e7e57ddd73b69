#!/usr/bin/env bash
# Oversubscription benchmark (not a test): what sharing the cores with a second mimi process
# costs. On an N-second input (default 20 s, full-size PRNG test weights), interleaved, each
# scenario R times (default 3):
#   (a) one `mimi encode` alone, default threads
#   (b) two concurrent, default threads (what `parallel -j2` or two Slurm tasks on a node give)
#   (c) two concurrent, --threads 1 each (the best split on 2 cores)
#   (d) two concurrent, --threads 2 each
# and prints wall seconds (min/median/max; for a pair, until both have finished) and the ratio
# of each median to the median of (c).
#   scripts/bench-oversub.sh [--seconds N] [--runs R] [--bin PATH] [--keep DIR]
# --bin compares another build (e.g. a copy of the binary from before a change); --keep reuses
# DIR for the weights and input instead of a fresh temporary directory. The environment is
# passed through (e.g. MIMI_SPIN_US=10000 to see what a longer spin of the idle workers costs).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=20 runs=3 bin=build/mimi keep=
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds N] [--runs R] [--bin PATH] [--keep DIR]" >&2; exit 2 ;;
  esac
done
if [ "$bin" = build/mimi ] && [ ! -x build/mimi ]; then bash scripts/build.sh; fi
[ -x "$bin" ] || { echo "no executable $bin" >&2; exit 2; }
if [ -n "$keep" ]; then dir=$keep; mkdir -p "$dir"; else dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT; fi
[ -s "$dir/full.safetensors" ] || "$bin" gen-weights --config full -o "$dir/full.safetensors" -q -f
[ -s "$dir/in$seconds.wav" ] || python3 - "$dir/in$seconds.wav" "$seconds" <<'PY'
import math, random, struct, sys, wave
path, seconds, sr = sys.argv[1], float(sys.argv[2]), 24000
random.seed(1)
out = bytearray()
for i in range(int(seconds * sr)):  # a gliding harmonic tone and a little noise
    t = i / sr
    f0 = 110 + 50 * math.sin(2 * math.pi * 0.3 * t)
    v = 0.2 * sum(math.sin(2 * math.pi * f0 * h * t) / h for h in range(1, 5)) + 0.01 * (random.random() - 0.5)
    out += struct.pack('<h', int(max(-1.0, min(1.0, v)) * 32000))
with wave.open(path, 'wb') as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(sr); w.writeframes(bytes(out))
PY

enc() {  # enc TAG THREADS
  "$bin" encode "$dir/in$seconds.wav" --weights "$dir/full.safetensors" -o "$dir/out-$1.mimi" -f -q --threads "$2"
}
now() { date +%s.%N; }
scenario() {  # prints the wall seconds of one run of scenario $1
  local t0 t1
  t0=$(now)
  case "$1" in
    a) enc a 0 ;;
    b) enc b1 0 & enc b2 0 & wait ;;
    c) enc c1 1 & enc c2 1 & wait ;;
    d) enc d1 2 & enc d2 2 & wait ;;
  esac
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

isa=$(grep -q -w avx512f /proc/cpuinfo && echo "AVX-512 (avx512f)" || { grep -q -w avx2 /proc/cpuinfo && echo "AVX2, no AVX-512" || echo "no AVX2"; })
echo "== $(date -u +%Y-%m-%dT%H:%MZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(nproc) cores:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $isa"
echo "binary $bin, ${seconds} s input, $runs interleaved rounds; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "${MIMI_SPIN_US:-}${OMP_NUM_THREADS:-}" ] &&
  echo "environment: MIMI_SPIN_US=${MIMI_SPIN_US:-} OMP_NUM_THREADS=${OMP_NUM_THREADS:-}"
enc warmup 0  # page cache, CPU frequency
declare -A times
for ((r = 0; r < runs; ++r)); do
  for s in a b c d; do times[$s]+="$(scenario $s) "; done
done

stats() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "%d %.3f %.3f %.3f\n", NR, v[1], m, v[NR]}'; }
read -r _ _ best _ <<<"$(echo "${times[c]}" | stats)"
printf '%-44s %4s %8s %8s %8s %9s\n' scenario runs min_s median_s max_s "x_best(c)"
for s in a b c d; do
  case "$s" in
    a) label="(a) 1 process alone, default threads" ;;
    b) label="(b) 2 concurrent, default threads" ;;
    c) label="(c) 2 concurrent, --threads 1 each" ;;
    d) label="(d) 2 concurrent, --threads 2 each" ;;
  esac
  read -r n lo med hi <<<"$(echo "${times[$s]}" | stats)"
  printf '%-44s %4d %8.3f %8.3f %8.3f %8.2fx\n' "$label" "$n" "$lo" "$med" "$hi" "$(awk -v a="$med" -v b="$best" 'BEGIN { print a / b }')"
done
