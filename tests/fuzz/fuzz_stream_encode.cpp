// libFuzzer target: `mimi encode --stream` (app/cli/stream.cpp stream_encode): a WAV stream header
// parser or headerless PCM, downmix, resampling and frame-by-frame encoding with the micro model,
// output to /dev/null. Input: 2 option bytes, then the stream (given as a memfd path).
//   byte 0: bits 0-2 sample format (0-3 WAV with header, 4 s16le, 5 s24le, 6 s32le, 7 f32le),
//           bit 3 text output (else .mimi), bits 4-6 n_q - 1, bit 7 max_chunk 1 (else 8)
//   byte 1: bits 0-2 raw rate (24000 8000 16000 22050 44100 48000 1000 12000), bits 3-4 channels - 1
#include "app/cli/stream.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_support.h"

using namespace mimi;

MIMI_FUZZ_TARGET {
  if (size < 2) return 0;
  static const char* const kSample[8] = {"", "", "", "", "s16le", "s24le", "s32le", "f32le"};
  static const int kRate[8] = {24000, 8000, 16000, 22050, 44100, 48000, 1000, 12000};
  app::StreamEncodeOptions o;
  o.raw.sample = kSample[data[0] & 7];
  o.format = data[0] & 8 ? "text" : "mimi";
  o.n_q = 1 + ((data[0] >> 4) & 7);
  o.max_chunk = data[0] & 128 ? 1 : 8;
  o.raw.rate = kRate[data[1] & 7];
  o.raw.channels = 1 + ((data[1] >> 3) & 3);
  const fuzz::MemFd in(data + 2, size - 2);
  o.input = in.path();
  o.out = "/dev/null";
  o.force = true;
  fuzz::refused_cleanly([&] {
    const app::StreamStats st = app::stream_encode(fuzz::micro_stream_engine(), o);
    MIMI_FUZZ_CHECK(st.frames >= 1 && st.samples >= 1, "streamed nothing without an error");
  });
  return 0;
}
