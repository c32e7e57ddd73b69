// Golden tests against the official implementation's outputs (tests/data, copied from
// shared/reference): every case of every config, stage by stage, through both weight dialects.
// Encoder stages start from `input`; decoder stages start from the golden `codes`, so a
// failure names the layer that drifted.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "codec/error.h"
#include "support/golden.h"

using namespace mimi;
using namespace mimi::test;

namespace {

struct Worst {
  double ratio = 0, max_abs = 0, rel = 0;
  std::string where;
};

// max_samples: only the cases with at most this many input samples (the emulated GPU's full-size run).
void run_config(const std::string& config, Dialect dialect, const std::string& device,
                const Kernels* kernels = nullptr, int64_t max_samples = INT64_MAX) {
  auto model = reference_model(config, dialect);
  EngineOptions opts;
  opts.device = Device::parse(device);
  opts.kernels = kernels;
  Engine engine(model, opts);
  const int64_t frame = model->cfg.frame_size();
  std::map<std::string, Worst> worst;
  int64_t flips = 0, codes_total = 0;
  size_t ran = 0;
  const auto cases = case_files(config);
  REQUIRE(!cases.empty());
  for (const std::string& path : cases) {
    const std::string name = std::filesystem::path(path).stem().string();
    if (name.find("streaming") != std::string::npos) continue;  // streaming API cases: issue 5
    // The naive kernels are slow: on the reference device run only the short cases.
    if (opts.device.kind == Device::Kind::Ref && name == "long_speech") continue;
    CAPTURE(name);
    const SafetensorsFile golden = SafetensorsFile::open(path);
    const Tensor input = golden.to_f32("input");
    const int64_t T = input.shape.back();
    if (T > max_samples) continue;
    ++ran;
    const std::vector<int32_t> gcodes = golden.to_i32("codes");
    const Shape cshape = golden.info("codes").shape;  // [1, n_q, F]
    const int n_q = int(cshape[1]);
    const int64_t F = cshape[2];
    REQUIRE(F == Engine::frames_for(T, model->cfg));

    auto check = [&](const std::string& stage, const Buffer& got) {
      if (!golden.has(stage)) return;
      const Tensor g = golden.to_f32(stage);
      const StageError e = compare_stage(got.ptr(), got.size(), g.data, g.size());
      INFO(stage << ": shape " << shape_str(got.shape) << " vs golden " << shape_str(g.shape));
      REQUIRE(e.shape_ok);
      INFO(stage << ": max|c-g| = " << e.max_abs << ", max|g| = " << e.max_ref
                 << ", tolerance 1e-4*max|g|+1e-5 exceeded by x" << e.worst_ratio);
      CHECK(e.worst_ratio <= 1.0);
      Worst& w = worst[stage];
      if (e.worst_ratio >= w.ratio) w = {e.worst_ratio, e.max_abs, e.max_abs / std::max(e.max_ref, 1e-30), name};
    };

    // ---- encode, stage by stage
    EncodePlan& enc = engine.encode_plan(F, n_q);
    enc.bind_input(input.data, T);
    enc.run();
    for (const char* s : {"seanet_encoder_out", "encoder_transformer_out", "latent", "rvq_first_in", "rvq_rest_in"})
      check(s, enc.stage(s));
    const Tensor margin = golden.to_f32("code_margin");
    const CodeReport cr = compare_codes(enc.codes(), gcodes, std::vector<float>(margin.data, margin.data + margin.size()),
                                        n_q, F);
    INFO("codes: " << cr.first_hard);
    CHECK(cr.hard_mismatches == 0);
    flips += cr.near_tie_flips;
    codes_total += cr.total;

    // ---- decode from the golden codes, stage by stage
    DecodePlan& dec = engine.decode_plan(F, n_q);
    dec.bind_codes(gcodes.data());
    dec.run();
    REQUIRE(dec.output().size() == F * frame);
    for (const char* s : {"quantized_latent", "upsampled_latent", "decoder_transformer_out", "output"})
      check(s, dec.stage(s));
    // ---- fewer codebooks: the first K rows
    for (int K : {1, 4, 8}) {
      const std::string stage = "output_nq" + std::to_string(K);
      if (!golden.has(stage) || K > n_q) continue;
      DecodePlan& dk = engine.decode_plan(F, K);
      dk.bind_codes(gcodes.data());
      dk.run();
      check(stage, dk.output());
    }
  }
  REQUIRE(ran > 0);
  std::printf("\n[%s/%s on %s] %zu cases; worst error per stage (ratio = max|c-g| / (1e-4 max|g| + 1e-5)):\n",
              config.c_str(), dialect_name(dialect), device.c_str(), ran);
  for (const auto& [stage, w] : worst)
    std::printf("  %-26s max|c-g| %.3e  rel %.3e  ratio %.4f  (%s)\n", stage.c_str(), w.max_abs, w.rel, w.ratio,
                w.where.c_str());
  std::printf("  codes: %lld near-tie flips of %lld (%.3f%%)\n", (long long)flips, (long long)codes_total,
              100.0 * double(flips) / double(std::max<int64_t>(codes_total, 1)));
  std::fflush(stdout);
  CHECK(double(flips) <= 0.005 * double(codes_total));
}

}  // namespace

TEST_CASE("golden tiny/moshi") { run_config("tiny", Dialect::Moshi, "cpu"); }
TEST_CASE("golden tiny/hf") { run_config("tiny", Dialect::HuggingFace, "cpu"); }
TEST_CASE("golden tiny-window/moshi") { run_config("tiny-window", Dialect::Moshi, "cpu"); }
TEST_CASE("golden tiny-window/hf") { run_config("tiny-window", Dialect::HuggingFace, "cpu"); }
TEST_CASE("golden full/moshi") { run_config("full", Dialect::Moshi, "cpu"); }
TEST_CASE("golden full/hf") { run_config("full", Dialect::HuggingFace, "cpu"); }
// The full-size model on the short cases only (up to 2 frames): every kernel at the real channel
// counts, where a full run would take too long (the aarch64 build under qemu: scripts/test-arm64.sh).
TEST_CASE("golden full/moshi short") { run_config("full", Dialect::Moshi, "cpu", nullptr, 2 * 1920); }
// The naive reference kernels end to end: they too reproduce the official outputs.
TEST_CASE("golden tiny/moshi/ref") { run_config("tiny", Dialect::Moshi, "ref"); }
// The device plan path (what --device cuda/hip runs) on the CPU kernels.
TEST_CASE("golden tiny/moshi/devicepath") { run_config("tiny", Dialect::Moshi, "cpu", &cpu_as_device()); }
TEST_CASE("golden full/moshi/devicepath") { run_config("full", Dialect::Moshi, "cpu", &cpu_as_device()); }

// On a GPU (whichever backend this build has, the emulated one included): the configs through
// the device plans. Without a device it says so and exits 77, which ctest reports as skipped.
TEST_CASE("golden gpu") {
  const std::string device = gpu_device_or_skip("the golden tests");
  for (const char* config : {"tiny", "tiny-window", "full"}) run_config(config, Dialect::Moshi, device);
  run_config("full", Dialect::HuggingFace, device);
}

// The small configs only: what the emulated device (MIMI_GPU_EMULATE) runs in CI in a minute.
TEST_CASE("golden gpu tiny") {
  const std::string device = gpu_device_or_skip("the golden tests");
  for (const char* config : {"tiny", "tiny-window"}) run_config(config, Dialect::Moshi, device);
}

// The full-size model on the short cases (up to 2 frames: len1, len1919, len1920, len1921): every
// kernel at the real channel counts and the 8-layer transformers, in minutes on the emulated device.
TEST_CASE("golden gpu full short") {
  const std::string device = gpu_device_or_skip("the golden tests");
  run_config("full", Dialect::Moshi, device, nullptr, 2 * 1920);
}

// tests/data must hold every case of shared/reference (when that folder is beside the repo):
// a case added there is picked up by copying it in (scripts/sync-reference.sh).
TEST_CASE("reference in sync") {
  namespace fs = std::filesystem;
  const fs::path shared = MIMI_SHARED_REFERENCE_DIR;
  if (!fs::is_directory(shared)) {
    MESSAGE("no shared/reference beside the repository; nothing to compare");
    return;
  }
  int compared = 0;
  for (const auto& e : fs::recursive_directory_iterator(shared)) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), shared);
    const fs::path mine = fs::path(data_dir()) / rel;
    INFO("reference file " << rel.string() << " (run scripts/sync-reference.sh)");
    REQUIRE(fs::is_regular_file(mine));
    std::ifstream a(e.path(), std::ios::binary), b(mine, std::ios::binary);
    const std::string da((std::istreambuf_iterator<char>(a)), {}), db((std::istreambuf_iterator<char>(b)), {});
    CHECK(da == db);
    ++compared;
  }
  CHECK(compared > 0);
}
