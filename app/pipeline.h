// The pieces every command that turns audio into codes shares (encode, and the dataset mode):
// an engine from the command-line options, and an audio file to codes in constant memory.
#pragma once

#include <memory>
#include <string>

#include "codec/engine.h"

namespace mimi::app {

// Where the model comes from and where it runs (the --weights/--config/--device/--threads options).
struct EngineSpec {
  std::string weights;  // file or directory; "" = $MIMI_WEIGHTS, then the HF cache (weights_locate.h)
  std::string config;   // "" = beside the weights, else the official config
  std::string device = "cpu";
  int threads = 0;
};

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

// An audio file (or "-") to codes, block by block in constant memory: the channels averaged
// (channel -1) or one of them, resampled to the model rate, encoded as it arrives (the streaming
// engine: any length, exactly the offline result). Shows a progress bar on stderr unless quiet.
// Throws Error(Input) for unreadable or malformed audio and for audio with no samples.
EncodedAudio encode_audio(Engine& eng, const std::string& in, int n_q, int channel, bool quiet);

}  // namespace mimi::app
