// libFuzzer target: text token files (app/formats/token_file.cpp read_text), then, for what the reader accepts, the writers'
// round trip and decoding with the tiny model as `mimi decode` does (tests/fuzz/fuzz_support.h).
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_support.h"

MIMI_FUZZ_TARGET {
  mimi::fuzz::fuzz_token_format(data, size, mimi::app::TokenFormat::Text);
  return 0;
}
