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

struct LoadOptions {
  // Config file (HF MimiConfig or moshi style). Without it: a Mimi config.json beside the
  // weights file, else the official defaults.
  std::optional<std::string> config_path;
};

std::shared_ptr<const Model> load_model(const std::string& weights_path, const LoadOptions& opts = {});
// Same, from an already opened file and a resolved config.
std::shared_ptr<const Model> load_model(const SafetensorsFile& file, const Config& cfg);

Dialect detect_dialect(const SafetensorsFile& file);
// The config load_model would use for this path and options (and where it came from).
Config resolve_config(const std::string& weights_path, const LoadOptions& opts, std::string* origin = nullptr);

}  // namespace mimi
