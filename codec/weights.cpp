#include "codec/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "codec/error.h"

namespace mimi {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& msg) {
  throw Error(ErrorKind::Weights, what + ": " + msg);
}

// NaN or Inf anywhere in a weight would silently poison every output: refused at load. The
// check itself is fused into the fingerprint pass (Hasher::bytes); this finds and names the
// culprit once that pass saw one.
void require_finite(const std::string& file, const std::string& name, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      bad(file, "tensor '" + name + "' holds a non-finite value (" + (std::isnan(x[i]) ? "NaN" : "Inf") +
                    ") at element " + std::to_string(i) + ": the weights are corrupt");
}

bool is_float(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F64; }

// Fetches tensors by moshi name from a file of either dialect, checking dtype and shape, and
// remembering which file tensors were consumed.
class Fetcher {
 public:
  Fetcher(const SafetensorsFile& f, Dialect d, const Config& cfg) : f_(f), dialect_(d), cfg_(cfg) {}

  Tensor get(const TensorSpec& spec) {
    if (spec.name.find("in_proj_weight") != std::string::npos && dialect_ == Dialect::HuggingFace)
      return get_split_in_proj(spec);
    const std::string name = dialect_ == Dialect::HuggingFace ? hf_name(spec.name) : spec.name;
    return checked(name, spec.shape);
  }

  // The file tensors `spec` was made from (HF: q, k and v for a fused in_proj).
  std::vector<std::string> file_names(const TensorSpec& spec) const {
    if (spec.name.find("in_proj_weight") != std::string::npos && dialect_ == Dialect::HuggingFace) {
      const QkvNames n = hf_split_names(spec.name);
      return {n.q, n.k, n.v};
    }
    return {dialect_ == Dialect::HuggingFace ? hf_name(spec.name) : spec.name};
  }

  // Lets the file's pages behind the moshi-named tensor go (SafetensorsFile::release).
  void release(const std::string& moshi_name) const {
    for (const std::string& n : file_names(TensorSpec{moshi_name, {}, {}, 0})) f_.release(n);
  }

  // Throws the error naming the file tensor and element behind a non-finite value in `spec`.
  [[noreturn]] void fail_nonfinite(const TensorSpec& spec) const {
    for (const std::string& n : file_names(spec)) {
      const Tensor t = f_.to_f32(n);
      require_finite(f_.path(), n, t.data, t.size());
    }
    bad(f_.path(), "tensor '" + spec.name + "' holds a non-finite value");
  }

  void require_all_used() const {
    std::vector<std::string> extra;
    for (const auto& [name, info] : f_.tensors())
      if (!used_.count(name)) extra.push_back(name);
    if (!extra.empty()) {
      std::string list;
      for (size_t i = 0; i < extra.size() && i < 5; ++i) list += (i ? ", " : "") + extra[i];
      if (extra.size() > 5) list += ", ... (" + std::to_string(extra.size()) + " in all)";
      bad(f_.path(), "unexpected tensors for this Mimi config: " + list +
                         " (wrong --config, or not a Mimi checkpoint?)");
    }
  }

 private:
  Tensor checked(const std::string& name, const Shape& expected) {
    if (!f_.has(name))
      bad(f_.path(), "missing tensor '" + name + "' (" + dialect_name(dialect_) + " naming, expected shape " +
                         shape_str(expected) + ")");
    const TensorInfo& info = f_.info(name);
    if (!is_float(info.dtype))
      bad(f_.path(), "tensor '" + name + "': got dtype " + dtype_name(info.dtype) +
                         ", expected F32, F16, BF16 or F64");
    if (info.shape != expected)
      bad(f_.path(), "tensor '" + name + "': got shape " + shape_str(info.shape) + ", expected " +
                         shape_str(expected) + " (does the config match the weights? pass --config)");
    used_.insert(name);
    return f_.to_f32(name);
  }

  // HF stores q/k/v separately, q and k rows permuted for rotate-half RoPE: undo it.
  Tensor get_split_in_proj(const TensorSpec& spec) {
    const int64_t d = cfg_.d_model, hd = cfg_.head_dim();
    const QkvNames n = hf_split_names(spec.name);
    const Tensor q = checked(n.q, {d, d}), k = checked(n.k, {d, d}), v = checked(n.v, {d, d});
    std::vector<float> w(static_cast<size_t>(3 * d * d));
    for (int64_t r = 0; r < d; ++r) {
      const int64_t m = hf_row_to_moshi_row(r, hd);
      std::memcpy(&w[m * d], q.data + r * d, size_t(d) * 4);
      std::memcpy(&w[(d + m) * d], k.data + r * d, size_t(d) * 4);
      std::memcpy(&w[(2 * d + r) * d], v.data + r * d, size_t(d) * 4);
    }
    return Tensor::from_vector({3 * d, d}, std::move(w));
  }

  const SafetensorsFile& f_;
  Dialect dialect_;
  const Config& cfg_;
  std::set<std::string> used_;
};

// Whether any of n float32 values (as bits) is NaN or Inf: |x| >= 0x7f800000. Compiled for
// AVX-512 / AVX2 / baseline and picked at run time, so it costs little next to the hash.
__attribute__((target_clones("avx512f", "avx2", "default"))) uint32_t any_nonfinite(const uint8_t* p, size_t n) {
  uint32_t bad = 0;
  for (size_t k = 0; k < n; ++k) {
    uint32_t u;
    std::memcpy(&u, p + 4 * k, 4);
    bad |= uint32_t((u & 0x7fffffffu) > 0x7f7fffffu);
  }
  return bad;
}

// 64-bit multiply-xorshift hash over words; four lanes for speed. Not cryptographic: it
// identifies which weights made a token file.
struct Hasher {
  uint64_t h[4] = {0x9E3779B97F4A7C15ull, 0xBF58476D1CE4E5B9ull, 0x94D049BB133111EBull, 0xD6E8FEB86659FD93ull};
  static uint64_t mix(uint64_t x) {
    x ^= x >> 31;
    x *= 0x7FB5D329728EA185ull;
    x ^= x >> 27;
    x *= 0x81DADEF4BC2DD44Dull;
    return x ^ (x >> 33);
  }
  // Also notes, for float32 data (n a multiple of 4), whether a value is NaN or Inf (exponent
  // bits all ones): checked in the same pass, so the weights are read from memory once.
  bool nonfinite = false;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    size_t i = 0;
    uint32_t bad = 0;
    // Blocks of 256 KB: hashed, then scanned while still in L2 (measured: no cost over the hash).
    for (size_t b0 = 0; b0 < n; b0 += 262144) {
      const size_t b1 = std::min(n, b0 + 262144);
      for (; i + 32 <= b1; i += 32)
        for (int l = 0; l < 4; ++l) {
          uint64_t w;
          std::memcpy(&w, b + i + 8 * l, 8);
          h[l] = (h[l] ^ w) * 0x100000001B3ull + (h[l] >> 29);
        }
      bad |= any_nonfinite(b + b0, (b1 - b0) / 4);
    }
    for (; i < n; ++i) h[0] = (h[0] ^ b[i]) * 0x100000001B3ull;
    for (int l = 0; l < 4; ++l) h[l] ^= n;
    nonfinite = bad != 0;
  }
  std::string hex() const {
    uint64_t a = mix(h[0] ^ mix(h[1])), c = mix(h[2] ^ mix(h[3] ^ a));
    char buf[33];
    snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)a, (unsigned long long)c);
    return buf;
  }
};

Conv make_conv(Tensor w, Tensor b, int64_t stride, int64_t dilation, PadMode pad) {
  Conv c;
  c.shape.out_channels = w.shape[0];
  c.shape.in_channels = w.shape[1];
  c.shape.kernel = w.shape[2];
  c.shape.stride = stride;
  c.shape.dilation = dilation;
  c.shape.pad = pad;
  c.weight = std::move(w);
  c.bias = std::move(b);
  return c;
}

ConvTr make_convtr(Tensor w, Tensor b, int64_t stride, int64_t groups) {
  ConvTr c;
  c.shape.in_channels = w.shape[0];
  c.shape.out_channels = w.shape[1] * groups;
  c.shape.kernel = w.shape[2];
  c.shape.stride = stride;
  c.shape.groups = groups;
  c.weight = std::move(w);
  c.bias = std::move(b);
  return c;
}

Tensor reshape(Tensor t, Shape s) {
  t.shape = std::move(s);
  return t;
}

}  // namespace

Dialect detect_dialect(const SafetensorsFile& f) {
  bool moshi = false, hf = false;
  for (const auto& [name, info] : f.tensors()) {
    if (name.rfind("encoder.model.", 0) == 0 || name.rfind("quantizer.rvq_", 0) == 0) moshi = true;
    if (name.rfind("encoder.layers.", 0) == 0 || name.rfind("quantizer.semantic_residual", 0) == 0) hf = true;
  }
  if (moshi == hf)
    bad(f.path(), moshi ? "mixes moshi and Hugging Face tensor names"
                        : "not a Mimi checkpoint (neither moshi 'encoder.model.*' nor Hugging Face "
                          "'encoder.layers.*' tensors)");
  return moshi ? Dialect::Moshi : Dialect::HuggingFace;
}

Config resolve_config(const std::string& weights_path, const LoadOptions& opts, std::string* origin) {
  if (opts.config_path) {
    if (origin) *origin = *opts.config_path;
    return Config::from_file(*opts.config_path);
  }
  namespace fs = std::filesystem;
  const fs::path beside = fs::path(weights_path).parent_path() / "config.json";
  std::error_code ec;
  if (fs::is_regular_file(beside, ec)) {
    // An unrelated (non-Mimi) config.json beside a checkpoint is ignored; one that cannot be
    // read or is not JSON is an error: it may well be the Mimi config, damaged.
    std::ifstream in(beside);
    if (!in) bad(beside.string(), "cannot read the config beside the weights");
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
      bad(beside.string(), "the config beside the weights is not valid JSON (fix or remove it, or pass --config)");
    if (Config::looks_like_mimi(j)) {
      if (origin) *origin = beside.string();
      return Config::from_json(j, beside.string());
    }
  }
  if (origin) *origin = "official defaults";
  return Config::official();
}

std::shared_ptr<const Model> load_model(const std::string& weights_path, const LoadOptions& opts) {
  const Config cfg = resolve_config(weights_path, opts);
  SafetensorsFile file = [&] {
    try {
      return SafetensorsFile::open(weights_path);
    } catch (const Error& e) {  // a broken weights file is a weights error, not an input error
      throw Error(ErrorKind::Weights, e.what());
    }
  }();
  return load_model(file, cfg);
}

std::shared_ptr<const Model> load_model(const SafetensorsFile& file, const Config& cfg) {
  auto m = std::make_shared<Model>();
  m->cfg = cfg;
  m->source = file.path();
  m->dialect = detect_dialect(file);
  Fetcher fetch(file, m->dialect, cfg);

  // Fetch every tensor of the spec, in order, and fingerprint the canonical values.
  std::map<std::string, Tensor> t;
  Hasher hasher;
  for (const TensorSpec& spec : mimi_tensor_specs(cfg)) {
    Tensor x = fetch.get(spec);
    hasher.bytes(spec.name.data(), spec.name.size());
    hasher.bytes(x.data, size_t(x.size()) * 4);
    if (hasher.nonfinite) fetch.fail_nonfinite(spec);  // NaN/Inf in a weight: refused, naming it
    // Hashing read every page of the file: let them go as we pass, so the load never holds
    // the whole file and a run pages back in only what its direction uses (a zero-copy tensor
    // keeps pointing into the mapping; its pages come back on first use).
    fetch.release(spec.name);
    t.emplace(spec.name, std::move(x));
  }
  fetch.require_all_used();
  m->fingerprint = hasher.hex();

  auto take = [&](const std::string& n) { return t.at(n); };
  auto conv = [&](const std::string& p, int64_t stride = 1, int64_t dil = 1) {
    return make_conv(take(p + ".conv.conv.weight"), take(p + ".conv.conv.bias"), stride, dil, PadMode::Zero);
  };
  auto resblock = [&](const std::string& p, int64_t dil) {
    return ResBlock{conv(p + ".block.1", 1, dil), conv(p + ".block.3")};
  };

  // SEANet encoder
  m->enc_in = conv("encoder.model.0");
  int idx = 1;
  for (auto it = cfg.ratios.rbegin(); it != cfg.ratios.rend(); ++it) {
    EncoderStage st;
    int64_t dil = 1;
    for (int j = 0; j < cfg.n_residual_layers; ++j, dil *= cfg.dilation_base)
      st.res.push_back(resblock("encoder.model." + std::to_string(idx++), dil));
    ++idx;  // ELU
    st.down = conv("encoder.model." + std::to_string(idx++), *it);
    m->enc.push_back(std::move(st));
  }
  m->enc_out = conv("encoder.model." + std::to_string(idx + 1));

  // SEANet decoder
  m->dec_in = conv("decoder.model.0");
  idx = 1;
  for (int r : cfg.ratios) {
    DecoderStage st;
    ++idx;  // ELU
    const std::string p = "decoder.model." + std::to_string(idx++) + ".convtr.convtr";
    st.up = make_convtr(take(p + ".weight"), take(p + ".bias"), r, 1);
    int64_t dil = 1;
    for (int j = 0; j < cfg.n_residual_layers; ++j, dil *= cfg.dilation_base)
      st.res.push_back(resblock("decoder.model." + std::to_string(idx++), dil));
    m->dec.push_back(std::move(st));
  }
  m->dec_out = conv("decoder.model." + std::to_string(idx + 1));

  auto transformer = [&](const std::string& prefix) {
    std::vector<TransformerLayer> layers;
    for (int l = 0; l < cfg.num_layers; ++l) {
      const std::string p = prefix + ".transformer.layers." + std::to_string(l) + ".";
      layers.push_back({take(p + "self_attn.in_proj_weight"), take(p + "self_attn.out_proj.weight"),
                        take(p + "norm1.weight"), take(p + "norm1.bias"), take(p + "norm2.weight"),
                        take(p + "norm2.bias"), take(p + "linear1.weight"), take(p + "linear2.weight"),
                        take(p + "layer_scale_1.scale"), take(p + "layer_scale_2.scale")});
    }
    return layers;
  };
  m->enc_tf = transformer("encoder_transformer");
  m->dec_tf = transformer("decoder_transformer");

  const int64_t D = cfg.dimension, Q = cfg.q_dimension, bins = cfg.bins;
  auto group = [&](const std::string& prefix, int n) {
    QuantizerGroup g;
    g.input_proj = reshape(take(prefix + ".input_proj.weight"), {Q, D});
    g.output_proj = reshape(take(prefix + ".output_proj.weight"), {D, Q});
    for (int i = 0; i < n; ++i) {
      const std::string p = prefix + ".vq.layers." + std::to_string(i) + "._codebook.";
      const Tensor sum = take(p + "embedding_sum"), usage = take(p + "cluster_usage");
      std::vector<float> e(static_cast<size_t>(bins * Q)), sq(static_cast<size_t>(bins));
      for (int64_t b = 0; b < bins; ++b) {
        const float u = std::max(usage.data[b], 1e-5f);
        float acc = 0.0f;
        for (int64_t q = 0; q < Q; ++q) {
          e[b * Q + q] = sum.data[b * Q + q] / u;
          acc += e[b * Q + q] * e[b * Q + q];
        }
        // finite inputs, but embedding_sum / cluster_usage can overflow (then so does the norm)
        if (!std::isfinite(acc))
          bad(file.path(), "codebook '" + p + "embedding_sum' / cluster_usage overflows float32 at entry " +
                               std::to_string(b) + ": the weights are corrupt");
        sq[b] = acc;
      }
      fetch.release(p + "embedding_sum");  // read back in for the division above: go again
      fetch.release(p + "cluster_usage");
      g.books.push_back({Tensor::from_vector({bins, Q}, std::move(e)), Tensor::from_vector({bins}, std::move(sq))});
    }
    return g;
  };
  m->semantic = group("quantizer.rvq_first", cfg.n_q_semantic);
  m->acoustic = group("quantizer.rvq_rest", cfg.n_q - cfg.n_q_semantic);

  const int64_t s = cfg.downsample_stride();
  m->downsample = make_conv(take("downsample.conv.conv.conv.weight"), Tensor{}, s, 1, PadMode::Replicate);
  m->upsample = make_convtr(take("upsample.convtr.convtr.convtr.weight"), Tensor{}, s, D);
  // Reads since the hash pass (the codebooks) paged back neighbours too (the kernel maps pages
  // around a fault): none needs to stay.
  file.release_all();
  return m;
}

}  // namespace mimi
