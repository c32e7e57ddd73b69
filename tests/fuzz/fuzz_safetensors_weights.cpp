// libFuzzer target: a safetensors file as weights. codec/safetensors.cpp parses the header and
// tensor table (every accepted table must describe byte ranges inside the data section that
// match shape x dtype), then every tensor is converted, the dialect detected, and the file
// loaded as a model of the micro config (tests/fuzz/fuzz_micro.h, seeds of a few KB) and of the
// tiny config (tests/data/tiny). A model that loads must run: one frame encoded, codes in range,
// decoded to finite samples.
#include <cmath>
#include <optional>

#include "codec/engine.h"
#include "codec/prng_weights.h"
#include "codec/weights.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_micro.h"

using namespace mimi;
using mimi::fuzz::refused_cleanly;

namespace {

void run_model(const std::shared_ptr<const Model>& m) {
  EngineOptions o;
  o.threads = 1;
  Engine eng(m, o);
  const Config& c = m->cfg;
  std::vector<float> pcm(size_t(c.frame_size()));
  for (size_t i = 0; i < pcm.size(); ++i) pcm[i] = std::sin(0.05f * float(i)) * 0.5f;
  const Codes codes = eng.encode(pcm.data(), int64_t(pcm.size()), c.n_q);
  MIMI_FUZZ_CHECK(codes.n_q == c.n_q && codes.frames == 1, "encode shape");
  for (int32_t k : codes.data) MIMI_FUZZ_CHECK(k >= 0 && k < c.bins, "encoded code " + std::to_string(k) + " out of range");
  const std::vector<float> y = eng.decode(codes);
  MIMI_FUZZ_CHECK(int64_t(y.size()) == c.frame_size(), "decode length");
}

}  // namespace

MIMI_FUZZ_TARGET {
  auto bytes = std::make_shared<const std::vector<uint8_t>>(data, data + size);
  std::optional<SafetensorsFile> f;
  if (!refused_cleanly([&] { f.emplace(SafetensorsFile::from_bytes(bytes, "fuzz.safetensors")); })) return 0;
  const uint64_t data_size = f->file_size() - 8 - f->header_json().size();
  for (const auto& entry : f->tensors()) {
    const std::string& name = entry.first;
    const TensorInfo& t = entry.second;
    int64_t n = 1;
    for (int64_t d : t.shape) {
      MIMI_FUZZ_CHECK(d >= 0, name + ": negative dimension");
      MIMI_FUZZ_CHECK(d == 0 || n <= INT64_MAX / d, name + ": shape product overflows");
      n *= d;
    }
    MIMI_FUZZ_CHECK(t.begin <= t.end && t.end <= data_size, name + ": byte range outside the data");
    MIMI_FUZZ_CHECK(t.end - t.begin == uint64_t(n) * dtype_size(t.dtype), name + ": byte range != shape x dtype");
    refused_cleanly([&] {
      if (t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16 || t.dtype == DType::F64) {
        const Tensor x = f->to_f32(name);
        MIMI_FUZZ_CHECK(x.size() == n, name + ": to_f32 size");
        volatile float sink = 0;
        for (int64_t i = 0; i < n; ++i) sink = sink + x.data[i];  // every element readable
      } else {
        MIMI_FUZZ_CHECK(int64_t(f->to_i32(name).size()) == n, name + ": to_i32 size");
      }
    });
  }
  if (!refused_cleanly([&] { detect_dialect(*f); })) return 0;
  for (const Config& cfg : {mimi::fuzz::micro_config(), test_config("tiny")}) {
    std::shared_ptr<const Model> m;
    if (refused_cleanly([&] { m = load_model(*f, cfg); })) refused_cleanly([&] { run_model(m); });
  }
  return 0;
}
