#include "codec/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "codec/error.h"
#include "codec/open_file.h"

namespace mimi {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& msg) {
  throw Error(ErrorKind::Weights, what + ": " + msg);
}

// Typed reads: a value of the wrong JSON type, or a number that does not fit, is an error that
// names the field (never a silent conversion: nlohmann's get<int> truncates 3.7 and wraps 5e9).
int to_int(const nlohmann::json& v, const std::string& field, const std::string& what) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(INT32_MAX)
                               : v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
      bad(what, field + " = " + v.dump() + " is out of range");
    return int(v.get<int64_t>());
  }
  if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::trunc(v.get<double>())) {
    const double d = v.get<double>();  // 8.0, as some exporters write integers
    if (d < INT32_MIN || d > INT32_MAX) bad(what, field + " = " + v.dump() + " is out of range");
    return int(d);
  }
  bad(what, field + " must be an integer, got " + v.dump());
}

void get(const nlohmann::json& j, const char* key, int& out, const std::string& what) {
  if (j.contains(key) && !j[key].is_null()) out = to_int(j[key], key, what);
}

void get(const nlohmann::json& j, const char* key, double& out, const std::string& what) {
  if (!j.contains(key) || j[key].is_null()) return;
  const nlohmann::json& v = j[key];
  if (!v.is_number()) bad(what, std::string(key) + " must be a number, got " + v.dump());
  out = v.get<double>();
  if (!std::isfinite(out)) bad(what, std::string(key) + " must be finite, got " + v.dump());
}

void get(const nlohmann::json& j, const char* key, std::vector<int>& out, const std::string& what) {
  if (!j.contains(key) || j[key].is_null()) return;
  const nlohmann::json& v = j[key];
  if (!v.is_array()) bad(what, std::string(key) + " must be a list of integers, got " + v.dump());
  if (v.size() > 64) bad(what, std::string(key) + " has " + std::to_string(v.size()) + " entries");
  std::vector<int> r;
  for (size_t i = 0; i < v.size(); ++i) r.push_back(to_int(v[i], std::string(key) + "[" + std::to_string(i) + "]", what));
  out = std::move(r);
}

// An optional section (moshi's "seanet", "transformer", "quantizer"): an object, or absent.
const nlohmann::json& section(const nlohmann::json& j, const char* key, const std::string& what) {
  static const nlohmann::json empty = nlohmann::json::object();
  if (!j.contains(key) || j[key].is_null()) return empty;
  if (!j[key].is_object()) bad(what, std::string(key) + " must be an object, got " + j[key].dump());
  return j[key];
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
  if (!j.is_object()) bad(what, "a config must be a JSON object");
  try {
    if (j.contains("seanet")) {  // moshi style
      get(j, "sample_rate", c.sample_rate, what);
      get(j, "frame_rate", c.frame_rate, what);
      get(j, "channels", c.channels, what);
      const auto& s = section(j, "seanet", what);
      get(s, "dimension", c.dimension, what);
      get(s, "n_filters", c.n_filters, what);
      get(s, "n_residual_layers", c.n_residual_layers, what);
      get(s, "ratios", c.ratios, what);
      get(s, "kernel_size", c.kernel_size, what);
      get(s, "last_kernel_size", c.last_kernel_size, what);
      get(s, "residual_kernel_size", c.residual_kernel_size, what);
      get(s, "dilation_base", c.dilation_base, what);
      get(s, "compress", c.compress, what);
      require(s, "causal", true, what);
      require(s, "true_skip", true, what);
      require(s, "pad_mode", "constant", what);
      require(s, "norm", "none", what);
      const auto& t = section(j, "transformer", what);
      get(t, "d_model", c.d_model, what);
      get(t, "num_heads", c.num_heads, what);
      get(t, "num_layers", c.num_layers, what);
      get(t, "dim_feedforward", c.dim_feedforward, what);
      get(t, "context", c.context, what);
      get(t, "max_period", c.max_period, what);
      require(t, "causal", true, what);
      require(t, "gating", "none", what);
      require(t, "norm", "layer_norm", what);
      require(t, "positional_embedding", "rope", what);
      const auto& q = section(j, "quantizer", what);
      get(q, "dimension", c.q_dimension, what);
      get(q, "n_q", c.n_q, what);
      get(q, "bins", c.bins, what);
    } else {  // Hugging Face MimiConfig
      get(j, "sampling_rate", c.sample_rate, what);
      get(j, "frame_rate", c.frame_rate, what);
      get(j, "audio_channels", c.channels, what);
      get(j, "hidden_size", c.dimension, what);
      c.d_model = c.dimension;
      get(j, "num_filters", c.n_filters, what);
      get(j, "num_residual_layers", c.n_residual_layers, what);
      get(j, "upsampling_ratios", c.ratios, what);
      get(j, "kernel_size", c.kernel_size, what);
      get(j, "last_kernel_size", c.last_kernel_size, what);
      get(j, "residual_kernel_size", c.residual_kernel_size, what);
      get(j, "dilation_growth_rate", c.dilation_base, what);
      get(j, "compress", c.compress, what);
      get(j, "num_attention_heads", c.num_heads, what);
      get(j, "num_hidden_layers", c.num_layers, what);
      get(j, "intermediate_size", c.dim_feedforward, what);
      get(j, "sliding_window", c.context, what);
      get(j, "norm_eps", c.norm_eps, what);
      const auto& rope = section(j, "rope_parameters", what);
      if (rope.contains("rope_theta"))
        get(rope, "rope_theta", c.max_period, what);
      else
        get(j, "rope_theta", c.max_period, what);
      get(j, "codebook_dim", c.q_dimension, what);
      get(j, "num_quantizers", c.n_q, what);
      get(j, "codebook_size", c.bins, what);
      get(j, "num_semantic_quantizers", c.n_q_semantic, what);
      require(j, "use_causal_conv", true, what);
      require(j, "use_conv_shortcut", false, what);
      require(j, "pad_mode", "constant", what);
      require(j, "trim_right_ratio", 1.0, what);
      require(j, "hidden_act", "gelu", what);
      require(j, "attention_bias", false, what);
      // redundant fields: must agree with the ones above when present
      auto same = [&](const char* key, int expected, const char* msg) {
        int v = expected;
        get(j, key, v, what);
        if (v != expected) bad(what, msg);
      };
      same("num_key_value_heads", c.num_heads, "num_key_value_heads must equal num_attention_heads");
      if (j.contains("head_dim") && !j["head_dim"].is_null()) {
        int hd = 0;
        get(j, "head_dim", hd, what);
        if (int64_t(hd) * c.num_heads != c.d_model) bad(what, "head_dim * num_attention_heads must equal hidden_size");
      }
      same("vector_quantization_hidden_dimension", c.q_dimension,
           "vector_quantization_hidden_dimension must equal codebook_dim");
      same("upsample_groups", c.dimension, "upsample_groups must equal hidden_size");
    }
  } catch (const nlohmann::json::exception& e) {
    bad(what, std::string("bad config value: ") + e.what());
  }
  c.validate(what);
  return c;
}

// A config from a stream (a pipe, /dev/stdin, a FIFO, a terminal) can be read once: a second
// open of `<(cat config.json)` finds the pipe drained and reads nothing (and a FIFO's waits for a
// new writer). Yet a run reads its config more than once (resolve_config for the log, then the
// load; `info` once per weights file). So the bytes of a non-regular config are kept, by the
// identity stat gives (st_dev, st_ino: the pipe itself, whichever path names it), and every later
// read of that stream in this process gets the same bytes. Its descriptor is kept open with them:
// a closed pipe's (or deleted FIFO's) inode number is reused by the next one, which must not pass
// for it. A regular file is read afresh.
namespace {
struct StreamConfig {
  int fd;  // (never closed: holds the identity)
  std::string text;
};
std::mutex stream_configs_mutex;
std::map<std::pair<dev_t, ino_t>, StreamConfig> stream_configs;
}  // namespace

std::string Config::read_file(const std::string& path) {
  constexpr size_t kMax = size_t(16) << 20;  // a config is a few KB; /dev/zero must not eat memory
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    std::lock_guard<std::mutex> lock(stream_configs_mutex);
    if (auto it = stream_configs.find({st.st_dev, st.st_ino}); it != stream_configs.end()) return it->second.text;
  }
  const int fd = open_for_reading(path, ErrorKind::Weights, "cannot open the config");
  std::string text;
  char buf[1 << 16];
  // To the end, whatever st_size says (0 for a pipe), and never more than kMax.
  for (;;) {
    const ssize_t k = ::read(fd, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      const int e = errno;
      ::close(fd);
      throw sys_error(e, ErrorKind::Weights, path, "cannot read the config");
    }
    if (k == 0) break;
    text.append(buf, size_t(k));
    if (text.size() > kMax) {
      ::close(fd);
      bad(path, "more than 16 MiB: not a model config");
    }
  }
  if (::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
    std::lock_guard<std::mutex> lock(stream_configs_mutex);
    if (stream_configs.emplace(std::make_pair(st.st_dev, st.st_ino), StreamConfig{fd, text}).second) return text;
  }
  ::close(fd);
  return text;
}

Config Config::from_file(const std::string& path) {
  const std::string text = read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    bad(path, std::string("not valid JSON: ") + e.what());
  }
  if (!looks_like_mimi(j)) bad(path, "not a Mimi config (no model_type \"mimi\", no seanet/quantizer keys)");
  return from_json(j, path);
}

// Bounds well beyond every published Mimi (official: 24 kHz, ratios 8 6 5 4, D 512, 8 layers,
// context 250, 32 x 2048 codebooks) but small enough that no size derived from the config alone
// (before the weights file is checked against it) overflows or allocates gigabytes.
void Config::validate(const std::string& what) const {
  auto in_range = [&](int64_t v, int64_t lo, int64_t hi, const std::string& name) {
    if (v < lo || v > hi)
      bad(what, name + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v));
  };
  in_range(sample_rate, 1000, 768000, "sample_rate");
  if (channels != 1) bad(what, "only mono models are supported (channels = " + std::to_string(channels) + ")");
  in_range(dimension, 1, 8192, "dimension");
  in_range(n_filters, 1, 4096, "n_filters");
  in_range(n_residual_layers, 1, 16, "n_residual_layers");
  if (ratios.empty()) bad(what, "ratios must not be empty");
  in_range(int64_t(ratios.size()), 1, 16, "the number of ratios");
  int64_t hop = 1;
  for (int r : ratios) {
    in_range(r, 1, 64, "ratio");
    hop *= r;  // checked after every step: no overflow
    in_range(hop, 1, 1 << 20, "the product of the ratios");
  }
  in_range(kernel_size, 1, 255, "kernel_size");
  in_range(last_kernel_size, 1, 255, "last_kernel_size");
  in_range(residual_kernel_size, 1, 255, "residual_kernel_size");
  in_range(dilation_base, 1, 16, "dilation_base");
  int64_t dilation = 1;
  for (int i = 1; i < n_residual_layers; ++i) {
    dilation *= dilation_base;
    in_range(dilation, 1, 1 << 16, "the largest residual dilation (dilation_base^(n_residual_layers - 1))");
  }
  in_range(compress, 1, 64, "compress");
  in_range(int64_t(n_filters) << ratios.size(), 1, 1 << 16, "the widest SEANet channel count (n_filters * 2^len(ratios))");
  if (n_filters % compress != 0)  // every SEANet width is n_filters * 2^i; residual blocks use width / compress
    bad(what, "channel widths must divide by compress (n_filters " + std::to_string(n_filters) + ", compress " +
                  std::to_string(compress) + ")");
  in_range(d_model, 1, 8192, "d_model");
  if (d_model != dimension) bad(what, "transformer d_model must equal the SEANet dimension");
  in_range(num_heads, 1, d_model, "num_heads");
  if (d_model % num_heads != 0 || head_dim() % 2 != 0)
    bad(what, "d_model / num_heads must be an even integer (d_model " + std::to_string(d_model) + ", num_heads " +
                  std::to_string(num_heads) + ")");
  in_range(num_layers, 1, 64, "num_layers");
  in_range(dim_feedforward, 1, 65536, "dim_feedforward");
  in_range(context, 1, 8192, "context (sliding_window)");
  if (!(std::isfinite(max_period) && max_period >= 1.0 && max_period <= 1e12))
    bad(what, "max_period (rope_theta) must be in [1, 1e12], got " + std::to_string(max_period));
  if (!(std::isfinite(norm_eps) && norm_eps >= 1e-30 && norm_eps <= 1.0))
    bad(what, "norm_eps must be in [1e-30, 1], got " + std::to_string(norm_eps));
  in_range(q_dimension, 1, 8192, "q_dimension (codebook_dim)");
  in_range(n_q, 1, 1024, "n_q (num_quantizers)");
  in_range(bins, 1, 1 << 20, "bins (codebook_size)");
  if (n_q_semantic != 1) bad(what, "exactly one semantic codebook is supported");
  if (!(std::isfinite(frame_rate) && frame_rate > 0 && frame_rate <= sample_rate))
    bad(what, "frame_rate must be positive and at most sample_rate, got " + std::to_string(frame_rate));
  const double stride = double(sample_rate) / double(hop) / frame_rate;
  if (std::abs(stride - std::round(stride)) > 1e-9 || std::round(stride) < 1)
    bad(what, "sample_rate / prod(ratios) / frame_rate must be a whole number");
  // (compared as a double: a frame_rate of 1e-300 makes a stride no int64 holds)
  if (std::round(stride) > 64)
    bad(what, "the downsample stride (sample_rate / prod(ratios) / frame_rate) must be 1..64, got " +
                  std::to_string(stride));
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
