#!/usr/bin/env bash
# mimi run through the dynamic loader, as the GPU bundle runs it on the device machine
# (`ld-linux-x86-64.so.2 --library-path LIBS mimi ARGS`, scripts/gpu-check.sh): the start-up
# re-exec (app/sys/threads_env.cpp) must repeat the loader's command line, not exec the loader with
# mimi's arguments (which exited 127 for every command). Each command must give what it gives
# when run directly.
#   loader_test.sh MIMI                    the system's loader and libraries (ctest `loader`)
#   loader_test.sh MIMI LOADER LIBPATH     another loader and library path: the GPU bundle's own
#                                          (tests/bundle_test.sh), as scripts/gpu-check.sh runs it
set -uo pipefail
MIMI=$1
LOADER=${2:-$(readlink -f /lib64/ld-linux-x86-64.so.2)}
LIBPATH=${3:-/usr/lib/x86_64-linux-gnu}
LD() { "$LOADER" --library-path "$LIBPATH" "$@"; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
run() {  # run NAME CMD...: counts a non-zero exit as a failure
  local name=$1; shift
  if ! "$@" >"$T/$name.out" 2>"$T/$name.err"; then
    echo "FAIL: $name exited $? :"; cat "$T/$name.err"; fail=1
  fi
}
run gen LD "$MIMI" gen-weights --config tiny -o "$T/w/model.safetensors" -q
run gen-direct "$MIMI" gen-weights --config tiny -o "$T/d/model.safetensors" -q
cmp -s "$T/w/model.safetensors" "$T/d/model.safetensors" || { echo "FAIL: weights differ through the loader"; fail=1; }
# some audio: the decode of 13 frames of codes (text token file), run directly
for f in $(seq 13); do echo "$((f % 7)) $((f * 3 % 11)) 5 9 1 2 3 $f"; done >"$T/c.txt"
run audio "$MIMI" decode "$T/c.txt" -o "$T/a.wav" --weights "$T/w/model.safetensors" -q
run enc LD "$MIMI" encode "$T/a.wav" -o "$T/l.mimi" --weights "$T/w/model.safetensors" -q
run enc-direct "$MIMI" encode "$T/a.wav" -o "$T/d.mimi" --weights "$T/w/model.safetensors" -q
cmp -s "$T/l.mimi" "$T/d.mimi" || { echo "FAIL: codes differ through the loader"; fail=1; }
run dec LD "$MIMI" decode "$T/l.mimi" -o "$T/l.wav" --weights "$T/w/model.safetensors" -q
run dec-direct "$MIMI" decode "$T/d.mimi" -o "$T/d.wav" --weights "$T/w/model.safetensors" -q
cmp -s "$T/l.wav" "$T/d.wav" || { echo "FAIL: audio differs through the loader"; fail=1; }
run info LD "$MIMI" info "$T/l.mimi" --json
grep -q '"kind":"tokens"' "$T/info.out" || { echo "FAIL: info through the loader: $(cat "$T/info.out")"; fail=1; }
run build-info LD "$MIMI" info
[ $fail = 0 ] && echo "loader: all commands as run directly"
exit $fail
