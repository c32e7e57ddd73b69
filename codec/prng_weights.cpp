#include "codec/prng_weights.h"

#include <cmath>

#include "codec/error.h"
#include "kernels/cpu/threads.h"

namespace mimi {

Config test_config(const std::string& name) {
  Config c = Config::official();
  if (name == "full") return c;
  if (name != "tiny" && name != "tiny-window")
    throw Error(ErrorKind::Usage, "unknown test config '" + name + "' (full, tiny, tiny-window)");
  c.dimension = 32;
  c.n_filters = 4;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.dim_feedforward = 64;
  c.q_dimension = 16;
  c.n_q = 8;
  c.bins = 64;
  if (name == "tiny-window") c.context = 5;
  return c;
}

uint64_t prng_base(const std::string& name, uint64_t seed) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 0x100000001B3ull;
  }
  return h ^ (seed * 0x9E3779B97F4A7C15ull);
}

double prng_v(uint64_t base, uint64_t i) {
  uint64_t z = base + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z = z ^ (z >> 31);
  return 2.0 * (double(z >> 40) / 16777216.0) - 1.0;  // exact
}

TensorRule tensor_rule(const TensorSpec& s, const Config& cfg) {
  const std::string& k = s.kind;
  if (k == "conv_weight" || k == "convtr_weight") return {0.0, 1.25 * std::sqrt(3.0 / double(s.fan_in))};
  if (k == "conv_bias") return {0.0, 0.01};
  if (k == "linear_weight" || k == "down_weight" || k == "up_weight" || k == "qproj_weight")
    return {0.0, 1.0 * std::sqrt(3.0 / double(s.fan_in))};
  if (k == "norm_weight") return {1.0, 0.2};
  if (k == "norm_bias") return {0.0, 0.1};
  if (k == "layer_scale") return {0.1, 0.05};
  if (k == "initialized") return {1.0, 0.0};
  if (k == "cluster_usage") return {1.0, 0.25};
  if (k == "embedding_sum") {
    // The spec pins these two b values (log is not correctly rounded everywhere).
    if (cfg.bins == 2048 && cfg.q_dimension == 256) return {0.0, 0x1.b0e08d9986a8dp-3};
    if (cfg.bins == 64 && cfg.q_dimension == 16) return {0.0, 0x1.3fb372d0959f5p-1};
    return {0.0, 0.5 * std::sqrt(3.0) * std::sqrt(2.0 * std::log(double(cfg.bins)) / double(cfg.q_dimension))};
  }
  throw Error(ErrorKind::Internal, "no PRNG rule for tensor kind " + k);
}

GeneratedWeights generate_prng_weights(const Config& cfg, uint64_t seed) {
  GeneratedWeights w;
  w.cfg = cfg;
  w.specs = mimi_tensor_specs(cfg);
  w.values.resize(w.specs.size());
  for (size_t t = 0; t < w.specs.size(); ++t) {
    const TensorSpec& s = w.specs[t];
    const TensorRule r = tensor_rule(s, cfg);
    const uint64_t base = prng_base(s.name, seed);
    std::vector<float>& v = w.values[t];
    v.resize(size_t(numel(s.shape)));
    const int64_t n = int64_t(v.size());
    cpu::parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        volatile double bv = r.b * prng_v(base, uint64_t(i));  // rounded to double, no FMA
        volatile double sum = r.a + bv;
        v[size_t(i)] = float(sum);
      }
    });
  }
  return w;
}

std::vector<uint8_t> prng_weights_file(const GeneratedWeights& w, Dialect dialect,
                                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorToWrite> out;
  std::vector<std::vector<float>> split;  // storage for permuted q/k/v
  split.reserve(3 * size_t(2 * w.cfg.num_layers));
  const int64_t d = w.cfg.d_model, hd = w.cfg.head_dim();
  for (size_t t = 0; t < w.specs.size(); ++t) {
    const TensorSpec& s = w.specs[t];
    const float* data = w.values[t].data();
    if (dialect == Dialect::Moshi) {
      out.push_back({s.name, DType::F32, s.shape, data});
    } else if (s.name.find("in_proj_weight") == std::string::npos) {
      out.push_back({hf_name(s.name), DType::F32, s.shape, data});
    } else {
      const QkvNames n = hf_split_names(s.name);
      for (int part = 0; part < 3; ++part) {
        std::vector<float> m(static_cast<size_t>(d * d));
        for (int64_t r = 0; r < d; ++r) {
          const int64_t src = part < 2 ? hf_row_to_moshi_row(r, hd) : r;
          std::copy(data + (part * d + src) * d, data + (part * d + src + 1) * d, m.begin() + r * d);
        }
        split.push_back(std::move(m));
        out.push_back({part == 0 ? n.q : part == 1 ? n.k : n.v, DType::F32, {d, d}, split.back().data()});
      }
    }
  }
  return safetensors_bytes(out, metadata);
}

void write_prng_weights(const std::string& path, const GeneratedWeights& w, Dialect dialect,
                        const std::map<std::string, std::string>& metadata) {
  write_bytes(path, prng_weights_file(w, dialect, metadata));
}

}  // namespace mimi
