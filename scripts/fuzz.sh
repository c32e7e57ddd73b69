#!/usr/bin/env bash
# Fuzzes the token readers (.mimi, .npy, .safetensors, text) with libFuzzer + ASan/UBSan for
# N seconds (default 60). Needs clang (apt-get install clang). Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
out=build-fuzz
mkdir -p $out/corpus
flags="-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I. $(pkg-config --cflags sndfile)"
clang++ $flags tests/fuzz/fuzz_token_readers.cpp app/token_file.cpp app/mimi_container.cpp codec/safetensors.cpp \
  codec/tensor.cpp -o $out/fuzz_token_readers
for f in tests/data/tiny/cases/len1.safetensors; do cp "$f" $out/corpus/; done
printf '1 2 3\n4 5 6\n' > $out/corpus/t.txt
build/mimi encode examples/hello.wav -o $out/corpus/h.mimi -f -q --weights tests/data/tiny/weights.hf.safetensors 2>/dev/null || true
$out/fuzz_token_readers -max_total_time="$secs" -max_len=4096 $out/corpus
