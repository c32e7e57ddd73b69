// Audio in and out through libsndfile (WAV incl. WAVE_FORMAT_EXTENSIBLE, FLAC, OGG, AIFF, ...)
// over in-memory bytes, so files and pipes take the same path; resampling through soxr.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mimi::app {

struct AudioInfo {
  int sample_rate = 0, channels = 0;
  int64_t frames = 0;
};
// The header of an audio file held in memory (nothing is decoded). Throws Error(Input).
AudioInfo probe_audio(const std::vector<uint8_t>& bytes, const std::string& what);

// Reads a file (or "-": all of stdin, then from memory) block by block.
class AudioReader {
 public:
  explicit AudioReader(const std::string& path);
  ~AudioReader();
  AudioReader(const AudioReader&) = delete;
  AudioReader& operator=(const AudioReader&) = delete;
  int sample_rate() const { return rate_; }
  int channels() const { return channels_; }
  int64_t frames() const { return frames_; }  // total, as the header says (0 if unknown)
  // Up to `frames` interleaved frames into out (resized); returns the count, 0 at the end.
  int64_t read(std::vector<float>& out, int64_t frames);

 private:
  struct Impl;
  Impl* impl_;
  int rate_ = 0, channels_ = 0;
  int64_t frames_ = 0;
};

// Streaming band-limited resampler (soxr); a pass-through when the rates are equal.
class StreamResampler {
 public:
  StreamResampler(int from_rate, int to_rate);
  ~StreamResampler();
  StreamResampler(const StreamResampler&) = delete;
  StreamResampler& operator=(const StreamResampler&) = delete;
  // Appends the output for `n` more input samples; in == nullptr flushes the end.
  void process(const float* in, size_t n, std::vector<float>& out);

 private:
  void* soxr_ = nullptr;
};

enum class SampleFormat { S16, S24, F32 };
enum class AudioContainer { Wav, Flac, Ogg };
AudioContainer container_for(const std::string& path);  // by extension; default WAV

// Writes mono audio block by block: to a temporary file renamed into place by finish() (never a
// partial file under the final name), or for "-" to memory and then stdout.
class AudioWriter {
 public:
  AudioWriter(const std::string& path, int sample_rate, SampleFormat fmt, bool force);
  ~AudioWriter();
  AudioWriter(const AudioWriter&) = delete;
  AudioWriter& operator=(const AudioWriter&) = delete;
  void write(const float* mono, int64_t n);
  uint64_t finish();  // returns bytes written

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace mimi::app
