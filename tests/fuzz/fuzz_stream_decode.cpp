// libFuzzer target: `mimi decode --stream` (app/cli/stream.cpp stream_decode): a .mimi or text
// token stream read incrementally and decoded frame by frame with the micro model, output to
// /dev/null. Input: 1 option byte, then the stream (given as a memfd path).
//   bits 0-1 output (0 WAV, 1 raw s16le, 2 raw f32le, 3 WAV), bit 2 f32 samples,
//   bits 3-5 --n-q (0 = all), bit 6 --allow-weights-mismatch,
//   bit 7 recompute the .mimi CRCs of the stream first (tests/fuzz/fuzz_support.h)
#include "app/cli/stream.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_support.h"

using namespace mimi;

MIMI_FUZZ_TARGET {
  if (size < 1) return 0;
  static const char* const kRaw[4] = {"", "s16le", "f32le", ""};
  std::vector<uint8_t> b(data + 1, data + size);
  if (data[0] & 128) fuzz::repair_mimi_crcs(b);
  app::StreamDecodeOptions o;
  o.raw_sample = kRaw[data[0] & 3];
  o.sample_format = data[0] & 4 ? app::SampleFormat::F32 : app::SampleFormat::S16;
  const int n_q = (data[0] >> 3) & 7;
  o.n_q = n_q == 0 ? -1 : n_q;
  o.allow_weights_mismatch = data[0] & 64;
  const fuzz::MemFd in(b.data(), b.size());
  o.input = in.path();
  o.out = "/dev/null";
  o.force = true;
  fuzz::refused_cleanly([&] {
    const app::StreamStats st = app::stream_decode(fuzz::micro_stream_engine(), o);
    MIMI_FUZZ_CHECK(st.frames >= 1, "decoded nothing without an error");
  });
  return 0;
}
