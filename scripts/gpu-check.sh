#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, one command: build with CUDA (or use the prebuilt binaries of
# scripts/gpu-bundle.sh, carried as .gpu-bundle/ or .gpu-bundle.tar.xz, where the machine lacks
# the build deps), run every GPU kernel against the naive CPU references (also under
# compute-sanitizer memcheck and racecheck), the golden suite, streaming and batched checks on the
# GPU, then time encode/decode (10 s and 60 s inputs, batch 1, 8, 64, 256, streaming per-frame
# latency) and, last, HF's float32 MimiModel where python3 has transformers.
#
# Made for a device machine lent for minutes: every phase runs under its own `timeout`, each
# summary line is written to $OUT/gpu-check-summary.txt as soon as it is known (a run killed at
# its limit still leaves its table), phases past the script's budget (MIMI_GPU_CHECK_BUDGET_S,
# default 450 s) are skipped and say so. Exit status: that of the first failing phase, a timed-out
# one included (124); 77 when there is no device; 2 when there is neither a bundle nor a way to
# build.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${MIMI_GPU_BUILD:-build-gpu}
# A dry run of the whole script on a CPU machine (CI runs it through the bundle: tests/bundle_test.sh):
# MIMI_GPU_CHECK_DEVICE=cpu MIMI_GPU_CHECK_CONFIG=tiny MIMI_GPU_BUILD=build
DEV=${MIMI_GPU_CHECK_DEVICE:-cuda}
CFG=${MIMI_GPU_CHECK_CONFIG:-full}
# the benchmarks' lengths: 10 s and 60 s; a dry run on a CPU (CI) runs every phase at a tenth of
# the work (1 s and 6 s, a tenth of the streamed frames): the script's path is what it checks
if [ "$DEV" = cpu ]; then S1=1 S2=6 SCALE=10; else S1=10 S2=60 SCALE=1; fi
T0=$(date +%s)
BUDGET=${MIMI_GPU_CHECK_BUDGET_S:-450}
SUMMARY=${GPU_CHECK_SUMMARY:-${OUT:-.}/gpu-check-summary.txt}
mkdir -p "$(dirname "$SUMMARY")"
: >"$SUMMARY"
status=0
note() { [ "$status" -eq 0 ] && status=$1; }
line() { printf "%-40s %s\n" "$1" "$2" | tee -a "$SUMMARY"; }  # one summary line, kept at once
elapsed() { echo $(($(date +%s) - T0)); }
echo "== gpu-check ($(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi'))" |
  tee -a "$SUMMARY"

# ---- the binaries: the bundle (unpacked from its .tar.xz if only that came), else a build here
if [ ! -x .gpu-bundle/mimi ] && [ -f .gpu-bundle.tar.xz ]; then
  tar -xJf .gpu-bundle.tar.xz || { line "bundle" "ERROR: .gpu-bundle.tar.xz does not unpack"; exit 2; }
fi
export MIMI_TEST_DATA_DIR="$PWD/tests/data"
if [ -x .gpu-bundle/mimi ]; then
  # prebuilt by scripts/gpu-bundle.sh: run through the bundled loader and libraries (the driver's
  # libcuda still comes from this machine's library path)
  line "binaries" "prebuilt .gpu-bundle"
  libs="$PWD/.gpu-bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/lib/x86_64-linux-gnu:/usr/local/nvidia/lib64:/usr/lib64"
  run_bin() { "$PWD/.gpu-bundle/lib/ld-linux-x86-64.so.2" --library-path "$libs" "$PWD/.gpu-bundle/$1" "${@:2}"; }
  bin_path() { echo "$PWD/.gpu-bundle/$1"; }
else
  if ! command -v nvcc >/dev/null && ! [ -x /usr/local/cuda/bin/nvcc ]; then
    line "binaries" "ERROR: no .gpu-bundle/ (nor .gpu-bundle.tar.xz) and no nvcc to build: run scripts/gpu-bundle.sh here and carry it"
    exit 2
  fi
  if [ ! -x "$B/mimi" ] || [ ! -x "$B/tests/test_ops" ] || [ ! -x "$B/tests/test_gpu_kernels" ] || [ ! -x "$B/tests/test_golden" ] ||
     [ ! -x "$B/tests/test_streaming" ] || [ ! -x "$B/tests/test_batch" ]; then
    bash scripts/install-deps.sh >/dev/null 2>&1 || true
    if ! { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIMI_CUDA=ON \
             -DCMAKE_CUDA_ARCHITECTURES="${CUDAARCHS:-90}" >/dev/null &&
           cmake --build "$B" -j "$(nproc)" --target mimi test_ops test_gpu_kernels test_golden test_streaming test_batch; }; then
      line "binaries" "ERROR: the CUDA build failed"
      exit 2
    fi
  fi
  line "binaries" "built here ($B)"
  run_bin() {
    case "$1" in
      mimi) "$B/mimi" "${@:2}" ;;
      *) "$B/tests/$1" "${@:2}" ;;
    esac
  }
  bin_path() { case "$1" in mimi) echo "$B/mimi" ;; *) echo "$B/tests/$1" ;; esac; }
fi

# phase NAME LIMIT_S CMD...: runs CMD under `timeout`, unless the budget is spent; its exit status
# goes into the summary at once and into the script's status
phase() {
  local name=$1 limit=$2; shift 2
  if [ "$(elapsed)" -ge "$BUDGET" ]; then
    line "$name" "SKIPPED (budget of ${BUDGET} s spent)"
    note 124
    return 124
  fi
  echo "== $name"
  local t=$(date +%s)
  timeout -k 5 "$limit" bash -c '"$@"' _ "$@"  # functions (run_bin, sanitize) are exported below
  local rc=$?
  local took=$(($(date +%s) - t))
  case $rc in
    0) line "$name" "ok (${took} s)" ;;
    124|137) line "$name" "TIMED OUT after ${limit} s"; note 124 ;;
    77) line "$name" "exit 77: no GPU device" ;;
    *) line "$name" "FAILED: exit $rc (${took} s)"; note $rc ;;
  esac
  return $rc
}

export -f run_bin bin_path
export libs B
phase "op table vs references" 120 run_bin test_ops --backend gpu
phase "GPU kernels' bitwise properties" 120 run_bin test_gpu_kernels
if [ "$DEV" != cpu ] && ! run_bin mimi info --json 2>/dev/null | grep -q '"device":"cuda'; then
  why=$(run_bin mimi bench --device cuda --weights tests/data/tiny/weights.hf.safetensors --seconds 1 --runs 1 \
        --latency-frames 0 2>&1 | grep -m1 'error')
  line "device" "NO CUDA DEVICE: ${why:-mimi info lists none}"
  exit 77
fi
phase "golden suite on the GPU" 150 run_bin test_golden "--test-case=golden gpu"
phase "streaming on the GPU" 90 run_bin test_streaming "--test-case=streaming gpu*"
phase "batched == alone on the GPU" 90 run_bin test_batch "--test-case=batch gpu*"
# compute-sanitizer: out-of-bounds/misaligned accesses and shared-memory races, which the CPU
# emulation cannot see between blocks. The kernel test binary needs only glibc and libstdc++, so
# it runs directly (the bundle's loader is for mimi); tried through the loader if that fails to start.
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$CS" ]; then
  # sanitize TOOL BINARY [ARGS...]
  sanitize() {
    "$CS" --tool "$1" --error-exitcode 99 "$(bin_path "$2")" "${@:3}"
    local rc=$?
    if [ $rc -eq 127 ] && [ -x .gpu-bundle/mimi ]; then
      "$CS" --tool "$1" --error-exitcode 99 "$PWD/.gpu-bundle/lib/ld-linux-x86-64.so.2" --library-path "$libs" \
        "$(bin_path "$2")" "${@:3}"
      rc=$?
    fi
    return $rc
  }
  export -f sanitize
  export CS
  phase "compute-sanitizer memcheck (op table)" 150 sanitize memcheck test_ops --backend gpu
  phase "compute-sanitizer memcheck (properties)" 100 sanitize memcheck test_gpu_kernels
  phase "compute-sanitizer racecheck (op table)" 150 sanitize racecheck test_ops --backend gpu
  phase "compute-sanitizer racecheck (properties)" 100 sanitize racecheck test_gpu_kernels
else
  line "compute-sanitizer" "not on this machine"
fi

W=$(mktemp -d)
trap 'rm -rf "$W"; kill $SMI 2>/dev/null' EXIT
SMI=""
phase "$CFG PRNG weights" 60 run_bin mimi gen-weights --config "$CFG" --dialect hf -o "$W/model.safetensors" -q
MEMLOG="$W/mem.csv"  # peak device memory: nvidia-smi sampled beside the benchmarks
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$MEMLOG" 2>/dev/null &
SMI=$!
rtf() { awk -v d="$2" -v s="$3" '$1 == d && $2 == s"s" {print $7}' "$1" 2>/dev/null; }
# bench NAME FILE LIMIT ARGS...: one benchmark; its x real time lines go to the summary at once
bench() {
  local name=$1 file=$2 limit=$3; shift 3
  phase "bench $name" "$limit" bash -c 'set -o pipefail; "$@" | tee "'"$file"'"' _ run_bin_mimi "$@"
  for secs in $S1 $S2; do
    local e=$(rtf "$file" encode $secs)
    [ -n "$e" ] && line "  encode / decode ${secs} s" "$e / $(rtf "$file" decode $secs) x real time"
  done
  grep -o 'encode median.*' "$file" 2>/dev/null | head -1 | while read -r l; do line "  streaming step" "$l"; done
  grep -o 'graphs: .*' "$file" 2>/dev/null | head -1 | while read -r l; do line "  graphs" "$l"; done
}
run_bin_mimi() { run_bin mimi "$@"; }
export -f run_bin_mimi
gb() { echo bench --device "$DEV" --weights "$W/model.safetensors"; }
# 400 single-frame steps at batch 1 (the last ~150 with full windows, captured as graphs); at
# batch 64, 150 steps: a slot is steady only after 125, so 100 never captured a graph
bench "batch 1" "$W/b1.txt" 120 $(gb) --seconds $S1,$S2 --runs 3 --latency-frames $((400 / SCALE))
# (--no-graphs is refused on the CPU, where nothing is captured: the dry run times the same steps)
nographs=""; [ "$DEV" != cpu ] && nographs=--no-graphs
bench "batch 1, --no-graphs" "$W/b1n.txt" 60 $(gb) --seconds $S1 --runs 2 --latency-frames $((400 / SCALE)) $nographs
bench "batch 8" "$W/b8.txt" 60 $(gb) --seconds $S1 --runs 2 --batch 8 --latency-frames 0
bench "batch 64" "$W/b64.txt" 150 $(gb) --seconds $S1,$S2 --runs 2 --batch 64 --latency-frames $((150 / SCALE))
bench "batch 256" "$W/b256.txt" 120 $(gb) --seconds $S1 --runs 1 --batch 256 --latency-frames 0
kill $SMI 2>/dev/null
line "peak device memory (nvidia-smi)" "$(sort -n "$MEMLOG" 2>/dev/null | tail -1) MiB"
bench "CPU, same binary" "$W/cpu.txt" 60 bench --device cpu --weights "$W/model.safetensors" --seconds $S1 --runs 3 --latency-frames 0

# ---- the cost model's predictions for the same workloads (docs/gpu_model_h200.json, made here by
# `mimi gpu-trace` + scripts/gpu_model.py), beside the measured lines above: the first run calibrates it
if [ "$CFG" = full ] && [ -f docs/gpu_model_h200.json ] && command -v python3 >/dev/null; then
  python3 -c "
import json
for r in json.load(open('docs/gpu_model_h200.json'))['results']:
    v = ('%.2f ms per step' % (1e3 * r['predicted_s'])) if 'step_ms' in r else ('%.0f x real time' % r['x_real_time'])
    print('%-40s %s' % ('model: ' + r['workload'], v))
" | tee -a "$SUMMARY"
fi

# ---- last: HF transformers' MimiModel on the same weights (optional; never fails the check)
if [ "$(elapsed)" -lt "$BUDGET" ] && python3 -c "from transformers import MimiModel" 2>/dev/null; then
  echo "== HF transformers MimiModel (float32) on the same weights"
  if hf=$(timeout 120 python3 scripts/hf_mimi_bench.py --weights "$W" --seconds 10 --batch 1,64); then
    echo "$hf" | python3 -c "
import json, sys
for r in json.load(sys.stdin)['results']:
    print('%-40s %.1f x real time (batch total)' % ('HF MimiModel %s, batch %d' % (r['direction'], r['batch']), r['rtf']))
" | tee -a "$SUMMARY"
  else
    line "HF MimiModel" "failed or timed out (not counted)"
  fi
fi
line "gpu-check" "exit $status after $(elapsed) s"
echo "(summary also in $SUMMARY)"
exit $status
