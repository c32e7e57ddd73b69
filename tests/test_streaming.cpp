// Streaming equals offline: encoding and decoding in chunks of 1, 2, 3, 7 and 50 frames gives
// the official offline result on the long reference cases (past the attention window), and the
// engine's own one-chunk result on multi-minute synthetic signals. Odd final chunks included.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "codec/error.h"
#include "support/golden.h"

using namespace mimi;
using namespace mimi::test;

namespace {

struct Streamed {
  std::vector<int32_t> codes;  // [n_q, F]
  std::vector<float> latent;   // [D, F]
};

Streamed encode_in_chunks(const Model& m, const std::vector<float>& pcm, int n_q, int64_t chunk, const Kernels& k) {
  const int64_t fs = m.cfg.frame_size(), F = Engine::frames_for(int64_t(pcm.size()), m.cfg), D = m.cfg.dimension;
  std::vector<float> padded(pcm);
  padded.resize(size_t(F * fs), 0.0f);
  EncodePlan plan(m, k, chunk, n_q);
  Streamed s{std::vector<int32_t>(size_t(n_q * F)), std::vector<float>(size_t(D * F))};
  for (int64_t f0 = 0; f0 < F; f0 += chunk) {
    const int64_t n = std::min(chunk, F - f0);
    plan.push(padded.data() + f0 * fs, n);
    for (int k = 0; k < n_q; ++k) std::copy_n(plan.codes().begin() + k * n, n, s.codes.begin() + k * F + f0);
    const float* lat = plan.stage("latent").ptr();
    for (int64_t d = 0; d < D; ++d) std::copy_n(lat + d * n, n, s.latent.begin() + d * F + f0);
  }
  return s;
}

std::vector<float> decode_in_chunks(const Model& m, const std::vector<int32_t>& codes, int n_q_rows, int n_q,
                                    int64_t F, int64_t chunk, const Kernels& k) {
  const int64_t fs = m.cfg.frame_size();
  DecodePlan plan(m, k, chunk, n_q);
  std::vector<float> out(size_t(F * fs));
  std::vector<int32_t> part(size_t(n_q * chunk));
  for (int64_t f0 = 0; f0 < F; f0 += chunk) {
    const int64_t n = std::min(chunk, F - f0);
    for (int k = 0; k < n_q; ++k) std::copy_n(codes.begin() + k * F + f0, n, part.begin() + k * n);
    plan.push(part.data(), n);
    std::copy_n(plan.output().ptr(), n * fs, out.begin() + f0 * fs);
  }
  (void)n_q_rows;
  return out;
}

void check_close(const std::string& what, const std::vector<float>& got, const float* golden, size_t n) {
  REQUIRE(got.size() == n);
  const StageError e = compare_stage(got.data(), int64_t(n), golden, int64_t(n));
  INFO(what << ": max|c-g| " << e.max_abs << ", ratio to tolerance " << e.worst_ratio);
  CHECK(e.worst_ratio <= 1.0);
  std::printf("  %-34s max|c-g| %.3e  ratio %.4f\n", what.c_str(), e.max_abs, e.worst_ratio);
}

void golden_streaming(const std::string& config, const std::string& case_name,
                      std::initializer_list<int64_t> chunks = {1, 2, 3, 7, 50},
                      const Kernels& k = kernels_for(Device{})) {
  // uploaded for device kernels, as the engine does (a plan refuses host tensors there)
  const auto model = place_model(reference_model(config, Dialect::Moshi), k);
  const SafetensorsFile g = SafetensorsFile::open(data_dir() + "/" + config + "/cases/" + case_name + ".safetensors");
  const Tensor input = g.to_f32("input"), latent = g.to_f32("latent"), output = g.to_f32("output"),
               margin = g.to_f32("code_margin");
  const std::vector<int32_t> gcodes = g.to_i32("codes");
  const int n_q = int(g.info("codes").shape[1]);
  const int64_t F = g.info("codes").shape[2];
  const std::vector<float> pcm(input.data, input.data + input.size());
  std::printf("[%s/%s streaming, %lld frames]\n", config.c_str(), case_name.c_str(), (long long)F);
  for (int64_t chunk : chunks) {
    CAPTURE(chunk);
    const Streamed s = encode_in_chunks(*model, pcm, n_q, chunk, k);
    const CodeReport cr = compare_codes(s.codes, gcodes, std::vector<float>(margin.data, margin.data + margin.size()), n_q, F);
    INFO("codes: " << cr.first_hard);
    CHECK(cr.hard_mismatches == 0);
    CHECK(double(cr.near_tie_flips) <= 0.005 * double(cr.total));
    std::printf("  chunk %-3lld codes: %lld near-tie flips of %lld\n", (long long)chunk, (long long)cr.near_tie_flips,
                (long long)cr.total);
    check_close("chunk " + std::to_string(chunk) + " latent", s.latent, latent.data, size_t(latent.size()));
    const std::vector<float> y = decode_in_chunks(*model, gcodes, n_q, n_q, F, chunk, k);
    check_close("chunk " + std::to_string(chunk) + " decode(golden codes)", y, output.data, size_t(output.size()));
  }
}

}  // namespace

TEST_CASE("streaming: full/long_speech (past the 250-step window) equals the official offline result") {
  golden_streaming("full", "long_speech");
}
TEST_CASE("streaming: full/len48123 (odd final frame) equals the official offline result") {
  golden_streaming("full", "len48123");
}
// What a GPU plan does (device memory ops, composed resblocks), in chunks, on the CPU kernels.
TEST_CASE("streaming: the device code path in chunks (full/len48123)") {
  golden_streaming("full", "len48123", {1, 3, 50}, cpu_as_device());
}
// The same on the GPU kernels (whichever backend this build has, the emulated one included): the
// window-crossing tiny-window case and a full-size one; exits 77 (skipped) without a device.
TEST_CASE("streaming gpu: the device kernels in chunks (tiny-window/long_speech, full/len1921)") {
  const Kernels* gpu = &kernels_for(Device::parse(gpu_device_or_skip("streaming")));
  golden_streaming("tiny-window", "long_speech", {1, 7, 50}, *gpu);
  golden_streaming("full", "len1921", {1, 2}, *gpu);
}
TEST_CASE("streaming: tiny-window/long_speech (487 of 492 steps at a full window)") {
  golden_streaming("tiny-window", "long_speech");
}

TEST_CASE("streaming: minutes of audio in chunks equal the one-chunk computation (tiny-window)") {
  auto model = reference_model("tiny-window", Dialect::Moshi);
  const int64_t T = 24000 * 150 + 777;  // 2.5 minutes and a partial frame
  std::vector<float> pcm(static_cast<size_t>(T));
  uint64_t st = 7;
  for (int64_t i = 0; i < T; ++i) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    const double t = double(i) / 24000;
    pcm[size_t(i)] = float(0.3 * std::sin(2 * M_PI * (150 + 60 * std::sin(0.3 * t)) * t) * (0.6 + 0.4 * std::sin(5 * t)) +
                           0.02 * (double(st >> 40) / 16777216.0 - 0.5));
  }
  const int64_t F = Engine::frames_for(T, model->cfg);
  EngineOptions whole;
  whole.with_chunk_frames(0);  // the whole signal in one push
  Engine offline(model, whole);
  const Codes ref = offline.encode(pcm.data(), T, 8);
  REQUIRE(ref.frames == F);
  const std::vector<float> ref_out = offline.decode(ref);
  for (int64_t chunk : {7, 50, 64}) {
    CAPTURE(chunk);
    EngineOptions eo;
    eo.with_chunk_frames(chunk);
    Engine e(model, eo);
    const Codes c = e.encode(pcm.data(), T, 8);
    int64_t diff = 0;
    for (size_t i = 0; i < c.data.size(); ++i) diff += c.data[i] != ref.data[i];
    CHECK(diff == 0);
    const std::vector<float> y = e.decode(ref);
    check_close("2.5 min, chunk " + std::to_string(chunk) + " decode", y, ref_out.data(), ref_out.size());
  }
}

// Captured steps (codec/step_graph.h): a stream pushed frame by frame, past the window, gives
// bitwise the same codes and samples with its steady steps captured and replayed as with every
// step run op by op; and the replays did happen.
TEST_CASE("streaming gpu: captured steps replay exactly (tiny-window, chunks of 1 and 3 frames)") {
  const Device dev = Device::parse(gpu_device_or_skip("streaming"));
  auto model = reference_model("tiny-window", Dialect::Moshi);
  const int64_t T = 24000 * 3 + 555;  // 38 frames, the transformers' windows full after a few
  std::vector<float> pcm(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i)
    pcm[size_t(i)] = float(0.4 * std::sin(0.013 * double(i)) * std::sin(0.00021 * double(i)) + 0.05 * std::sin(0.9 * double(i)));
  for (int64_t chunk : {1, 3}) {
    CAPTURE(chunk);
    EngineOptions on, off;
    on.device = off.device = dev;
    on.with_chunk_frames(chunk);
    off.with_chunk_frames(chunk);
    off.graphs = false;
    Engine with(model, on), without(model, off);
    const Codes a = with.encode(pcm.data(), T, 8), b = without.encode(pcm.data(), T, 8);
    CHECK(a.data == b.data);
    const std::vector<float> ya = with.decode(a), yb = without.decode(a);
    REQUIRE(ya.size() == yb.size());
    CHECK(std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)) == 0);
    const GraphStats& g = with.graph_stats();
    MESSAGE("graphs: " << g.captured << " captured, " << g.replayed << " replayed, " << g.uncaptured << " op by op");
    CHECK(g.captured >= 2);  // one per direction at least
    CHECK(g.replayed >= uint64_t(2 * (38 / chunk - 4)));  // all but the first few steps of each direction
    CHECK(without.graph_stats().captured + without.graph_stats().replayed == 0);
    CHECK(without.graph_stats().uncaptured > 0);
  }
}

// A plan computes where its kernels do: device kernels handed a model in host memory read host
// pointers on the device (out of bounds on a GPU; unseen under the emulated GPU), so plans refuse it.
TEST_CASE("streaming: a plan refuses a model that is not in its kernels' memory") {
  const auto model = reference_model("tiny", Dialect::Moshi);
  const Kernels& device_path = cpu_as_device();
  CHECK_THROWS_AS(EncodePlan(*model, device_path, 2, 8), Error);
  CHECK_THROWS_AS(DecodePlan(*model, device_path, 2, 8), Error);
  const auto placed = place_model(model, device_path);
  CHECK(placed->in_device_memory);
  CHECK_NOTHROW(EncodePlan(*placed, device_path, 2, 8));
  CHECK_NOTHROW(DecodePlan(*placed, device_path, 2, 8));
  CHECK_THROWS_AS(EncodePlan(*placed, kernels_for(Device{}), 2, 8), Error);  // and the other way round
  CHECK(place_model(model, kernels_for(Device{})) == model);                 // host kernels: the model itself
}
