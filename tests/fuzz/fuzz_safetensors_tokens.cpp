// libFuzzer target: safetensors token files (read_st over codec/safetensors.cpp), then, for what the reader accepts, the writers'
// round trip and decoding with the tiny model as `mimi decode` does (tests/fuzz/fuzz_support.h).
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_support.h"

MIMI_FUZZ_TARGET {
  mimi::fuzz::fuzz_token_format(data, size, mimi::app::TokenFormat::Safetensors);
  return 0;
}
