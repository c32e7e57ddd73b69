#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, one command: build with CUDA (or use the prebuilt binaries of
# scripts/gpu-bundle.sh, carried as .gpu-bundle/, where the machine lacks the build deps),
# run every GPU kernel against the naive CPU references, run the golden suite on the GPU, then
# time encode/decode (10 s inputs, batch 1 and 64, streaming per-frame latency) and, where
# python3 has transformers' MimiModel, HF's float32 MimiModel on the same weights and lengths.
# Ends with a short table. Exit status: that of the first failing check (77: no device).
set -uo pipefail
cd "$(dirname "$0")/.."
B=${MIMI_GPU_BUILD:-build-gpu}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
export MIMI_TEST_DATA_DIR="$PWD/tests/data"
if [ -x .gpu-bundle/mimi ]; then
  # prebuilt by scripts/gpu-bundle.sh: run through the bundled loader and libraries (the
  # driver's libcuda still comes from this machine's library path)
  echo "gpu-check: using the prebuilt .gpu-bundle"
  libs="$PWD/.gpu-bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/lib/x86_64-linux-gnu:/usr/local/nvidia/lib64:/usr/lib64"
  run_bin() { "$PWD/.gpu-bundle/lib/ld-linux-x86-64.so.2" --library-path "$libs" "$PWD/.gpu-bundle/$1" "${@:2}"; }
else
  if [ ! -x "$B/mimi" ] || [ ! -x "$B/tests/test_gpu_kernels" ] || [ ! -x "$B/tests/test_golden" ] ||
     [ ! -x "$B/tests/test_streaming" ] || [ ! -x "$B/tests/test_batch" ]; then
    bash scripts/install-deps.sh >/dev/null 2>&1 || true
    cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIMI_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDAARCHS:-90}" >/dev/null &&
      cmake --build "$B" -j "$(nproc)" --target mimi test_gpu_kernels test_golden test_streaming test_batch || exit 1
  fi
  run_bin() {
    case "$1" in
      mimi) "$B/mimi" "${@:2}" ;;
      *) "$B/tests/$1" "${@:2}" ;;
    esac
  }
fi
status=0
note() { [ "$status" -eq 0 ] && status=$1; }
echo "== GPU kernels vs the naive CPU references"
run_bin test_gpu_kernels; rc_k=$?; [ $rc_k -ne 0 ] && note $rc_k
echo "== golden suite on the GPU"
run_bin test_golden "--test-case=golden gpu"; rc_g=$?; [ $rc_g -ne 0 ] && note $rc_g
echo "== streaming on the GPU (chunks of 1, 7, 50 frames)"
run_bin test_streaming "--test-case=streaming gpu*"; rc_s=$?; [ $rc_s -ne 0 ] && note $rc_s
echo "== batched == alone on the GPU (mixed lengths through 1..12 slots, encode and decode)"
run_bin test_batch "--test-case=batch gpu*"; rc_b=$?; [ $rc_b -ne 0 ] && note $rc_b
# compute-sanitizer (CUDA toolkit) where the machine has it: out-of-bounds/misaligned accesses and
# shared-memory races, which the CPU emulation cannot see between blocks (docs/GPU.md)
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
rc_m=skipped rc_r=skipped
if [ -n "$CS" ] && [ ! -x .gpu-bundle/mimi ]; then
  echo "== compute-sanitizer memcheck / racecheck over the kernel sweeps"
  "$CS" --tool memcheck --error-exitcode 99 "$B/tests/test_gpu_kernels"; rc_m=$?; [ $rc_m -ne 0 ] && note $rc_m
  "$CS" --tool racecheck --error-exitcode 99 "$B/tests/test_gpu_kernels"; rc_r=$?; [ $rc_r -ne 0 ] && note $rc_r
fi
W=$(mktemp -d)
run_bin mimi gen-weights --config full --dialect hf -o "$W/model.safetensors" -q
echo "== mimi bench (full-size PRNG weights, n_q 8): batch 1, 8, 64, 256 slots"
MEMLOG="$W/mem.csv"  # peak device memory: nvidia-smi sampled beside the benchmarks
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$MEMLOG" 2>/dev/null &
SMI=$!
bench() { run_bin mimi bench --device cuda --weights "$W/model.safetensors" "$@"; }
# 400 single-frame steps: the last ~150 run with full windows, captured and replayed as graphs
bench --seconds 10,60 --runs 3 --latency-frames 400 | tee "$W/b1.txt"
bench --seconds 10 --runs 2 --latency-frames 400 --no-graphs | tee "$W/b1-nographs.txt"
bench --seconds 10 --runs 2 --batch 8 --latency-frames 0 | tee "$W/b8.txt"
bench --seconds 10,60 --runs 2 --batch 64 --latency-frames 100 | tee "$W/b64.txt"
bench --seconds 10 --runs 1 --batch 256 --latency-frames 0 | tee "$W/b256.txt"
kill $SMI 2>/dev/null
run_bin mimi bench --device cpu --weights "$W/model.safetensors" --seconds 10 --runs 3 --latency-frames 0 | tee "$W/cpu.txt"
hf=""
if python3 -c "from transformers import MimiModel" 2>/dev/null; then
  echo "== HF transformers MimiModel (float32) on the same weights"
  hf=$(python3 scripts/hf_mimi_bench.py --weights "$W" --seconds 10 --batch 1,64) && echo "$hf"
fi
rtf() { awk -v d="$2" -v s="$3" '$1 == d && $2 == s"s" {print $7}' "$1"; }
SUMMARY=${GPU_CHECK_SUMMARY:-${OUT:-.}/gpu-check-summary.txt}  # the table, also left in this file
{
echo
echo "== gpu-check summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
printf "%-34s %s\n" "GPU kernels vs references" "exit $rc_k (0 ok, 77 no device)"
printf "%-34s %s\n" "golden suite on the GPU" "exit $rc_g"
printf "%-34s %s\n" "streaming on the GPU" "exit $rc_s"
printf "%-34s %s\n" "batched == alone on the GPU" "exit $rc_b"
printf "%-34s %s\n" "compute-sanitizer memcheck/racecheck" "$rc_m / $rc_r"
for b in 1 8 64 256; do
  for secs in 10 60; do
    e=$(rtf "$W/b$b.txt" encode $secs)
    [ -n "$e" ] && printf "%-34s %s / %s x realtime per GPU\n" "encode / decode ${secs} s, batch $b" "$e" "$(rtf "$W/b$b.txt" decode $secs)"
  done
done
printf "%-34s %s / %s x realtime\n" "CPU encode / decode 10 s" "$(rtf "$W/cpu.txt" encode 10)" "$(rtf "$W/cpu.txt" decode 10)"
printf "%-34s %s\n" "streaming step, batch 1" "$(grep -o 'encode median.*' "$W/b1.txt")"
printf "%-34s %s\n" "  graphs (batch 1)" "$(grep -o 'graphs: .*' "$W/b1.txt")"
printf "%-34s %s\n" "  same, --no-graphs" "$(grep -o 'encode median.*' "$W/b1-nographs.txt")"
printf "%-34s %s / %s x realtime\n" "encode / decode 10 s, no graphs" "$(rtf "$W/b1-nographs.txt" encode 10)" "$(rtf "$W/b1-nographs.txt" decode 10)"
printf "%-34s %s\n" "streaming step, batch 64" "$(grep -o 'encode median.*' "$W/b64.txt")"
printf "%-34s %s\n" "  graphs (batch 64)" "$(grep -o 'graphs: .*' "$W/b64.txt")"
printf "%-34s %s MiB\n" "peak device memory (nvidia-smi)" "$(sort -n "$MEMLOG" 2>/dev/null | tail -1)"
if [ -n "$hf" ]; then
  echo "$hf" | python3 -c "
import json, sys
d = json.load(sys.stdin)
for r in d['results']:
    print('%-34s %.1f x realtime (batch total)' % ('HF MimiModel %s, batch %d' % (r['direction'], r['batch']), r['rtf']))
"
  ours=$(rtf "$W/b64.txt" encode 10)
  hf64=$(echo "$hf" | python3 -c "import json,sys; print([r['rtf'] for r in json.load(sys.stdin)['results'] if r['direction']=='encode' and r['batch']==64][0])")
  python3 -c "print('%-34s %.2fx (target >= 5x)' % ('batch-64 encode throughput vs HF', float('$ours') / float('$hf64')))" 2>/dev/null
fi
} | tee "$SUMMARY"
echo "(summary table also in $SUMMARY)"
rm -rf "$W"
exit $status
