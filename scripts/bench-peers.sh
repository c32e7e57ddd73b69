#!/usr/bin/env bash
# mimi beside the other Mimi implementations on this CPU, in one run (a benchmark, not a test: CI
# does not run it). Compares:
#   - mimi (`mimi bench --input`, compute time per call);
#   - Kyutai's official `moshi` package on a PyPI PyTorch wheel;
#   - Hugging Face transformers' MimiModel;
#   - Kyutai's Rust `rustymimi` (when it installs).
# All get the same weights (the full-size PRNG test weights, written in both dialects), the same
# input (the reference speech case as a 24 kHz s16 WAV, tiled to each length), the same thread
# count and n_q. The systems take turns, round by round, so a noisy neighbour hits all of them.
# Prints the CPU model and ISA, mimi's measured FMA peak, and one table: min / median / max x real
# time per system, direction and length, and each median's ratio to mimi's.
#
#   scripts/bench-peers.sh [--seconds 10,60] [--rounds 3] [--runs 2] [--threads 2] [--systems mimi,moshi,hf,rustymimi]
#
# The Python side lives in build/peers-venv (created here; pip from PyPI). The peers are never a
# dependency of mimi.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=10,60 rounds=3 runs=2 threads=2 systems=mimi,moshi,hf,rustymimi
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --runs) runs=$2; shift ;;
    --threads) threads=$2; shift ;;
    --systems) systems=$2; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x build/mimi ] || bash scripts/build.sh
V=build/peers-venv
[ -x $V/bin/python ] || python3 -m venv $V
$V/bin/python -c 'import torch, moshi, transformers' 2>/dev/null || $V/bin/pip install -q torch moshi transformers
if [[ ",$systems," == *",rustymimi,"* ]] && ! $V/bin/python -c 'import rustymimi' 2>/dev/null; then
  $V/bin/pip install -q rustymimi || { echo "bench-peers: rustymimi does not install here; left out" >&2; systems=${systems//rustymimi/}; }
fi

W=build/peers-weights
mkdir -p $W/hf
[ -f $W/moshi.safetensors ] || build/mimi gen-weights --config full --dialect moshi -o $W/moshi.safetensors -q
[ -f $W/hf/model.safetensors ] || build/mimi gen-weights --config full --dialect hf -o $W/hf/model.safetensors -q
cp tests/data/full/config.json $W/hf/config.json
# the speech case's input as a 24 kHz mono s16 WAV, the one input everybody tiles
$V/bin/python - tests/data/full/cases/speech.safetensors $W/speech.wav <<'EOF'
import sys, wave
import numpy as np
from safetensors.numpy import load_file
x = load_file(sys.argv[1])["input"].reshape(-1)
with wave.open(sys.argv[2], "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(24000)
    w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
EOF

R=$(mktemp /tmp/bench-peers.XXXXXX)
peak=""
for round in $(seq "$rounds"); do
  for s in ${systems//,/ }; do
    echo "== round $round/$rounds: $s" >&2
    case $s in
      mimi)
        out=$(build/mimi bench --weights $W/hf/model.safetensors --config $W/hf/config.json --input $W/speech.wav \
                --seconds "$seconds" --runs "$runs" --threads "$threads" --latency-frames 0 --json)
        peak=$(echo "$out" | $V/bin/python -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["peak_gflops"])')
        echo "$out" | $V/bin/python -c '
import json, sys
for r in json.load(sys.stdin)["results"]:
    print(json.dumps({"system": "mimi", "direction": r["direction"], "seconds": r["audio_s"], "times": r["times"]}))' >>"$R" ;;
      moshi) $V/bin/python scripts/peers_bench.py --system moshi --weights $W/moshi.safetensors --input $W/speech.wav \
               --seconds "$seconds" --runs "$runs" --threads "$threads" >>"$R" ;;
      hf) $V/bin/python scripts/peers_bench.py --system hf --weights $W/hf --input $W/speech.wav \
            --seconds "$seconds" --runs "$runs" --threads "$threads" >>"$R" ;;
      rustymimi) $V/bin/python scripts/peers_bench.py --system rustymimi --weights $W/moshi.safetensors \
                   --input $W/speech.wav --seconds "$seconds" --runs "$runs" --threads "$threads" >>"$R" ;;
      *) echo "unknown system $s" >&2; exit 2 ;;
    esac
  done
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
isa=$(build/mimi info --json | $V/bin/python -c 'import json,sys; print(json.load(sys.stdin)["cpu_isa"])')
versions=$($V/bin/python -c '
import importlib.metadata as m
print(", ".join(f"{p} {m.version(p)}" for p in ("torch", "moshi", "transformers", "rustymimi") if __import__("importlib").util.find_spec(p)))')
echo
echo "== bench-peers $(date -u +%Y-%m-%dT%H:%MZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?'): $(nproc) cores, $cpu"
echo "   mimi ISA $isa, measured FMA peak ${peak:-?} GFLOP/s; $threads thread(s), n_q 8, f32, full-size PRNG weights;"
echo "   $rounds rounds x $runs runs after a warm-up per system; $versions"
$V/bin/python - "$R" <<'EOF'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault((r["direction"], r["seconds"], r["system"]), []).extend(r["times"])
med = {k: statistics.median(v) for k, v in rows.items()}
print(f"{'direction':9} {'audio':>6}  {'system':10} {'min':>7} {'median':>7} {'max':>7}  x real time (min/median/max)   vs mimi")
for (d, s, sysname) in sorted(rows, key=lambda k: (k[0] != "encode", k[1], k[2] != "mimi", k[2])):
    t = rows[(d, s, sysname)]
    rt = lambda x: s / x
    ref = med.get((d, s, "mimi"))
    ratio = f"{med[(d, s, sysname)] / ref:6.2f}x slower" if ref and sysname != "mimi" else ""
    print(f"{d:9} {s:5.0f}s  {sysname:10} {min(t):7.3f} {statistics.median(t):7.3f} {max(t):7.3f}  "
          f"{rt(max(t)):6.1f} {rt(statistics.median(t)):6.1f} {rt(min(t)):6.1f}      {ratio}")
EOF
rm -f "$R"
