#include "codec/config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "codec/error.h"

namespace mimi {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& msg) {
  throw Error(ErrorKind::Weights, what + ": " + msg);
}

template <class T>
void get(const nlohmann::json& j, const char* key, T& out) {
  if (j.contains(key) && !j[key].is_null()) out = j[key].get<T>();
}

void require(const nlohmann::json& j, const char* key, const nlohmann::json& expected,
             const std::string& what) {
  if (j.contains(key) && !j[key].is_null() && j[key] != expected)
    bad(what, std::string("unsupported ") + key + " = " + j[key].dump() + " (expected " +
                  expected.dump() + ")");
}

}  // namespace

bool Config::looks_like_mimi(const nlohmann::json& j) {
  if (!j.is_object()) return false;
  if (j.contains("model_type")) return j["model_type"] == "mimi";
  return j.contains("seanet") && j.contains("quantizer");
}

Config Config::from_json(const nlohmann::json& j, const std::string& what) {
  Config c;
  try {
    if (j.contains("seanet")) {  // moshi style
      get(j, "sample_rate", c.sample_rate);
      get(j, "frame_rate", c.frame_rate);
      get(j, "channels", c.channels);
      const auto& s = j["seanet"];
      get(s, "dimension", c.dimension);
      get(s, "n_filters", c.n_filters);
      get(s, "n_residual_layers", c.n_residual_layers);
      get(s, "ratios", c.ratios);
      get(s, "kernel_size", c.kernel_size);
      get(s, "last_kernel_size", c.last_kernel_size);
      get(s, "residual_kernel_size", c.residual_kernel_size);
      get(s, "dilation_base", c.dilation_base);
      get(s, "compress", c.compress);
      require(s, "causal", true, what);
      require(s, "true_skip", true, what);
      require(s, "pad_mode", "constant", what);
      require(s, "norm", "none", what);
      if (j.contains("transformer")) {
        const auto& t = j["transformer"];
        get(t, "d_model", c.d_model);
        get(t, "num_heads", c.num_heads);
        get(t, "num_layers", c.num_layers);
        get(t, "dim_feedforward", c.dim_feedforward);
        get(t, "context", c.context);
        get(t, "max_period", c.max_period);
        require(t, "causal", true, what);
        require(t, "gating", "none", what);
        require(t, "norm", "layer_norm", what);
        require(t, "positional_embedding", "rope", what);
      }
      if (j.contains("quantizer")) {
        const auto& q = j["quantizer"];
        get(q, "dimension", c.q_dimension);
        get(q, "n_q", c.n_q);
        get(q, "bins", c.bins);
      }
    } else {  // Hugging Face MimiConfig
      get(j, "sampling_rate", c.sample_rate);
      get(j, "frame_rate", c.frame_rate);
      get(j, "audio_channels", c.channels);
      get(j, "hidden_size", c.dimension);
      c.d_model = c.dimension;
      get(j, "num_filters", c.n_filters);
      get(j, "num_residual_layers", c.n_residual_layers);
      get(j, "upsampling_ratios", c.ratios);
      get(j, "kernel_size", c.kernel_size);
      get(j, "last_kernel_size", c.last_kernel_size);
      get(j, "residual_kernel_size", c.residual_kernel_size);
      get(j, "dilation_growth_rate", c.dilation_base);
      get(j, "compress", c.compress);
      get(j, "num_attention_heads", c.num_heads);
      get(j, "num_hidden_layers", c.num_layers);
      get(j, "intermediate_size", c.dim_feedforward);
      get(j, "sliding_window", c.context);
      get(j, "norm_eps", c.norm_eps);
      if (j.contains("rope_parameters") && j["rope_parameters"].contains("rope_theta"))
        c.max_period = j["rope_parameters"]["rope_theta"].get<double>();
      else
        get(j, "rope_theta", c.max_period);
      get(j, "codebook_dim", c.q_dimension);
      get(j, "num_quantizers", c.n_q);
      get(j, "codebook_size", c.bins);
      get(j, "num_semantic_quantizers", c.n_q_semantic);
      require(j, "use_causal_conv", true, what);
      require(j, "use_conv_shortcut", false, what);
      require(j, "pad_mode", "constant", what);
      require(j, "trim_right_ratio", 1.0, what);
      require(j, "hidden_act", "gelu", what);
      require(j, "attention_bias", false, what);
      if (j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null() &&
          j["num_key_value_heads"].get<int>() != c.num_heads)
        bad(what, "num_key_value_heads must equal num_attention_heads");
      if (j.contains("head_dim") && !j["head_dim"].is_null() &&
          j["head_dim"].get<int>() * c.num_heads != c.d_model)
        bad(what, "head_dim * num_attention_heads must equal hidden_size");
      if (j.contains("vector_quantization_hidden_dimension") &&
          j["vector_quantization_hidden_dimension"].get<int>() != c.q_dimension)
        bad(what, "vector_quantization_hidden_dimension must equal codebook_dim");
      if (j.contains("upsample_groups") && j["upsample_groups"].get<int>() != c.dimension)
        bad(what, "upsample_groups must equal hidden_size");
    }
  } catch (const nlohmann::json::exception& e) {
    bad(what, std::string("bad config value: ") + e.what());
  }
  c.validate(what);
  return c;
}

Config Config::from_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error(ErrorKind::Weights, path + ": cannot open config");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    bad(path, std::string("not valid JSON: ") + e.what());
  }
  if (!looks_like_mimi(j)) bad(path, "not a Mimi config (no model_type \"mimi\", no seanet/quantizer keys)");
  return from_json(j, path);
}

void Config::validate(const std::string& what) const {
  auto positive = [&](int v, const char* name) {
    if (v <= 0) bad(what, std::string(name) + " must be positive, got " + std::to_string(v));
  };
  positive(sample_rate, "sample_rate");
  positive(dimension, "dimension");
  positive(n_filters, "n_filters");
  positive(n_residual_layers, "n_residual_layers");
  positive(kernel_size, "kernel_size");
  positive(last_kernel_size, "last_kernel_size");
  positive(residual_kernel_size, "residual_kernel_size");
  positive(compress, "compress");
  positive(d_model, "d_model");
  positive(num_heads, "num_heads");
  positive(num_layers, "num_layers");
  positive(dim_feedforward, "dim_feedforward");
  positive(context, "context");
  positive(q_dimension, "q_dimension");
  positive(n_q, "n_q");
  positive(bins, "bins");
  if (channels != 1) bad(what, "only mono models are supported (channels = " + std::to_string(channels) + ")");
  if (ratios.empty()) bad(what, "ratios must not be empty");
  for (int r : ratios) positive(r, "ratio");
  if (d_model != dimension) bad(what, "transformer d_model must equal the SEANet dimension");
  if (d_model % num_heads != 0 || head_dim() % 2 != 0)
    bad(what, "d_model / num_heads must be an even integer");
  if (n_q_semantic != 1) bad(what, "exactly one semantic codebook is supported");
  if (n_q < 1) bad(what, "n_q must be >= 1");
  if ((n_filters << ratios.size()) % compress != 0) bad(what, "channel widths must divide by compress");
  if (!(frame_rate > 0)) bad(what, "frame_rate must be positive");
  const double enc_rate = double(sample_rate) / hop();
  const double stride = enc_rate / frame_rate;
  if (std::abs(stride - std::round(stride)) > 1e-9 || std::round(stride) < 1)
    bad(what, "sample_rate / prod(ratios) / frame_rate must be a whole number");
}

int Config::hop() const {
  int h = 1;
  for (int r : ratios) h *= r;
  return h;
}

int Config::downsample_stride() const {
  return int(std::lround(double(sample_rate) / hop() / frame_rate));
}

nlohmann::json Config::to_json() const {
  return {
      {"model_type", "mimi"},
      {"sampling_rate", sample_rate},
      {"frame_rate", frame_rate},
      {"audio_channels", channels},
      {"hidden_size", dimension},
      {"num_filters", n_filters},
      {"num_residual_layers", n_residual_layers},
      {"upsampling_ratios", ratios},
      {"kernel_size", kernel_size},
      {"last_kernel_size", last_kernel_size},
      {"residual_kernel_size", residual_kernel_size},
      {"dilation_growth_rate", dilation_base},
      {"compress", compress},
      {"num_attention_heads", num_heads},
      {"num_key_value_heads", num_heads},
      {"head_dim", head_dim()},
      {"num_hidden_layers", num_layers},
      {"intermediate_size", dim_feedforward},
      {"sliding_window", context},
      {"rope_theta", max_period},
      {"norm_eps", norm_eps},
      {"codebook_dim", q_dimension},
      {"vector_quantization_hidden_dimension", q_dimension},
      {"num_quantizers", n_q},
      {"codebook_size", bins},
      {"num_semantic_quantizers", n_q_semantic},
      {"upsample_groups", dimension},
      {"use_causal_conv", true},
      {"use_conv_shortcut", false},
      {"pad_mode", "constant"},
      {"trim_right_ratio", 1.0},
  };
}

}  // namespace mimi
