// libFuzzer target: every token-file reader (and the safetensors parser under it) on arbitrary
// bytes must either return codes or throw mimi::Error, never crash.
// Build: scripts/fuzz.sh
#include <cstdint>
#include <vector>

#include "app/token_file.h"
#include "codec/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  for (auto f : {mimi::app::TokenFormat::Mimi, mimi::app::TokenFormat::Npy, mimi::app::TokenFormat::Safetensors,
                 mimi::app::TokenFormat::Text})
    for (bool recover : {false, true}) {
      try {
        mimi::app::read_tokens(bytes, f, "fuzz", recover);
      } catch (const mimi::Error&) {
      }
    }
  return 0;
}
