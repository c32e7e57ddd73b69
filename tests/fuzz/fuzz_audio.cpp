// libFuzzer target: audio input as the CLI reads it (app/formats/audio_io.cpp): the bytes as a file
// (memfd path) through AudioReader, block by block, channels averaged, resampled to 24 kHz with
// StreamResampler; and probe_audio (what `mimi info` does) on the same bytes in memory.
#include <cmath>

#include "app/formats/audio_io.h"
#include "tests/fuzz/fuzz_common.h"

using namespace mimi;
using mimi::fuzz::refused_cleanly;

MIMI_FUZZ_TARGET {
  const std::vector<uint8_t> bytes(data, data + size);
  refused_cleanly([&] { app::probe_audio(bytes, "fuzz"); });
  const fuzz::MemFd file(data, size);
  refused_cleanly([&] {
    app::AudioReader reader(file.path());
    const int nch = reader.channels();
    MIMI_FUZZ_CHECK(nch >= 1 && reader.sample_rate() >= 1, "reader accepted a bad layout");
    app::StreamResampler rs(reader.sample_rate(), 24000);
    std::vector<float> block, mono, pcm;
    int64_t got, total = 0;
    while ((got = reader.read(block, 1 << 16)) > 0) {  // the CLI's block size
      MIMI_FUZZ_CHECK(block.size() == size_t(got) * size_t(nch), "block size");
      mono.resize(size_t(got));
      for (int64_t i = 0; i < got; ++i) {
        float s = 0.0f;
        for (int c = 0; c < nch; ++c) s += block[size_t(i * nch + c)];
        mono[size_t(i)] = s / float(nch);
      }
      rs.process(mono.data(), mono.size(), pcm);
      total += int64_t(pcm.size());
      pcm.clear();
      if (total > (int64_t(1) << 22)) return;  // long (e.g. a tiny sample rate upsampled): valid, just slow
    }
    rs.process(nullptr, 0, pcm);
  });
  return 0;
}
