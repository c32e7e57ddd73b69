// The PRNG test-weight generator against WEIGHTS_SPEC.md and the reference manifests, and the
// strict loader: both dialects, float16/bfloat16 files, configs, and its error messages.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <nlohmann/json.hpp>
#include <sstream>

#include "codec/error.h"
#include "codec/prng_weights.h"
#include "codec/weights.h"
#include "support/golden.h"
#include "codec/sha256.h"

using namespace mimi;
using namespace mimi::test;
namespace fs = std::filesystem;

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

std::shared_ptr<const std::vector<uint8_t>> bytes_of(std::vector<uint8_t> v) {
  return std::make_shared<const std::vector<uint8_t>>(std::move(v));
}

// Loads in-memory safetensors bytes through the same loader as files.
std::shared_ptr<const Model> load_bytes(std::vector<uint8_t> bytes, const Config& cfg) {
  return load_model(SafetensorsFile::from_bytes(bytes_of(std::move(bytes)), "<memory>"), cfg);
}

std::string load_error(std::vector<uint8_t> bytes, const Config& cfg) {
  try {
    load_bytes(std::move(bytes), cfg);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Weights);
    return e.what();
  }
  FAIL("expected the loader to throw");
  return "";
}

// A tiny weights file with the tensors rewritten by `edit`.
std::vector<uint8_t> edited_tiny(const std::function<void(std::vector<TensorToWrite>&)>& edit) {
  static const GeneratedWeights w = generate_prng_weights(test_config("tiny"), 1);
  std::vector<TensorToWrite> t;
  for (size_t i = 0; i < w.specs.size(); ++i) t.push_back({w.specs[i].name, DType::F32, w.specs[i].shape, w.values[i].data()});
  edit(t);
  return safetensors_bytes(t);
}

void check_models_identical(const Model& a, const Model& b) {
  auto same = [](const Tensor& x, const Tensor& y) {
    return x.shape == y.shape && (x.empty() == y.empty()) &&
           (x.empty() || std::memcmp(x.data, y.data, size_t(x.size()) * 4) == 0);
  };
  CHECK(a.fingerprint == b.fingerprint);
  REQUIRE(a.enc_tf.size() == b.enc_tf.size());
  for (size_t l = 0; l < a.enc_tf.size(); ++l) {
    CHECK(same(a.enc_tf[l].in_proj, b.enc_tf[l].in_proj));
    CHECK(same(a.dec_tf[l].in_proj, b.dec_tf[l].in_proj));
    CHECK(same(a.enc_tf[l].linear2, b.enc_tf[l].linear2));
  }
  CHECK(same(a.enc_in.weight, b.enc_in.weight));
  CHECK(same(a.dec.back().up.weight, b.dec.back().up.weight));
  CHECK(same(a.upsample.weight, b.upsample.weight));
  CHECK(same(a.acoustic.books.back().embedding, b.acoustic.books.back().embedding));
}

}  // namespace

TEST_CASE("prng: the test vector of WEIGHTS_SPEC.md") {
  CHECK(prng_base("", 0) == 0xcbf29ce484222325ull);
  CHECK((prng_base("a", 0)) == 0xaf63dc4c8601ec8cull);
  const std::string n = "encoder.model.0.conv.conv.weight";
  CHECK((prng_base(n, 0)) == 0x91add778c73180a0ull);
  const uint64_t base = prng_base(n, 1);
  CHECK(base == 0x0f9aaec1b87bfcb5ull);
  CHECK(prng_v(base, 0) == -0.09198451042175293);
  CHECK(prng_v(base, 1) == -0.09712374210357666);
  CHECK(prng_v(base, 2) == -0.94773972034454346);
  const GeneratedWeights w = generate_prng_weights(test_config("tiny"), 1);
  REQUIRE(w.specs[0].name == n);
  CHECK(w.values[0][0] == -0.07527249306440353f);
  CHECK(w.values[0][1] == -0.07947801798582077f);
  CHECK(w.values[0][2] == -0.7755516171455383f);
}

TEST_CASE("prng: generated weights match the manifests tensor by tensor") {
  for (const std::string config : {"tiny", "tiny-window", "full"}) {
    CAPTURE(config);
    const nlohmann::json manifest = read_json(data_dir() + "/" + config + "/weights_manifest.json");
    const GeneratedWeights w = generate_prng_weights(test_config(config), 1);
    const auto& entries = manifest["tensors"];
    REQUIRE(entries.size() == w.specs.size());
    int mismatches = 0;
    for (size_t i = 0; i < w.specs.size(); ++i) {
      const auto& e = entries[i];
      const TensorSpec& s = w.specs[i];
      INFO("tensor " << s.name);
      CHECK(e["name"] == s.name);
      CHECK(e["shape"].get<Shape>() == s.shape);
      CHECK(e["kind"] == s.kind);
      const TensorRule r = tensor_rule(s, w.cfg);
      CHECK(r.a == std::strtod(e["a_hex"].get<std::string>().c_str(), nullptr));
      CHECK(r.b == std::strtod(e["b_hex"].get<std::string>().c_str(), nullptr));
      const std::string sha = sha256_hex(w.values[i].data(), w.values[i].size() * 4);
      if (sha != e["sha256_f32le"]) ++mismatches;
      CHECK(sha == e["sha256_f32le"].get<std::string>());
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("prng: both dialect files equal the reference weight files") {
  for (const std::string config : {"tiny", "tiny-window"})
    for (Dialect d : {Dialect::Moshi, Dialect::HuggingFace}) {
      CAPTURE(config);
      CAPTURE(dialect_name(d));
      const GeneratedWeights w = generate_prng_weights(test_config(config), 1);
      const SafetensorsFile mine = SafetensorsFile::from_bytes(bytes_of(prng_weights_file(w, d)), "generated");
      const SafetensorsFile theirs =
          SafetensorsFile::open(data_dir() + "/" + config + "/weights." + dialect_name(d) + ".safetensors");
      REQUIRE(mine.tensors().size() == theirs.tensors().size());
      for (const auto& [name, info] : theirs.tensors()) {
        INFO(name);
        REQUIRE(mine.has(name));
        const TensorInfo& m = mine.info(name);
        CHECK(m.shape == info.shape);
        CHECK(m.dtype == info.dtype);
        CHECK(std::memcmp(mine.data(m), theirs.data(info), info.end - info.begin) == 0);
      }
    }
}

TEST_CASE("loader: the moshi and hf files load into the same model") {
  for (const std::string config : {"tiny", "tiny-window"}) {
    LoadOptions none;
    auto moshi = load_model(data_dir() + "/" + config + "/weights.moshi.safetensors", none);
    auto hf = load_model(data_dir() + "/" + config + "/weights.hf.safetensors", none);
    CHECK(moshi->dialect == Dialect::Moshi);
    CHECK(hf->dialect == Dialect::HuggingFace);
    // config.json beside the files was picked up
    CHECK(moshi->cfg == test_config(config));
    CHECK(hf->cfg == test_config(config));
    check_models_identical(*moshi, *hf);
  }
  check_models_identical(*reference_model("full", Dialect::Moshi), *reference_model("full", Dialect::HuggingFace));
}

TEST_CASE("loader: float16 and bfloat16 files load as float32") {
  const GeneratedWeights w = generate_prng_weights(test_config("tiny"), 1);
  auto to_f16 = [](float x) {
#if defined(__aarch64__)  // (GCC 12 has no _Float16 in C++ on aarch64; __fp16 is the same IEEE half)
    __fp16 h = static_cast<__fp16>(x);
#else
    _Float16 h = static_cast<_Float16>(x);
#endif
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
  };
  auto to_bf16 = [](float x) {  // round to nearest even
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  };
  for (DType dt : {DType::F16, DType::BF16}) {
    CAPTURE(dtype_name(dt));
    std::vector<std::vector<uint16_t>> half(w.specs.size());
    std::vector<TensorToWrite> t;
    for (size_t i = 0; i < w.specs.size(); ++i) {
      for (float x : w.values[i]) half[i].push_back(dt == DType::F16 ? to_f16(x) : to_bf16(x));
      t.push_back({w.specs[i].name, dt, w.specs[i].shape, half[i].data()});
    }
    auto m = load_bytes(safetensors_bytes(t), test_config("tiny"));
    const uint16_t h0 = half[0][0];
    const float expect = dt == DType::F16 ? half_to_float(h0) : bf16_to_float(h0);
    CHECK(m->enc_in.weight.data[0] == expect);
    CHECK(std::fabs(m->enc_in.weight.data[0] - w.values[0][0]) < 1e-2f);
    // the converted model still runs
    Engine engine(m);
    std::vector<float> pcm(4000, 0.1f);
    const Codes c = engine.encode(pcm.data(), int64_t(pcm.size()), 8);
    CHECK(c.frames == 3);
  }
  CHECK(half_to_float(0x3c00) == 1.0f);
  CHECK(half_to_float(0xc000) == -2.0f);
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(bf16_to_float(0x3f80) == 1.0f);
}

TEST_CASE("loader: errors name the tensor with got/expected") {
  const Config tiny = test_config("tiny");
  std::string msg = load_error(edited_tiny([](auto& t) { t.erase(t.begin() + 3); }), tiny);
  CHECK(msg.find("missing tensor 'encoder.model.1.block.1.conv.conv.bias'") != std::string::npos);

  static const std::vector<float> wrong(3 * 4 * 3, 0.0f);
  msg = load_error(edited_tiny([](auto& t) { t[2].shape = {3, 4, 3}; t[2].data = wrong.data(); }), tiny);
  CHECK(msg.find("encoder.model.1.block.1.conv.conv.weight': got shape [3, 4, 3], expected [2, 4, 3]") != std::string::npos);

  static const std::vector<int32_t> ints(4, 1);
  msg = load_error(edited_tiny([](auto& t) { t[1].dtype = DType::I32; t[1].data = ints.data(); }), tiny);
  CHECK(msg.find("got dtype I32") != std::string::npos);

  static const std::vector<float> extra(5, 0.0f);
  msg = load_error(edited_tiny([](auto& t) { t.push_back({"encoder.model.99.conv.conv.weight", DType::F32, {5}, extra.data()}); }), tiny);
  CHECK(msg.find("unexpected tensors") != std::string::npos);

  // tiny weights under the official config: the first conv already disagrees
  msg = load_error(edited_tiny([](auto&) {}), Config::official());
  CHECK(msg.find("got shape [4, 1, 7], expected [64, 1, 7]") != std::string::npos);

  msg = load_error(edited_tiny([](auto& t) {
                     for (auto& x : t) x.name = "foo." + x.name;
                   }),
                   tiny);
  CHECK(msg.find("not a Mimi checkpoint") != std::string::npos);
}

TEST_CASE("safetensors: malformed files are refused with a reason") {
  auto good = edited_tiny([](auto&) {});
  auto reason = [](std::vector<uint8_t> b) -> std::string {
    try {
      SafetensorsFile::from_bytes(bytes_of(std::move(b)), "f");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  auto truncated = good;
  truncated.resize(good.size() - 100);
  CHECK(reason(truncated).find("truncated") != std::string::npos);
  CHECK(reason({1, 2, 3}).find("too short") != std::string::npos);
  auto huge_header = good;
  huge_header[7] = 0x7f;
  CHECK(reason(huge_header).find("exceeds the file") != std::string::npos);
  auto bad_json = good;
  bad_json[9] = '!';
  CHECK(reason(bad_json).find("not valid JSON") != std::string::npos);
  CHECK(reason(good).empty());
  // overlapping ranges
  static const std::vector<float> v(4, 1.0f);
  std::vector<uint8_t> b = safetensors_bytes({{"a", DType::F32, {4}, v.data()}, {"b", DType::F32, {4}, v.data()}});
  std::string s(b.begin() + 8, b.end());
  const size_t at = s.find("[16,32]");
  REQUIRE(at != std::string::npos);
  std::memcpy(b.data() + 8 + at, "[ 8,24]", 7);
  CHECK(reason(b).find("overlap") != std::string::npos);
}

TEST_CASE("config: HF and moshi style files give the reference configs") {
  for (const std::string config : {"tiny", "tiny-window", "full"}) {
    CAPTURE(config);
    CHECK(Config::from_file(data_dir() + "/" + config + "/config.json") == test_config(config));
    CHECK(Config::from_file(data_dir() + "/" + config + "/moshi_config.json") == test_config(config));
  }
  const Config full = Config::official();
  CHECK(full.frame_size() == 1920);
  CHECK(full.hop() == 960);
  CHECK(full.downsample_stride() == 2);
  CHECK(Config::from_json(full.to_json(), "roundtrip") == full);
  nlohmann::json j = full.to_json();
  j["use_causal_conv"] = false;
  CHECK_THROWS_WITH_AS(Config::from_json(j, "x"), doctest::Contains("use_causal_conv"), Error);
}

// ---- hardening: every malformed header, config or weight value is an Error naming the file and
// the problem (never a nlohmann exception escaping as "internal error", never UB). Reproducers
// found by fuzzing live in tests/fuzz/regressions/ (replayed by the fuzz_regressions test).

namespace {

// A safetensors file from a raw header string and `data_bytes` zero bytes of data.
std::vector<uint8_t> raw_safetensors(const std::string& header, size_t data_bytes = 0) {
  std::vector<uint8_t> b;
  b.reserve(8 + header.size() + data_bytes);
  for (int i = 0; i < 8; ++i) b.push_back(uint8_t((uint64_t(header.size()) >> (8 * i)) & 0xff));
  for (char c : header) b.push_back(uint8_t(c));
  b.resize(b.size() + data_bytes, 0);
  return b;
}

// The Error a parse of these bytes throws (kind checked), or "" when it parses.
std::string st_error(std::vector<uint8_t> b) {
  try {
    SafetensorsFile::from_bytes(bytes_of(std::move(b)), "bad.safetensors");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Input);
    return e.what();
  }
  return "";
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("mimi-test-weights-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    const std::string p = (path / name).string();
    write_bytes(p, bytes);
    return p;
  }
  std::string write(const std::string& name, const std::string& text) const {
    return write(name, std::vector<uint8_t>(text.begin(), text.end()));
  }
};

}  // namespace

TEST_CASE("safetensors: shapes whose size overflows are refused (no wrap to 0, no signed overflow)") {
  // 4294967300 * 2^62 wraps to 0 in 64 bits: with no data it used to pass the size checks
  std::string msg = st_error(raw_safetensors(
      R"({"codes":{"dtype":"I32","shape":[4294967300,4611686018427387904],"data_offsets":[0,0]}})"));
  CHECK(msg.find("bad.safetensors: tensor 'codes': shape [4294967300,4611686018427387904] of I32 is too large") == 0);
  // a prefix that overflows int64 before a 0 dimension
  msg = st_error(raw_safetensors(R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776,0],"data_offsets":[0,0]}})"));
  CHECK(msg.find("too large") != std::string::npos);
  // numel fits but numel * dtype size does not
  msg = st_error(raw_safetensors(R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})"));
  CHECK(msg.find("too large") != std::string::npos);
  for (const char* shape : {"[-1,4]", "[18446744073709551615]", "[9223372036854775808]", "[1.5]", "[\"4\"]", "[null]",
                            "{\"a\":4}", "4", "\"[4]\""}) {
    CAPTURE(shape);
    msg = st_error(raw_safetensors(std::string(R"({"w":{"dtype":"F32","shape":)") + shape + R"(,"data_offsets":[0,16]}})", 16));
    CHECK(msg.find("bad.safetensors: tensor 'w': ") == 0);
    CHECK(msg.find("shape") != std::string::npos);
  }
  // zero-size tensors are fine
  CHECK(st_error(raw_safetensors(R"({"w":{"dtype":"F32","shape":[0,1099511627776],"data_offsets":[0,0]}})")).empty());
  CHECK(st_error(raw_safetensors(R"({"w":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", 4)).empty());
}

TEST_CASE("safetensors: values of the wrong JSON type are errors naming the field") {
  const std::string ok_entry = R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  auto err = [](const std::string& header, size_t data = 4) { return st_error(raw_safetensors(header, data)); };
  std::string msg = err(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})");
  CHECK(msg.find("bad.safetensors: tensor 'w': dtype is not a string: 7") == 0);
  CHECK(err(R"({"w":{"dtype":null,"shape":[1],"data_offsets":[0,4]}})").find("dtype is not a string") != std::string::npos);
  CHECK(err(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})").find("unsupported dtype F33") != std::string::npos);
  msg = err(R"({"__metadata__":{"n_q":8},)" + ok_entry + "}");
  CHECK(msg.find("bad.safetensors: __metadata__ value of 'n_q' is not a string (number)") == 0);
  CHECK(err(R"({"__metadata__":{"a":{"b":"c"}},)" + ok_entry + "}").find("not a string") != std::string::npos);
  CHECK(err(R"({"__metadata__":["a"],)" + ok_entry + "}").find("__metadata__ is not an object") != std::string::npos);
  CHECK(err(R"({"__metadata__":{"a":"b"},)" + ok_entry + "}").empty());
  for (const char* off : {"[0.0,4.0]", "[0,4.5]", "[-4,0]", "[\"0\",\"4\"]", "[0]", "[0,4,8]", "{\"a\":0}", "null", "4"}) {
    CAPTURE(off);
    msg = err(std::string(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":)") + off + "}}");
    CHECK(msg.find("bad.safetensors: tensor 'w': bad data_offsets") == 0);
  }
  CHECK(err(R"({"w":[1,2,3]})").find("entry needs dtype, shape and data_offsets") != std::string::npos);
  CHECK(err(R"({"w":{"dtype":"F32","shape":[1]}})").find("entry needs dtype, shape and data_offsets") != std::string::npos);
  CHECK(err(R"([1,2])").find("header is not a JSON object") != std::string::npos);
}

TEST_CASE("safetensors: a header length beyond the file is refused") {
  for (uint64_t n : {uint64_t(3), uint64_t(1) << 32, uint64_t(1) << 63, ~uint64_t(0)}) {
    CAPTURE(n);
    std::vector<uint8_t> b = raw_safetensors("{}");
    for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t((n >> (8 * i)) & 0xff);
    const std::string msg = st_error(b);
    CHECK(msg.find("bad.safetensors: header length " + std::to_string(n) + " exceeds the file (10 bytes)") == 0);
  }
}

TEST_CASE("safetensors: as weights, a malformed file is a weights error (exit 4) naming it") {
  TempDir d;
  const std::string p = d.write("model.safetensors",
                                raw_safetensors(R"({"w":{"dtype":1,"shape":[1],"data_offsets":[0,4]}})", 4));
  d.write("config.json", read_json(data_dir() + "/tiny/config.json").dump());
  try {
    load_model(p);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Weights);
    CHECK(std::string(e.what()).find(p + ": tensor 'w': dtype is not a string") == 0);
  }
}

TEST_CASE("config: out-of-range and mistyped values are errors naming the field and the file") {
  const nlohmann::json tiny = read_json(data_dir() + "/tiny/config.json");
  auto err = [&](const std::function<void(nlohmann::json&)>& edit) -> std::string {
    nlohmann::json j = tiny;
    edit(j);
    try {
      Config::from_json(j, "cfg.json");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::Weights);
      CHECK(std::string(e.what()).find("cfg.json: ") == 0);
      return e.what();
    }
    return "";
  };
  CHECK(err([](auto&) {}).empty());
  // the probe's cases: a 5e6 window allocated 3.7 GB, 2e9 exited with "internal error"
  CHECK(err([](auto& j) { j["sliding_window"] = 5000000; }).find("context (sliding_window) must be in [1, 8192], got 5000000") != std::string::npos);
  CHECK(err([](auto& j) { j["sliding_window"] = 2e9; }).find("sliding_window") != std::string::npos);
  CHECK(err([](auto& j) { j["sliding_window"] = 5e6; }).find("sliding_window") != std::string::npos);
  CHECK(err([](auto& j) { j["sliding_window"] = 1e300; }).find("sliding_window = 1e+300 is out of range") != std::string::npos);
  CHECK(err([](auto& j) { j["sliding_window"] = 250.5; }).find("sliding_window must be an integer, got 250.5") != std::string::npos);
  CHECK(err([](auto& j) { j["sliding_window"] = 250.0; }).empty());  // an integral float is fine
  CHECK(err([](auto& j) { j["rope_theta"] = 0; j.erase("rope_parameters"); }).find("max_period (rope_theta)") != std::string::npos);
  CHECK(err([](auto& j) { j["rope_parameters"]["rope_theta"] = 0; }).find("max_period (rope_theta)") != std::string::npos);
  CHECK(err([](auto& j) { j["rope_parameters"] = 5; }).find("rope_parameters must be an object") != std::string::npos);
  for (double eps : {0.0, -1e-5, 2.0, 1e-40}) {
    CAPTURE(eps);
    CHECK(err([&](auto& j) { j["norm_eps"] = eps; }).find("norm_eps must be in [1e-30, 1]") != std::string::npos);
  }
  CHECK(err([](auto& j) { j["norm_eps"] = "1e-5"; }).find("norm_eps must be a number") != std::string::npos);
  CHECK(err([](auto& j) { j["upsampling_ratios"] = std::vector<int>(40, 1); }).find("the number of ratios must be in [1, 16], got 40") != std::string::npos);
  CHECK(err([](auto& j) { j["upsampling_ratios"] = std::vector<int>(1000, 1); }).find("upsampling_ratios has 1000 entries") != std::string::npos);
  CHECK(err([](auto& j) { j["upsampling_ratios"] = {8, 6, 0, 4}; }).find("ratio must be in [1, 64], got 0") != std::string::npos);
  CHECK(err([](auto& j) { j["upsampling_ratios"] = {8, 6, "5", 4}; }).find("upsampling_ratios[2] must be an integer") != std::string::npos);
  CHECK(err([](auto& j) { j["upsampling_ratios"] = "8654"; }).find("upsampling_ratios must be a list of integers") != std::string::npos);
  CHECK(err([](auto& j) { j["upsampling_ratios"] = {64, 64, 64, 64}; }).find("the product of the ratios") != std::string::npos);
  CHECK(err([](auto& j) { j["hidden_size"] = 1 << 20; j.erase("head_dim"); j.erase("upsample_groups"); }).find("dimension must be in [1, 8192]") != std::string::npos);
  CHECK(err([](auto& j) { j["hidden_size"] = "32"; }).find("hidden_size must be an integer, got \"32\"") != std::string::npos);
  CHECK(err([](auto& j) { j["hidden_size"] = true; }).find("hidden_size must be an integer") != std::string::npos);
  CHECK(err([](auto& j) { j["hidden_size"] = 5000000000ull; }).find("hidden_size = 5000000000 is out of range") != std::string::npos);
  CHECK(err([](auto& j) { j["num_attention_heads"] = 3; j.erase("head_dim"); j.erase("num_key_value_heads"); })
            .find("d_model / num_heads must be an even integer") != std::string::npos);
  CHECK(err([](auto& j) { j["num_attention_heads"] = 0; j.erase("head_dim"); j.erase("num_key_value_heads"); })
            .find("num_heads must be in [1, 32], got 0") != std::string::npos);
  CHECK(err([](auto& j) { j["num_quantizers"] = 5000; }).find("n_q (num_quantizers) must be in [1, 1024]") != std::string::npos);
  CHECK(err([](auto& j) { j["codebook_size"] = 0; }).find("bins (codebook_size) must be in") != std::string::npos);
  CHECK(err([](auto& j) { j["codebook_size"] = 1 << 30; }).find("bins (codebook_size) must be in") != std::string::npos);
  CHECK(err([](auto& j) { j["kernel_size"] = 0; }).find("kernel_size must be in [1, 255], got 0") != std::string::npos);
  CHECK(err([](auto& j) { j["residual_kernel_size"] = -3; }).find("residual_kernel_size must be in") != std::string::npos);
  CHECK(err([](auto& j) { j["last_kernel_size"] = 100000; }).find("last_kernel_size must be in") != std::string::npos);
  CHECK(err([](auto& j) { j["dilation_growth_rate"] = 0; }).find("dilation_base must be in [1, 16], got 0") != std::string::npos);
  CHECK(err([](auto& j) { j["num_residual_layers"] = 12; j["dilation_growth_rate"] = 16; }).find("largest residual dilation") != std::string::npos);
  CHECK(err([](auto& j) { j["compress"] = 8; }).find("channel widths must divide by compress (n_filters 4, compress 8)") != std::string::npos);
  CHECK(err([](auto& j) { j["num_filters"] = 4096; j["upsampling_ratios"] = {2, 2, 2, 2, 2, 2, 2, 2, 1, 1}; j["frame_rate"] = 93.75; })
            .find("the widest SEANet channel count") != std::string::npos);
  CHECK(err([](auto& j) { j["num_hidden_layers"] = 1000; }).find("num_layers must be in [1, 64]") != std::string::npos);
  CHECK(err([](auto& j) { j["intermediate_size"] = 0; }).find("dim_feedforward must be in") != std::string::npos);
  CHECK(err([](auto& j) { j["codebook_dim"] = -1; j.erase("vector_quantization_hidden_dimension"); }).find("q_dimension (codebook_dim) must be in") != std::string::npos);
  CHECK(err([](auto& j) { j["sampling_rate"] = 0; }).find("sample_rate must be in [1000, 768000], got 0") != std::string::npos);
  CHECK(err([](auto& j) { j["frame_rate"] = 0; }).find("frame_rate must be positive") != std::string::npos);
  CHECK(err([](auto& j) { j["frame_rate"] = 1e300; }).find("frame_rate must be positive and at most sample_rate") != std::string::npos);
  CHECK(err([](auto& j) { j["frame_rate"] = 0.0125; }).find("downsample stride") != std::string::npos);
  CHECK(err([](auto& j) { j["num_key_value_heads"] = "4"; }).find("num_key_value_heads must be an integer") != std::string::npos);
  CHECK(err([](auto& j) { j["upsample_groups"] = 7.5; }).find("upsample_groups must be an integer") != std::string::npos);
  CHECK(err([](auto& j) { j["head_dim"] = 2147483647; }).find("head_dim * num_attention_heads must equal hidden_size") != std::string::npos);
  // moshi style: sections of the wrong type
  const nlohmann::json moshi = read_json(data_dir() + "/tiny/moshi_config.json");
  for (const char* section : {"seanet", "transformer", "quantizer"}) {
    CAPTURE(section);
    nlohmann::json j = moshi;
    j[section] = 5;
    const std::string want = std::string(section) + " must be an object";
    CHECK_THROWS_WITH_AS(Config::from_json(j, "m.json"), doctest::Contains(want.c_str()), Error);
  }
  nlohmann::json j = moshi;
  j["transformer"]["context"] = 2000000000;
  CHECK_THROWS_WITH_AS(Config::from_json(j, "m.json"), doctest::Contains("context (sliding_window) must be in"), Error);
  j = moshi;
  j["transformer"]["max_period"] = 0;
  CHECK_THROWS_WITH_AS(Config::from_json(j, "m.json"), doctest::Contains("max_period"), Error);
  CHECK_THROWS_WITH_AS(Config::from_json(nlohmann::json::array(), "m.json"), doctest::Contains("must be a JSON object"), Error);
  // the file path is named for --config files too
  TempDir d;
  nlohmann::json big = tiny;
  big["sliding_window"] = 5000000;
  const std::string p = d.write("big.json", big.dump());
  const std::string want = p + ": context (sliding_window)";
  CHECK_THROWS_WITH_AS(Config::from_file(p), doctest::Contains(want.c_str()), Error);
}

TEST_CASE("loader: NaN or Inf in a weight tensor is refused, naming the tensor") {
  const Config tiny = test_config("tiny");
  static std::vector<float> poisoned;
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    CAPTURE(bad);
    const std::string msg = load_error(edited_tiny([&](auto& t) {
                                         const size_t n = size_t(numel(t[5].shape));
                                         poisoned.assign(static_cast<const float*>(t[5].data),
                                                         static_cast<const float*>(t[5].data) + n);
                                         poisoned[n - 1] = bad;
                                         t[5].data = poisoned.data();
                                       }),
                                       tiny);
    CHECK(msg.find("tensor 'encoder.model.1.block.3.conv.conv.bias' holds a non-finite value (" +
                   std::string(std::isnan(bad) ? "NaN" : "Inf") + ") at element 3") != std::string::npos);
  }
  // finite float64 values that do not fit float32 become Inf: refused too
  const GeneratedWeights w = generate_prng_weights(tiny, 1);
  std::vector<std::vector<double>> f64(w.specs.size());
  std::vector<TensorToWrite> t;
  for (size_t i = 0; i < w.specs.size(); ++i) {
    f64[i].assign(w.values[i].begin(), w.values[i].end());
    t.push_back({w.specs[i].name, DType::F64, w.specs[i].shape, f64[i].data()});
  }
  f64[0][2] = 1e300;
  CHECK(load_error(safetensors_bytes(t), tiny).find("tensor 'encoder.model.0.conv.conv.weight' holds a non-finite value (Inf) at element 2") !=
        std::string::npos);
  f64[0][2] = 0.5;
  // finite embedding_sum / cluster_usage that overflows float32
  size_t sum = 0;
  while (w.specs[sum].name.find("rvq_rest.vq.layers.0._codebook.embedding_sum") == std::string::npos) ++sum;
  f64[sum][0] = 1e38;
  CHECK(load_error(safetensors_bytes(t), tiny).find("codebook 'quantizer.rvq_rest.vq.layers.0._codebook.embedding_sum' / cluster_usage overflows float32 at entry 0") != std::string::npos);
  f64[sum][0] = 0.25;
  CHECK(load_bytes(safetensors_bytes(t), tiny) != nullptr);
}

TEST_CASE("loader: a config.json beside the weights that is not JSON is an error naming it") {
  TempDir d;
  const std::vector<uint8_t> weights = [] {
    std::ifstream f(data_dir() + "/tiny/weights.moshi.safetensors", std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }();
  const std::string p = d.write("model.safetensors", weights);
  const std::string cj = (d.path / "config.json").string();
  d.write("config.json", std::string("{\"model_type\": \"mimi\", \"hidden_size\": 32,"));  // cut short
  for (int i = 0; i < 2; ++i) {
    try {
      if (i == 0) load_model(p);
      else resolve_config(p, {});
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::Weights);
      CHECK(std::string(e.what()).find(cj + ": the config beside the weights is not valid JSON") == 0);
    }
  }
  // valid JSON that is not a Mimi config: still ignored (an unrelated file beside a checkpoint)
  d.write("config.json", std::string("{\"architectures\": [\"Other\"], \"model_type\": \"other\"}"));
  std::string origin;
  CHECK(resolve_config(p, {}, &origin) == Config::official());
  CHECK(origin == "official defaults");
  // a good one is used
  d.write("config.json", read_json(data_dir() + "/tiny/config.json").dump());
  CHECK(load_model(p)->cfg == test_config("tiny"));
}

// Issue 26 class 5: the tensors are read into memory of the model's own (codec/weights.cpp), so a
// file changed or truncated during a run cannot change or kill it (tests/test_weights_frozen.cpp).
TEST_CASE("loader: a loaded model keeps nothing of the file; its tensors equal a load from memory") {
  const std::string path = data_dir() + "/tiny/weights.moshi.safetensors";
  const auto model = load_model(SafetensorsFile::open(path), test_config("tiny"));
  // no mapping of the weights file is left (its tensors are in memory of the model's own)
  std::ifstream maps("/proc/self/maps");
  const std::string canon = fs::weakly_canonical(path).string();
  for (std::string line; std::getline(maps, line);) CHECK(line.find(canon) == std::string::npos);
  std::ifstream in(path, std::ios::binary);
  auto bytes = std::make_shared<std::vector<uint8_t>>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  const auto held = load_model(SafetensorsFile::from_bytes(bytes, path), test_config("tiny"));
  check_models_identical(*model, *held);
}

TEST_CASE("sha256: FIPS vectors, and the SHA-extension rounds equal the portable ones at every length") {
  CHECK(mimi::sha256_hex("", 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(mimi::sha256_hex("abc", 3) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(mimi::sha256_hex(two.data(), two.size()) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  CHECK(mimi::sha256_hex(million.data(), million.size()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  MESSAGE("SHA extensions used: " << mimi::Sha256::use_sha_ni());
  std::mt19937 rng(26);
  std::vector<uint8_t> bytes(size_t(3) << 20);
  for (auto& b : bytes) b = uint8_t(rng());
  auto both = [&](size_t n, size_t piece) {
    mimi::Sha256 fast, slow(true);
    for (size_t at = 0; at < n; at += piece) {
      fast.update(bytes.data() + at, std::min(piece, n - at));
      slow.update(bytes.data() + at, std::min(piece, n - at));
    }
    return std::pair{fast.hex(), slow.hex()};
  };
  for (size_t n = 0; n <= 300; ++n) {
    const auto [f, s] = both(n, 1 + n % 67);
    CAPTURE(n);
    CHECK(f == s);
  }
  for (int k = 0; k < 4; ++k) {
    const size_t n = bytes.size() - rng() % 1000, piece = 1 + rng() % 200000;
    const auto [f, s] = both(n, piece);
    CAPTURE(n);
    CAPTURE(piece);
    CHECK(f == s);
  }
}
