// The pieces every command that turns audio into codes shares (encode, and the dataset mode):
// an engine from the command-line options, and an audio file to codes in constant memory.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "app/formats/audio_io.h"
#include "codec/engine.h"
#include "codec/weights.h"

namespace mimi::app {

// Where the model comes from and where it runs (the --weights/--config/--device/--threads options).
struct EngineSpec {
  std::string weights;  // file or directory; "" = $MIMI_WEIGHTS, then the HF cache (weights_locate.h)
  std::string config;   // "" = beside the weights, else the official config
  std::string device = "cpu";
  int threads = 0;
  Parts parts;  // the directions the command runs: the other's weights are not kept (codec/weights.h)
  bool no_cache = false;  // no prepared-weights cache (also $MIMI_NO_CACHE=1)
};

// The prepared-weights cache's folder (codec/prepared_weights.h): $MIMI_CACHE_DIR, else
// $XDG_CACHE_HOME/mimi, else ~/.cache/mimi; "" when there is none ($MIMI_NO_CACHE=1, no home).
std::string weights_cache_dir();

struct LoadedEngine {
  std::unique_ptr<Engine> engine;
  std::string weights_path, config_origin;
  double load_seconds = 0;
};
// Throws Error(Weights/Device/Usage).
LoadedEngine make_engine(const EngineSpec& spec);

struct EncodedAudio {
  Codes codes;
  int64_t samples = 0;  // at the model rate
  double compute = 0;   // seconds in the engine
  int source_rate = 0, source_channels = 0;
};

// Part of a file: [start, end) in seconds of the source (end < 0: to the end of the file), and
// one channel of it (channel >= 0) or the average of all (-1).
struct AudioSpan {
  double start = 0, end = -1;
  int channel = -1;
};

// The source frames a span skips, and takes (-1: to the end), at `rate`: the one rounding of
// times to samples, for the reader (MonoSource) and for the plan that foresees what it will read.
struct SpanFrames {
  int64_t skip = 0, take = -1;
};
inline SpanFrames span_frames(double start, double end, int rate) {
  SpanFrames f;
  f.skip = std::llround(start * rate);
  if (end >= 0) f.take = std::llround(end * rate) - f.skip;
  return f;
}

// An audio file (or "-") as model-rate mono samples, block by block in constant memory: read,
// downmixed, resampled - the one path from audio to what the encoder is fed, so every command
// feeds the engine the same samples (the dataset mode prefetches the next items through it while
// the current one encodes). Throws Error(Input) for unreadable or malformed audio and for a span
// outside the file.
class MonoSource {
 public:
  MonoSource(const std::string& path, int model_rate, const AudioSpan& span = {});
  int source_rate() const { return reader_.sample_rate(); }
  int source_channels() const { return reader_.channels(); }
  int64_t source_frames() const { return reader_.frames(); }  // the whole file's, per its header (0: unknown)
  int64_t frames_read() const { return read_; }                // source frames of the span so far
  // The next samples (may be empty while the resampler fills); false once the end has been
  // flushed. After the end, shortfall() says why the file (or the span) held less than promised.
  bool next(std::vector<float>& pcm);
  std::string shortfall() const;

 private:
  AudioReader reader_;
  StreamResampler rs_;
  std::string what_;
  int channel_;
  int64_t skip_ = 0;   // source frames before the span still to drop
  int64_t left_ = -1;  // source frames of the span still to take (-1: to the end)
  int64_t read_ = 0, pos_ = 0;
  bool done_ = false;
  std::vector<float> block_;  // [frames, channels] interleaved, as read
  std::vector<float> mono_;   // [frames] of the span, downmixed, at the source rate
};

// An audio file (or "-") to codes, block by block in constant memory: the channels averaged
// (channel -1) or one of them, resampled to the model rate, encoded as it arrives (the streaming
// engine: any length, exactly the offline result). Shows a progress bar on stderr unless quiet.
// Throws Error(Input) for unreadable or malformed audio and for audio with no samples.
EncodedAudio encode_audio(Engine& eng, const std::string& in, int n_q, int channel, bool quiet);

}  // namespace mimi::app
