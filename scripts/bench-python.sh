#!/usr/bin/env bash
# The Python module beside the CLI and the peers, in one run (a benchmark, not a test; issue 30):
# a datasets.map-style loop over a corpus of clips of 2-30 s (the reference speech case tiled from
# random offsets; same clips, weights, threads and n_q for all), each system in its own process,
# taking turns round by round. Prints the CPU, one table of x real time (min / median / max over
# rounds) per system and direction, and each median's ratio to the module's.
#
#   scripts/bench-python.sh [--clips 200] [--rounds 2] [--threads 2] [--systems mimi,cli,moshi,hf,rustymimi]
#
# The module is installed into build/pyenv (pip install .), the peers into build/peers-venv
# (scripts/bench-peers.sh's); neither is a dependency of mimi.
set -euo pipefail
cd "$(dirname "$0")/.."
clips=200 rounds=2 threads=2 systems=mimi,cli,moshi,hf,rustymimi
while [ $# -gt 0 ]; do
  case "$1" in
    --clips) clips=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --threads) threads=$2; shift ;;
    --systems) systems=$2; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x build/mimi ] || bash scripts/build.sh
[ -x build/pyenv/bin/python ] || python3 -m venv build/pyenv
build/pyenv/bin/python -c 'import mimi' 2>/dev/null || build/pyenv/bin/pip install -q numpy .
V=build/peers-venv
if [[ ",$systems," =~ ,(moshi|hf|rustymimi), ]]; then
  [ -x $V/bin/python ] || python3 -m venv $V
  $V/bin/python -c 'import torch, moshi, transformers' 2>/dev/null || $V/bin/pip install -q torch moshi transformers
  if [[ ",$systems," == *",rustymimi,"* ]] && ! $V/bin/python -c 'import rustymimi' 2>/dev/null; then
    $V/bin/pip install -q rustymimi || { echo "bench-python: rustymimi does not install here; left out" >&2; systems=${systems//rustymimi/}; }
  fi
fi
W=build/peers-weights
mkdir -p $W/hf
[ -f $W/moshi.safetensors ] || build/mimi gen-weights --config full --dialect moshi -o $W/moshi.safetensors -q
[ -f $W/hf/model.safetensors ] || build/mimi gen-weights --config full --dialect hf -o $W/hf/model.safetensors -q
cp tests/data/full/config.json $W/hf/config.json
C=build/bench-python/clips-$clips
if [ ! -d $C ]; then
  mkdir -p $C.tmp
  build/pyenv/bin/python - tests/data/full/cases/speech.safetensors $C.tmp "$clips" <<'PY'
import json, struct, sys, wave
import numpy as np
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(src, "rb") as f:
    h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    b, e = h["input"]["data_offsets"]
    f.seek(b, 1)
    x = np.frombuffer(f.read(e - b), "<f4")
rng = np.random.default_rng(30)
for i in range(n):
    T = int(rng.uniform(2, 30) * 24000)
    start = int(rng.integers(0, x.size))
    clip = np.tile(np.roll(x, -start), T // x.size + 1)[:T]
    with wave.open(f"{out}/{i:04d}.wav", "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(24000)
        w.writeframes((np.clip(clip, -1, 1) * 32767).astype("<i2").tobytes())
PY
  mv $C.tmp $C
fi
echo "== $(date -u +%Y-%m-%dT%H:%MZ) $(git rev-parse --short HEAD) $(nproc) cores:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(ls $C | wc -l) clips, $threads threads"
build/mimi bench --seconds 1 --runs 1 --threads "$threads" --latency-frames 0 2>&1 | grep -m1 'peak' || true
R=$(mktemp /tmp/bench-python.XXXXXX)
for round in $(seq "$rounds"); do
  for s in ${systems//,/ }; do
    case $s in
      mimi) build/pyenv/bin/python scripts/bench_python.py --system mimi --weights $W/hf/model.safetensors --clips $C --threads "$threads" ;;
      cli) build/pyenv/bin/python scripts/bench_python.py --system cli --weights $W/hf/model.safetensors --clips $C --threads "$threads" ;;
      hf) $V/bin/python scripts/bench_python.py --system hf --weights $W/hf --clips $C --threads "$threads" ;;
      *) $V/bin/python scripts/bench_python.py --system "$s" --weights $W/moshi.safetensors --clips $C --threads "$threads" ;;
    esac >>"$R" || echo "bench-python: $s failed in round $round" >&2
  done
done
build/pyenv/bin/python - "$R" <<'PY'
import collections, json, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs[(r["direction"], r["system"])].append(r["audio_s"] / r["wall_s"])
print(f"{'direction':<10}{'system':<11}{'x real time (min / median / max)':>34}{'vs the module':>16}")
for d in ("encode", "decode"):
    base = sorted(runs.get((d, "mimi"), [0]))
    bm = base[len(base) // 2]
    for (dd, s), v in sorted(runs.items()):
        if dd != d:
            continue
        v = sorted(v)
        med = v[len(v) // 2]
        ratio = "" if s == "mimi" or not med else f"{bm / med:.2f}x slower" if med < bm else f"{med / bm:.2f}x faster"
        print(f"{d:<10}{s:<11}{v[0]:>12.1f}{med:>10.1f}{v[-1]:>10.1f}{ratio:>18}")
PY
rm -f "$R"
