#include "codec/weights.h"

#include <sys/mman.h>

#include <algorithm>
#include <ctime>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <new>
#include <set>
#include <system_error>
#include <thread>

#include "codec/error.h"
#include "codec/prepared_weights.h"
#include "codec/sha256.h"

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

// Reads tensors by moshi name from a file of either dialect, checking dtype and shape, and
// remembering which file tensors were consumed.
class Fetcher {
 public:
  Fetcher(const SafetensorsFile& f, Dialect d, const Config& cfg) : f_(f), dialect_(d), cfg_(cfg) {}

  // Tensor `spec` (moshi layout) as float32 into dst[numel(spec.shape)].
  void read(const TensorSpec& spec, float* dst) {
    if (fused(spec)) return read_split_in_proj(spec, dst);
    const std::string name = dialect_ == Dialect::HuggingFace ? hf_name(spec.name) : spec.name;
    checked(name, spec.shape);
    f_.read_f32(name, dst);
  }

  // Tensor `spec` as a view of the file's bytes, when they are in memory (never changing),
  // float32 and aligned; else an empty tensor (then read() it into memory of the model's own).
  // Not checked: check() it before use.
  Tensor view(const TensorSpec& spec) const {
    if (!f_.in_memory() || fused(spec)) return {};
    const std::string name = dialect_ == Dialect::HuggingFace ? hf_name(spec.name) : spec.name;
    if (!f_.has(name) || f_.info(name).dtype != DType::F32 ||
        reinterpret_cast<uintptr_t>(f_.data(f_.info(name))) % alignof(float) != 0)
      return {};
    return f_.to_f32(name);  // (zero-copy)
  }
  void check(const TensorSpec& spec) {
    checked(dialect_ == Dialect::HuggingFace ? hf_name(spec.name) : spec.name, spec.shape);
  }

  // The file tensors `spec` was made from (HF: q, k and v for a fused in_proj).
  std::vector<std::string> file_names(const TensorSpec& spec) const {
    if (fused(spec)) {
      const QkvNames n = hf_split_names(spec.name);
      return {n.q, n.k, n.v};
    }
    return {dialect_ == Dialect::HuggingFace ? hf_name(spec.name) : spec.name};
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
  bool fused(const TensorSpec& spec) const {
    return dialect_ == Dialect::HuggingFace && spec.name.find("in_proj_weight") != std::string::npos;
  }

  void checked(const std::string& name, const Shape& expected) {
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
  }

  // HF stores q/k/v separately, q and k rows permuted for rotate-half RoPE: undo it, fusing them
  // into dst ([3D, D], moshi order).
  void read_split_in_proj(const TensorSpec& spec, float* dst) {
    const int64_t d = cfg_.d_model, hd = cfg_.head_dim();
    const QkvNames n = hf_split_names(spec.name);
    checked(n.q, {d, d});
    checked(n.k, {d, d});
    checked(n.v, {d, d});
    part_.resize(static_cast<size_t>(d * d));
    f_.read_f32(n.q, part_.data());
    for (int64_t r = 0; r < d; ++r)
      std::memcpy(dst + hf_row_to_moshi_row(r, hd) * d, part_.data() + r * d, size_t(d) * 4);
    f_.read_f32(n.k, part_.data());
    for (int64_t r = 0; r < d; ++r)
      std::memcpy(dst + (d + hf_row_to_moshi_row(r, hd)) * d, part_.data() + r * d, size_t(d) * 4);
    f_.read_f32(n.v, dst + 2 * d * d);  // v rows in place
  }

  const SafetensorsFile& f_;
  Dialect dialect_;
  const Config& cfg_;
  std::set<std::string> used_;
  std::vector<float> part_;  // one of q/k/v
};

// What a tensor (moshi name, spec kind) is for: which direction computes with it, or only the
// load (cluster_usage divides the codebooks once).
enum class Use { Encoder, Decoder, Both, LoadOnly };
Use use_of(const TensorSpec& spec) {
  const std::string& n = spec.name;
  auto starts = [&](const char* p) { return n.rfind(p, 0) == 0; };
  if (spec.kind == "cluster_usage") return Use::LoadOnly;
  if (starts("encoder.") || starts("encoder_transformer.") || starts("downsample.") ||
      n.find(".input_proj.") != std::string::npos)
    return Use::Encoder;
  if (starts("decoder.") || starts("decoder_transformer.") || starts("upsample.") ||
      n.find(".output_proj.") != std::string::npos)
    return Use::Decoder;
  return Use::Both;  // the codebooks (and anything a later config adds: kept, to be safe)
}

// One allocation for the weights the model keeps (the process's own memory: a file changed
// after the load cannot reach it), filled by the reads. Small pages: huge pages made the load
// 5x slower on the reference VM (fresh 2 MB blocks are backed by the host on first touch).
std::shared_ptr<float> weight_arena(size_t floats) {
  constexpr size_t kAlign = 4096;
  const size_t bytes = (floats * sizeof(float) + kAlign - 1) / kAlign * kAlign;
  if (bytes == 0) return nullptr;
  void* p = std::aligned_alloc(kAlign, bytes);
  if (!p) throw std::bad_alloc();
  return std::shared_ptr<float>(static_cast<float*>(p), [](float* q) { std::free(q); });
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// The arena's first touch costs more than reading the file into it (page faults, zeroing: the
// mapped file of before needed neither, its pages were the page cache's). So a second thread
// faults the arena in from its end (MADV_POPULATE_WRITE: the pages' contents are not written)
// while the reads fill it from its start, until the two meet. Without the advice (older
// kernels) or a thread, the reads fault the pages in themselves.
class Prefault {
 public:
  Prefault(float* base, size_t floats) : base_(reinterpret_cast<char*>(base)), end_(floats * sizeof(float)) {
    if (end_ < (size_t(32) << 20)) return;  // (small models: not worth a thread)
    try {
      thread_ = std::thread([this] { run(); });
    } catch (const std::system_error&) {  // (no thread: the reads fault every page)
    }
  }
  ~Prefault() {
    stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
  }
  void reached(const float* p) {  // the reads have filled the arena up to p
    read_.store(size_t(reinterpret_cast<const char*>(p) - base_), std::memory_order_relaxed);
  }

 private:
  void run() {
    constexpr size_t kChunk = size_t(2) << 20;
    size_t end = end_ / kChunk * kChunk;
    while (end >= kChunk && !stop_.load(std::memory_order_relaxed) &&
           end - kChunk > read_.load(std::memory_order_relaxed) + kChunk) {
      if (madvise(base_ + end - kChunk, kChunk, MADV_POPULATE_WRITE) != 0) return;
      end -= kChunk;
    }
  }
  char* base_;
  size_t end_;
  std::atomic<size_t> read_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Whether any of n float32 values (as bits) is NaN or Inf: |x| >= 0x7f800000. On x86-64
// compiled for AVX-512 / AVX2 / baseline and picked at run time (aarch64: Advanced SIMD is the
// baseline), so it costs little next to the hash.
#if defined(__x86_64__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
uint32_t any_nonfinite(const uint8_t* p, size_t n) {
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
    const std::string text = Config::read_file(beside.string());
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
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

namespace {
std::shared_ptr<Model> load_checked(const SafetensorsFile& file, const Config& cfg, Parts parts, TensorMap* kept = nullptr);
}  // namespace

std::shared_ptr<const Model> load_model(const std::string& weights_path, const LoadOptions& opts) {
  const Config cfg = resolve_config(weights_path, opts);
  auto open = [&] {
    try {
      return SafetensorsFile::open(weights_path);
    } catch (const Error& e) {  // a broken weights file is a weights error, not an input error
      if (e.kind() == ErrorKind::Input) throw Error(ErrorKind::Weights, e.what());
      throw;  // (EMFILE, EIO...: the environment's, exit 75)
    }
  };
  CacheReport ignored;
  CacheReport& report = opts.cache_report ? *opts.cache_report : ignored;
  report = {};
  const std::optional<SourceIdentity> id = opts.cache_dir.empty() ? std::nullopt : SourceIdentity::of(weights_path);
  if (!id) return load_model(open(), cfg, opts.parts);
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const bool settled = id->settled(int64_t(now.tv_sec) * 1000000000 + now.tv_nsec);
  // The prepared form of this very file (its identity: device, inode, size, times) and config.
  report.path = prepared_path(opts.cache_dir, *id, cfg);
  if (auto m = map_prepared(report.path, *id, cfg, weights_path, &report.why)) {
    report.state = CacheReport::State::Hit;
    report.why.clear();
    return m;
  }
  if (!settled) {  // (an entry written before stays valid: the file changed since, or it is used)
    report.state = CacheReport::State::Unsettled;
    report.why = weights_path + " changed moments ago: cached once its timestamps would show a further change";
    return load_model(open(), cfg, opts.parts);
  }
  TensorMap t;
  std::shared_ptr<Model> m;
  try {
    m = load_checked(open(), cfg, Parts{}, &t);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Input) throw Error(ErrorKind::Weights, e.what());
    throw;
  }
  report.state = CacheReport::State::Built;
  try {
    // (a file replaced while it was read is not cached under the identity it had before)
    if (SourceIdentity::of(weights_path) != id) throw Error(ErrorKind::Weights, weights_path + " changed while it was read");
    write_prepared(report.path, *id, *m, t, weights_path);
  } catch (const Error& e) {
    report.state = CacheReport::State::NotWritten;
    report.why = e.what();
    return m;
  }
  t.clear();
  // From now on the run computes from the file it wrote, as every later run will.
  std::string why;
  if (auto mapped = map_prepared(report.path, *id, cfg, weights_path, &why)) return mapped;
  report.state = CacheReport::State::NotWritten;
  report.why = "written but not readable back: " + why;
  return m;
}

namespace {

// The model of a file, checked and fingerprinted; `kept` (when given) receives its tensors by moshi
// name, codebooks divided, with their "sq_norm"s (the prepared-weights cache writes them).
std::shared_ptr<Model> load_checked(const SafetensorsFile& file, const Config& cfg, Parts parts, TensorMap* kept) {
  if (!parts.encoder && !parts.decoder) parts = Parts{};  // (nothing asked: everything)
  auto m = std::make_shared<Model>();
  m->cfg = cfg;
  m->source = file.path();
  m->dialect = detect_dialect(file);
  m->has_encoder = parts.encoder;
  m->has_decoder = parts.decoder;
  Fetcher fetch(file, m->dialect, cfg);
  const std::vector<TensorSpec> specs = mimi_tensor_specs(cfg);

  // Where each kept tensor goes: a view of bytes in memory, or its place in the arena (64-byte
  // aligned). The codebook sums are divided in place, so they always get a place of their own.
  std::vector<Tensor> views(specs.size());
  std::vector<int64_t> place(specs.size(), -1);
  size_t arena_floats = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const Use use = use_of(specs[i]);
    const bool keep =
        use == Use::Both || (use == Use::Encoder && parts.encoder) || (use == Use::Decoder && parts.decoder);
    if (!keep) continue;
    if (specs[i].kind != "embedding_sum") views[i] = fetch.view(specs[i]);
    if (!views[i].empty()) continue;
    place[i] = int64_t(arena_floats);
    arena_floats += (size_t(numel(specs[i].shape)) + 15) / 16 * 16;
  }
  const std::shared_ptr<float> arena = weight_arena(arena_floats);
  Prefault prefault(arena.get(), arena_floats);

  // Read every tensor of the spec, in order, and fingerprint the canonical values: the very
  // bytes the model keeps (those not kept pass through a scratch buffer, hashed all the same).
  std::map<std::string, Tensor> t;
  std::vector<float> scratch;
  Hasher hasher;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    const size_t n = size_t(numel(spec.shape));
    Tensor x = views[i];
    if (x.empty()) {
      float* dst = nullptr;
      if (place[i] >= 0) {
        dst = arena.get() + place[i];
      } else {
        if (scratch.size() < n) scratch.resize(n);
        dst = scratch.data();
      }
      fetch.read(spec, dst);
      if (place[i] >= 0) {
        prefault.reached(dst + n);
        x.shape = spec.shape;
        x.data = dst;
        x.owner = arena;
      } else if (use_of(spec) == Use::LoadOnly) {
        x = Tensor::from_vector(spec.shape, std::vector<float>(dst, dst + n));
      } else {
        x.shape = spec.shape;  // not kept: the shape alone (the plans size themselves by it)
      }
      hasher.bytes(spec.name.data(), spec.name.size());
      hasher.bytes(dst, n * 4);
    } else {
      fetch.check(spec);  // (dtype and shape, in spec order like the reads)
      hasher.bytes(spec.name.data(), spec.name.size());
      hasher.bytes(x.data, n * 4);
    }
    if (hasher.nonfinite) fetch.fail_nonfinite(spec);  // NaN/Inf in a weight: refused, naming it
    t.emplace(spec.name, std::move(x));
  }
  fetch.require_all_used();
  // The bytes read are those of one version of the file, not of one being rewritten meanwhile.
  file.check_unchanged();
  m->fingerprint = hasher.hex();
  normalize_codebooks(t, cfg, file.path(), m->has_encoder);
  assemble_model(*m, t);
  if (kept) {
    for (auto it = t.begin(); it != t.end();) it = it->second.empty() ? t.erase(it) : std::next(it);
    *kept = std::move(t);
  }
  return m;
}

}  // namespace

void normalize_codebooks(TensorMap& t, const Config& cfg, const std::string& what, bool with_sq_norms) {
  const int64_t Q = cfg.q_dimension, bins = cfg.bins;
  for (const auto& [prefix, n] : {std::pair{std::string("quantizer.rvq_first"), cfg.n_q_semantic},
                                  std::pair{std::string("quantizer.rvq_rest"), cfg.n_q - cfg.n_q_semantic}})
    for (int i = 0; i < n; ++i) {
      const std::string p = prefix + ".vq.layers." + std::to_string(i) + "._codebook.";
      const Tensor sum = t.at(p + "embedding_sum"), usage = t.at(p + "cluster_usage");
      // embedding = sum / usage, in place: the sums' place in the arena is the model's own
      // (fingerprinted above as read; the division is part of the load, as before)
      float* e = const_cast<float*>(sum.data);
      std::vector<float> sq(static_cast<size_t>(bins));
      for (int64_t b = 0; b < bins; ++b) {
        const float u = std::max(usage.data[b], 1e-5f);
        float acc = 0.0f;
        for (int64_t q = 0; q < Q; ++q) {
          e[b * Q + q] = e[b * Q + q] / u;
          acc += e[b * Q + q] * e[b * Q + q];
        }
        // finite inputs, but embedding_sum / cluster_usage can overflow (then so does the norm)
        if (!std::isfinite(acc))
          bad(what, "codebook '" + p + "embedding_sum' / cluster_usage overflows float32 at entry " +
                        std::to_string(b) + ": the weights are corrupt");
        sq[b] = acc;
      }
      // (only the encoder's search reads the norms)
      t[p + "sq_norm"] = with_sq_norms ? Tensor::from_vector({bins}, std::move(sq)) : Tensor{{bins}, nullptr, nullptr};
      t[p + "cluster_usage"] = Tensor{{bins}, nullptr, nullptr};  // (done with: the load's alone)
    }
}

void assemble_model(Model& mo, const TensorMap& t) {
  Model* m = &mo;
  const Config& cfg = mo.cfg;
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
      g.books.push_back({reshape(take(p + "embedding_sum"), {bins, Q}), take(p + "sq_norm")});
    }
    return g;
  };
  m->semantic = group("quantizer.rvq_first", cfg.n_q_semantic);
  m->acoustic = group("quantizer.rvq_rest", cfg.n_q - cfg.n_q_semantic);

  const int64_t s = cfg.downsample_stride();
  m->downsample = make_conv(take("downsample.conv.conv.conv.weight"), Tensor{}, s, 1, PadMode::Replicate);
  m->upsample = make_convtr(take("upsample.convtr.convtr.convtr.weight"), Tensor{}, s, D);
}


std::shared_ptr<const Model> load_model(const SafetensorsFile& file, const Config& cfg, Parts parts) {
  try {
    return load_checked(file, cfg, parts);
  } catch (const Error& e) {  // the file's own errors (truncated, changed while read) are the weights'
    if (e.kind() == ErrorKind::Input) throw Error(ErrorKind::Weights, e.what());
    throw;
  }
}

// The config's canonical form: Config::to_json (every field that shapes the codes, under HF's
// names, parsed values so "rope_theta" and "rope_parameters" spellings agree) dumped with sorted
// keys (nlohmann objects are ordered) and no spaces, then hashed. Kept apart from the weights
// fingerprint, which token files and datasets already record and must keep its value.
std::string Model::config_fingerprint() const {
  const std::string canon = cfg.to_json().dump();
  return sha256_hex(canon.data(), canon.size());
}

}  // namespace mimi
