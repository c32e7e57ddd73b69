// The PRNG test-weight generator against WEIGHTS_SPEC.md and the reference manifests, and the
// strict loader: both dialects, float16/bfloat16 files, configs, and its error messages.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "codec/error.h"
#include "codec/test_weights.h"
#include "codec/weights.h"
#include "support/golden.h"
#include "support/sha256.h"

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
  static const GeneratedWeights w = generate_test_weights(test_config("tiny"), 1);
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
  const GeneratedWeights w = generate_test_weights(test_config("tiny"), 1);
  REQUIRE(w.specs[0].name == n);
  CHECK(w.values[0][0] == -0.07527249306440353f);
  CHECK(w.values[0][1] == -0.07947801798582077f);
  CHECK(w.values[0][2] == -0.7755516171455383f);
}

TEST_CASE("prng: generated weights match the manifests tensor by tensor") {
  for (const std::string config : {"tiny", "tiny-window", "full"}) {
    CAPTURE(config);
    const nlohmann::json manifest = read_json(data_dir() + "/" + config + "/weights_manifest.json");
    const GeneratedWeights w = generate_test_weights(test_config(config), 1);
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
      const GeneratedWeights w = generate_test_weights(test_config(config), 1);
      const SafetensorsFile mine = SafetensorsFile::from_bytes(bytes_of(test_weights_file(w, d)), "generated");
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
  const GeneratedWeights w = generate_test_weights(test_config("tiny"), 1);
  auto to_f16 = [](float x) {
    _Float16 h = static_cast<_Float16>(x);
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
