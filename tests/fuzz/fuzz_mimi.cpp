// libFuzzer target: .mimi token files (app/formats/mimi_container.cpp read_mimi, app/formats/token_file.cpp),
// with and without --recover, then the writers' round trip and decoding with the tiny model as
// `mimi decode` does. The format is CRC-protected, so the first input byte chooses: bit 0 set =
// recompute the header, chunk and end-record CRCs of the rest before parsing (mutations reach the
// header JSON and the chunk fields), clear = parse the rest as it is (the CRC checks themselves).
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_support.h"

MIMI_FUZZ_TARGET {
  if (size < 1) return 0;
  std::vector<uint8_t> b(data + 1, data + size);
  if (data[0] & 1) mimi::fuzz::repair_mimi_crcs(b);
  mimi::fuzz::fuzz_token_format(b.data(), b.size(), mimi::app::TokenFormat::Mimi);
  return 0;
}
