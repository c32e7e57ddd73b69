#!/usr/bin/env bash
# Start-up benchmark (not a test, issue 29): what a process start costs when a shell runs mimi
# once per file. Full-size PRNG test weights, warm page cache; each scenario R times (default 5),
# interleaved, wall seconds min/median/max:
#   loop-1s     a shell loop of N (default 20) `mimi encode` on 1 s clips, the prepared-weights
#               cache warm
#   one-1s      one `mimi encode` over the same N clips (-o DIR/)
#   loop-1s-nc  the loop with --no-cache (the weights read by every process)
#   loop-10s / one-10s   the same on 10 s clips
#   single-1s   one 1 s encode: wall, and the load time the --json record gives (load_s)
#   first-run   one 1 s encode with an empty cache folder (it builds the prepared weights)
# then the memory of P (default 4) concurrent 20 s encodes, sampled every 5 ms from
# /proc/PID/smaps_rollup: each process's peak anonymous (private) memory and the peak of the
# sum of their PSS (the memory they hold together), against one process alone.
#   scripts/bench-startup.sh [--runs R] [--files N] [--procs P] [--bin PATH] [--keep DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=5 files=20 procs=4 bin=build/mimi keep=
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --procs) procs=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    *) echo "usage: $0 [--runs R] [--files N] [--procs P] [--bin PATH] [--keep DIR]" >&2; exit 2 ;;
  esac
done
if [ "$bin" = build/mimi ] && [ ! -x build/mimi ]; then bash scripts/build.sh; fi
[ -x "$bin" ] || { echo "no executable $bin" >&2; exit 2; }
if [ -n "$keep" ]; then dir=$keep; mkdir -p "$dir"; else dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT; fi
[ -s "$dir/full.safetensors" ] || "$bin" gen-weights --config full -o "$dir/full.safetensors" -q -f
mkwav() {  # mkwav PATH SECONDS SEED
  python3 - "$@" <<'PY'
import math, random, struct, sys, wave
path, seconds, seed, sr = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), 24000
random.seed(seed)
f = 90 + 20 * seed
out = bytearray()
for i in range(int(seconds * sr)):
    t = i / sr
    v = 0.2 * sum(math.sin(2 * math.pi * f * h * t) / h for h in range(1, 5)) + 0.01 * (random.random() - 0.5)
    out += struct.pack('<h', int(max(-1.0, min(1.0, v)) * 32000))
with wave.open(path, 'wb') as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(sr); w.writeframes(bytes(out))
PY
}
for s in 1 10; do
  mkdir -p "$dir/c$s"
  for ((i = 0; i < files; ++i)); do [ -s "$dir/c$s/f$i.wav" ] || mkwav "$dir/c$s/f$i.wav" "$s" "$i"; done
done
[ -s "$dir/in20.wav" ] || mkwav "$dir/in20.wav" 20 1
export MIMI_CACHE_DIR=$dir/cache
W=(--weights "$dir/full.safetensors")

now() { date +%s.%N; }
loop() {  # loop SECONDS [EXTRA...]
  local s=$1; shift
  for f in "$dir/c$s"/*.wav; do "$bin" encode "$f" "${W[@]}" -o "$dir/o.mimi" -f -q "$@"; done
}
scenario() {  # prints the wall seconds of one run of scenario $1
  local t0 t1
  t0=$(now)
  case "$1" in
    loop-1s) loop 1 ;;
    one-1s) "$bin" encode "$dir/c1"/*.wav "${W[@]}" -o "$dir/out1/" -f -q ;;
    loop-1s-nc) loop 1 --no-cache ;;
    loop-10s) loop 10 ;;
    one-10s) "$bin" encode "$dir/c10"/*.wav "${W[@]}" -o "$dir/out10/" -f -q ;;
    single-1s) "$bin" encode "$dir/c1/f0.wav" "${W[@]}" -o "$dir/s.mimi" -f -q --json > "$dir/single.json" ;;
    first-run) rm -rf "$dir/cache-first"; MIMI_CACHE_DIR=$dir/cache-first "$bin" encode "$dir/c1/f0.wav" "${W[@]}" -o "$dir/s.mimi" -f -q ;;
  esac
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

isa=$(grep -q -w avx512f /proc/cpuinfo && echo "AVX-512 (avx512f)" || { grep -q -w avx2 /proc/cpuinfo && echo "AVX2, no AVX-512" || echo "no AVX2"; })
echo "== $(date -u +%Y-%m-%dT%H:%MZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(nproc) cores:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $isa"
echo "binary $bin, $files files a loop, $runs interleaved rounds; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" encode "$dir/c1/f0.wav" "${W[@]}" -o "$dir/s.mimi" -f -q  # builds the cache, warms the page cache
scen=(loop-1s one-1s loop-1s-nc loop-10s one-10s single-1s first-run)
declare -A times loads
for ((r = 0; r < runs; ++r)); do
  for s in "${scen[@]}"; do
    times[$s]+="$(scenario "$s") "
    [ "$s" = single-1s ] && loads[$s]+="$(grep -o '"load_s":[0-9.e-]*' "$dir/single.json" | cut -d: -f2) "
  done
done
stats() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "%d %.3f %.3f %.3f\n", NR, v[1], m, v[NR]}'; }
printf '%-58s %4s %8s %8s %8s\n' scenario runs min_s median_s max_s
declare -A med
for s in "${scen[@]}"; do
  case "$s" in
    loop-1s) label="loop: $files x mimi encode, 1 s clips (cache warm)" ;;
    one-1s) label="one mimi encode over the $files 1 s clips" ;;
    loop-1s-nc) label="loop, 1 s clips, --no-cache" ;;
    loop-10s) label="loop: $files x mimi encode, 10 s clips" ;;
    one-10s) label="one mimi encode over the $files 10 s clips" ;;
    single-1s) label="one 1 s encode (whole process)" ;;
    first-run) label="one 1 s encode, empty cache folder (builds it)" ;;
  esac
  read -r n lo m hi <<<"$(echo "${times[$s]}" | stats)"
  med[$s]=$m
  printf '%-58s %4d %8.3f %8.3f %8.3f\n' "$label" "$n" "$lo" "$m" "$hi"
done
read -r n lo m hi <<<"$(echo "${loads[single-1s]}" | stats)"
printf '%-58s %4d %8.3f %8.3f %8.3f\n' "  of which loading the weights (load_s)" "$n" "$lo" "$m" "$hi"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
echo "loop / one process: 1 s clips $(ratio "${med[loop-1s]}" "${med[one-1s]}") (target <= 1.3x), 10 s clips $(ratio "${med[loop-10s]}" "${med[one-10s]}") (target <= 1.1x); --no-cache loop / cached loop $(ratio "${med[loop-1s-nc]}" "${med[loop-1s]}")"

# Memory: P concurrent 20 s encodes against one alone.
peak() {  # peak P: runs P concurrent encodes; prints "max_anon_kB_per_process sum_rss_peak_kB"
  local p=$1 pids=() i
  for ((i = 0; i < p; ++i)); do "$bin" encode "$dir/in20.wav" "${W[@]}" -o "$dir/m$i.mimi" -f -q & pids+=($!); done
  local max_anon=0 max_sum=0
  while :; do
    local alive=0 sum=0 pid a r
    for pid in "${pids[@]}"; do
      if read -r a r < <(awk '/^Anonymous:/{a=$2} /^Pss:/{r=$2} END{print a+0, r+0}' "/proc/$pid/smaps_rollup" 2>/dev/null); then
        [ "$r" -gt 0 ] && alive=1
        [ "$a" -gt "$max_anon" ] && max_anon=$a
        sum=$((sum + r))
      fi
    done
    [ "$sum" -gt "$max_sum" ] && max_sum=$sum
    [ "$alive" = 1 ] || break
    sleep 0.005
  done
  wait "${pids[@]}"
  echo "$max_anon $max_sum"
}
read -r a1 r1 <<<"$(peak 1)"
read -r ap rp <<<"$(peak "$procs")"
# (PSS: shared pages divided among the processes mapping them, so the sum is the memory they hold)
echo "memory, 20 s encodes: 1 process: anonymous $((a1 / 1024)) MB, PSS $((r1 / 1024)) MB; $procs concurrent: each at most $((ap / 1024)) MB anonymous (target <= 80 MB), PSS summed $((rp / 1024)) MB = $(ratio "$rp" "$r1") one (target <= 1.5x)"
