// Model hyper-parameters. Defaults are the official Mimi (moshi loaders._seanet_kwargs,
// _transformer_kwargs, _quantizer_kwargs); JSON in either the Hugging Face MimiConfig or the
// moshi get_mimi(mimi_config=...) style overrides them.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace mimi {

struct Config {
  int sample_rate = 24000;
  double frame_rate = 12.5;
  int channels = 1;
  // SEANet
  int dimension = 512;  // D, the latent width
  int n_filters = 64;
  int n_residual_layers = 1;
  std::vector<int> ratios{8, 6, 5, 4};  // decoder order; the encoder uses them reversed
  int kernel_size = 7, last_kernel_size = 3, residual_kernel_size = 3;
  int dilation_base = 2, compress = 2;
  // transformers (encoder and decoder share the shape)
  int d_model = 512, num_heads = 8, num_layers = 8, dim_feedforward = 2048;
  int context = 250;
  double max_period = 10000.0;
  double norm_eps = 1e-5;
  // split RVQ
  int q_dimension = 256, n_q = 32, bins = 2048, n_q_semantic = 1;

  static Config official() { return Config{}; }
  // Accepts HF MimiConfig keys or the moshi dict ("seanet"/"transformer"/"quantizer").
  // Throws Error(Weights) for unsupported values (non-causal, conv shortcut, ...), values of the
  // wrong JSON type and out-of-range values, naming the field and `what`.
  static Config from_json(const nlohmann::json& j, const std::string& what);
  static Config from_file(const std::string& path);
  // The bytes of a config file (at most 16 MiB), read to its end: a pipe, FIFO or /dev/stdin as
  // well as a regular file. A stream is read once per process; later calls for it return the same
  // bytes (config.cpp). Its errno is judged by errno_kind: a missing or unreadable file is
  // Error(Weights), the machine's failures (EMFILE, EIO...) Environment.
  static std::string read_file(const std::string& path);
  // True for JSON that looks like a Mimi config in either style (used to ignore an unrelated
  // config.json next to a checkpoint).
  static bool looks_like_mimi(const nlohmann::json& j);

  nlohmann::json to_json() const;  // HF MimiConfig keys
  // Throws Error(Weights) naming the field and `what` for values out of sane bounds (see
  // config.cpp): nothing derived from an accepted config overflows or allocates gigabytes.
  void validate(const std::string& what) const;

  int hop() const;                      // SEANet stride product (960)
  int downsample_stride() const;        // 25 Hz -> 12.5 Hz: 2
  int frame_size() const { return hop() * downsample_stride(); }  // 1920 samples
  int head_dim() const { return d_model / num_heads; }
  bool operator==(const Config&) const = default;
};

}  // namespace mimi
