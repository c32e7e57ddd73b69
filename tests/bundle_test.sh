#!/usr/bin/env bash
# The GPU bundle as the device machine gets it (issue 27): scripts/gpu-bundle.sh's .gpu-bundle.tar.xz,
# unpacked elsewhere, mimi run through the bundle's own loader and libraries. On a machine without a
# GPU this is every path of the first device call except the kernels themselves:
#   1. the payload that travels (tracked tree + the tarball) fits the device tool's 64 MiB with
#      margin (<= 45 MiB);
#   2. gen-weights, encode, decode and info give through the bundled loader what they give when run
#      directly (tests/loader_test.sh; this once exited 127 for every command);
#   3. the build says why it sees no GPU (the runtime's words), and --device cuda is exit 6;
#   4. scripts/gpu-check.sh runs to the end in its CPU dry run through the bundle, with a full table.
# Run by scripts/test.sh after scripts/gpu-bundle.sh (needs nvcc); exit 0 only when all hold.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
TAR=$ROOT/.gpu-bundle.tar.xz
[ -f "$TAR" ] || { echo "FAIL: no $TAR (scripts/gpu-bundle.sh makes it)"; exit 1; }

# 1. payload: what the device tool copies (tracked and untracked-not-ignored files) plus the carry
tree=$(bash "$ROOT/scripts/tree-bytes.sh")
tarb=$(stat -c %s "$TAR")
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
echo "payload: tree $(mib "$tree") MiB + bundle $(mib "$tarb") MiB = $(mib $((tree + tarb))) MiB (limit 45)"
[ $((tree + tarb)) -le $((45 * 1048576)) ] || bad "the device payload is over 45 MiB"

# 2. every command through the bundled loader, as gpu-check.sh runs it
tar -xJf "$TAR" -C "$T" || { echo "FAIL: the bundle does not unpack"; exit 1; }
B=$T/.gpu-bundle
libs="$B/lib:/usr/lib/x86_64-linux-gnu"
run_bundled() { "$B/lib/ld-linux-x86-64.so.2" --library-path "$libs" "$B/mimi" "$@"; }
bash "$ROOT/tests/loader_test.sh" "$B/mimi" "$B/lib/ld-linux-x86-64.so.2" "$libs" || bad "commands through the bundle"

# 3. a build with a GPU backend that sees no GPU says why; asking for the device is exit 6
run_bundled info --json >"$T/info.json" 2>"$T/info.err" || bad "info through the bundle: $(cat "$T/info.err")"
grep -q '"gpu_backend":"CUDA"' "$T/info.json" || bad "the bundle is not a CUDA build: $(cat "$T/info.json")"
if ! grep -q '"device":"cuda:0"' "$T/info.json"; then
  grep -q '"gpu_unavailable":"..' "$T/info.json" || bad "no GPU and no reason given: $(cat "$T/info.json")"
  run_bundled gen-weights --config tiny -o "$T/w.safetensors" -q
  printf '1 2 3\n4 5 6\n' >"$T/c.txt"
  run_bundled decode --device cuda "$T/c.txt" -o "$T/c.wav" --weights "$T/w.safetensors" 2>"$T/dev.err"
  rc=$?
  [ $rc = 6 ] || bad "--device cuda without a GPU: exit $rc, not 6: $(cat "$T/dev.err")"
  [ ! -e "$T/c.wav" ] || bad "--device cuda without a GPU left an output"
  echo "no GPU here: $(grep -o '"gpu_unavailable":"[^"]*"' "$T/info.json")"
fi

# 4. the device check's own dry run (CPU device, tiny weights) through the bundle
mkdir -p "$T/out"
(cd "$ROOT" && OUT="$T/out" MIMI_GPU_CHECK_DEVICE=cpu MIMI_GPU_CHECK_CONFIG=tiny MIMI_GPU_CHECK_BUDGET_S=240 \
   bash scripts/gpu-check.sh >"$T/check.log" 2>&1)
rc=$?
S=$T/out/gpu-check-summary.txt
[ $rc = 0 ] || { bad "gpu-check.sh dry run exited $rc"; tail -20 "$T/check.log"; }
grep -q '^binaries  *prebuilt .gpu-bundle' "$S" || bad "gpu-check.sh did not use the bundle"
n=$(grep -c 'x real time' "$S")
[ "$n" -ge 8 ] || bad "gpu-check.sh dry run: $n timing lines, not >= 8 (an empty table)"
grep -q '^gpu-check  *exit 0' "$S" || bad "gpu-check.sh summary has no closing line"
cat "$S"
[ $fail = 0 ] && echo "bundle: payload fits, every command through the bundle, gpu-check dry run complete"
exit $fail
