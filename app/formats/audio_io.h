// Audio in and out through libsndfile (WAV incl. WAVE_FORMAT_EXTENSIBLE, FLAC, OGG, AIFF, ...)
// over in-memory bytes, so files and pipes take the same path; resampling through soxr.
#pragma once

#include <cstdint>
#include <sys/stat.h>

#include <optional>
#include <string>
#include <vector>

namespace mimi::app {

// What an input may declare: anything outside is a malformed header, not a recording.
constexpr int kMinSampleRate = 1000, kMaxSampleRate = 768000, kMaxChannels = 256;
// Largest magnitude of an input sample: float files may exceed full scale a little, never by 60 dB.
constexpr float kMaxAbsSample = 1000.0f;

struct AudioInfo {
  int sample_rate = 0, channels = 0;
  int64_t frames = 0;
};
// The header of an audio file held in memory (nothing is decoded). Throws Error(Input).
AudioInfo probe_audio(const std::vector<uint8_t>& bytes, const std::string& what);

// Reads a file block by block. "-" (stdin): a WAV stream is read as it arrives (constant memory);
// other formats are read into memory first (libsndfile needs to seek in them).
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
  // After the end: why fewer frames than the header promised came, or "" (a truncated file).
  std::string shortfall() const;
  // Known from the header at open: "truncated: the header's data size is ..." when the file holds
  // less than its header says (libsndfile reads it to its end), else "".
  std::string truncated_at_open() const;

 private:
  struct Impl;
  enum class OpenEnded { No, Streamed, Whole };
  OpenEnded adopt_open_ended_wav(int fd, const struct ::stat& st, const std::string& what);
  Impl* impl_;
  int rate_ = 0, channels_ = 0;
  int64_t frames_ = 0;
};

// Interleaved frames -> mono: channel `channel`, or the average of all (-1). A sample that is NaN,
// infinite or beyond kMaxAbsSample is an input error (Error(Input)) that says where: the frame
// (first_frame + i), its time at `rate`, and the channel.
void downmix(const float* interleaved, int64_t frames, int channels, int channel, float* mono, int64_t first_frame,
             int rate, const std::string& what);

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

// The rate decode writes for its --sample-rate `flag`: "" the model's, a rate in Hz (checked), or
// "source", the rate the tokens record (Error(Input) when they record none or an impossible one).
int output_rate(int model_rate, std::optional<int> source_rate, const std::string& flag, const std::string& what);

// The 44-byte header of a mono PCM (s16/s24) or float (f32) WAV: sizes exact when the sample count
// is known and fits in RIFF's 32 bits, else the "unknown length" 0xFFFFFFFF that libsndfile,
// ffmpeg and sox read to the end of the data (what a stream writes).
std::vector<uint8_t> wav_stream_header(int rate, SampleFormat fmt, int64_t samples);

// Writes mono audio block by block through an OutputFile (file_io.h): to a temporary renamed into
// place by finish() (never a partial file under the final name), or, for "-" and other
// non-seekable outputs, as a WAV stream (header first, with exact sizes when `expected_samples` is
// known, else the "unknown length" sizes) in constant memory. A WAV file whose `max_samples` (an
// upper bound, -1 unknown) may pass 4 GiB is written as RF64. Every write error, including one in
// the final flush of FLAC/OGG, fails with Error(Output).
class AudioWriter {
 public:
  // headerless: the samples alone (`decode --stream --raw-format`), converted as in the containers
  AudioWriter(const std::string& path, int sample_rate, SampleFormat fmt, bool force, int64_t expected_samples = -1,
              int64_t max_samples = -1, bool headerless = false);
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
