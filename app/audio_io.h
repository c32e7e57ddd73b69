// Audio in and out through libsndfile (WAV incl. WAVE_FORMAT_EXTENSIBLE, FLAC, OGG, AIFF, ...)
// over in-memory bytes, so files and pipes take the same path; resampling through soxr.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mimi::app {

struct Audio {
  int sample_rate = 0;
  int channels = 0;
  int64_t frames = 0;
  std::vector<float> interleaved;  // [frames][channels]
};

// Throws Error(Input) when libsndfile cannot read the bytes.
Audio read_audio(const std::vector<uint8_t>& bytes, const std::string& what);

std::vector<float> downmix(const Audio& a);                 // average of the channels
std::vector<float> channel_of(const Audio& a, int channel);  // one channel

// Band-limited resampling (soxr, very high quality); returns the input unchanged (bit-exact)
// when the rates are equal.
std::vector<float> resample(const std::vector<float>& x, int from_rate, int to_rate);

enum class SampleFormat { S16, S24, F32 };
enum class AudioContainer { Wav, Flac, Ogg };
AudioContainer container_for(const std::string& path);  // by extension; default WAV

std::vector<uint8_t> write_audio(const std::vector<float>& mono, int sample_rate, SampleFormat fmt,
                                 AudioContainer container);

}  // namespace mimi::app
