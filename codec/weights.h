// Loading Mimi weights from safetensors in either dialect (detected from the tensor names):
//   moshi: tokenizer-e351c8d8-checkpoint125.safetensors (fused in_proj_weight, interleaved RoPE)
//   hf:    kyutai/mimi model.safetensors (+ config.json beside it)
// Every expected tensor is checked by name, dtype and shape; unknown tensors are refused.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "codec/model.h"
#include "codec/safetensors.h"

namespace mimi {

// The directions a caller will run. A direction left out is still read, checked and fingerprinted
// (the fingerprint is the file's either way), but its tensors are not kept: they stay empty
// (data == nullptr; Model::has_encoder / has_decoder say so), so that an encode does not hold the
// decoder's weights in memory. The codebooks are kept for either. Running a direction left out is
// a bug of the caller (its plans would read null weights).
struct Parts {
  bool encoder = true, decoder = true;
};

// What the prepared-weights cache (codec/prepared_weights.h) did for a load.
struct CacheReport {
  enum class State { Off, Hit, Built, NotWritten, Unsettled } state = State::Off;
  std::string path;  // the cache file
  std::string why;   // Built: why the entry there was not used; NotWritten: why it could not be written;
                     // Unsettled: the file changed too recently to be cached (SourceIdentity::settled)
};

struct LoadOptions {
  // Config file (HF MimiConfig or moshi style). Without it: a Mimi config.json beside the
  // weights file, else the official defaults.
  std::optional<std::string> config_path;
  Parts parts;
  // The folder of the prepared-weights cache; "" = none: the weights are read into the process's
  // own memory. With one, a regular weights file is mapped from its prepared form there, built
  // first when there is none that matches (the whole model then: every direction is kept).
  std::string cache_dir;
  CacheReport* cache_report = nullptr;  // filled when given
};

// `weights_path` may also name a stream (a pipe, FIFO, /dev/stdin): read once into memory
// (SafetensorsFile::open), it gives the model and fingerprint of the same bytes in a file.
std::shared_ptr<const Model> load_model(const std::string& weights_path, const LoadOptions& opts = {});
// Same, from an already opened file and a resolved config.
//
// The model's tensors live in memory the process owns: every tensor is read (pread, never a
// mapping) into one allocation, checked, and fingerprinted from those very bytes, so a run
// computes with exactly the weights its fingerprint names, whatever happens to the file later
// (overwritten in place, truncated: issue 26). Nothing of the file is kept open. A file that
// changes while it is read is Error(Weights) naming it. Tensors of a file held in memory
// (SafetensorsFile::from_bytes) may stay views of those bytes: they never change.
std::shared_ptr<const Model> load_model(const SafetensorsFile& file, const Config& cfg, Parts parts = {});

Dialect detect_dialect(const SafetensorsFile& file);
// The config load_model would use for this path and options (and where it came from).
Config resolve_config(const std::string& weights_path, const LoadOptions& opts, std::string* origin = nullptr);

}  // namespace mimi
