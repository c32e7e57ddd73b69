// Real-time pipe mode: `mimi encode --stream` and `mimi decode --stream`. Audio or tokens are
// read as they arrive and every 80 ms frame is written (and flushed) as soon as it is complete.
#pragma once

#include <string>

#include "app/formats/audio_io.h"
#include "codec/engine.h"

namespace mimi::app {

struct RawFormat {
  std::string sample;  // "" = WAV with a header; else s16le, s24le, s32le, f32le
  int rate = 24000;
  int channels = 1;
};

struct StreamEncodeOptions {
  std::string input = "-", out = "-", format = "mimi";  // format: mimi or text
  RawFormat raw;
  int n_q = 8;
  int64_t max_chunk = 8;  // frames per push when input arrives faster than real time
  bool force = false;
};

struct StreamDecodeOptions {
  std::string input = "-", out = "-";
  // "" = audio in the container the output's name says (WAV on pipes, its header's sizes
  // "unknown"), as `mimi decode` writes it; else headerless s16le / f32le PCM
  std::string raw_sample;
  SampleFormat sample_format = SampleFormat::S16;  // of the container (raw: raw_sample's)
  std::string sample_rate;  // as decode's --sample-rate: "" = the model's, HZ, or "source"
  int n_q = -1;
  bool force = false;
  bool allow_weights_mismatch = false;
  bool recover = false;  // damage (a bad .mimi chunk, a bad text line): keep the frames before it, warn
};

struct StreamStats {
  int64_t frames = 0, samples = 0;  // samples at the model's rate
  double compute_s = 0, max_frame_s = 0;
  uint64_t bytes = 0;  // written to the output
  int n_q = 0;         // codebooks encoded or decoded
  int sample_rate = 0; // of the decoded output
};

StreamStats stream_encode(Engine& engine, const StreamEncodeOptions& o);
StreamStats stream_decode(Engine& engine, const StreamDecodeOptions& o);

}  // namespace mimi::app
