#!/bin/sh
# The part of the op table that the sanitizer builds run on the emulated GPU (test_ops --max-flops
# CAP: scripts/test-sanitize.sh, scripts/test-tsan.sh) must launch every kernel instance that the
# whole table launches, or a race or an overflow in a kernel only the large cases reach would go
# unseen there. FULL is what ops_gpu recorded
# (MIMI_EMU_COVERAGE: one "name +offset" line per instance, offsets comparable within one binary).
#   ops_gpu_subset.sh TEST_OPS FULL CAP
set -eu
ops=$1 full=$2 cap=$3
[ -s "$full" ] || { echo "no kernel coverage recorded by ops_gpu at $full"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
MIMI_EMU_EXEC=fibers MIMI_EMU_COVERAGE="$dir/sub" "$ops" --backend gpu --max-flops "$cap"
sort -u "$full" >"$dir/full"
sort -u "$dir/sub" >"$dir/sub.sorted"
missing=$(comm -23 "$dir/full" "$dir/sub.sorted")
echo "kernel instances: $(wc -l <"$dir/full") launched by the whole table, $(wc -l <"$dir/sub.sorted") by the cases up to $cap flops"
if [ -n "$missing" ]; then
  echo "launched only by cases over $cap flops (raise the cap or add a smaller case):"
  echo "$missing"
  exit 1
fi
