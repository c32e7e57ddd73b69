#include "codec/engine.h"

#include <algorithm>

#include "codec/error.h"

namespace mimi {

Engine::Engine(std::shared_ptr<const Model> model, EngineOptions opts)
    : model_(std::move(model)), opts_(opts), enc_cache_(opts.plan_cache_capacity), dec_cache_(opts.plan_cache_capacity) {
  kernels_for(opts_.device);  // fail now, not at the first call, if the device is missing
  if (opts_.threads > 0) cpu::set_num_threads(opts_.threads);
}

EncodePlan& Engine::encode_plan(int64_t frames, int n_q) {
  const PlanKey key{opts_.device, Direction::Encode, frames, n_q};
  return enc_cache_.get(key, [&] { return std::make_unique<EncodePlan>(*model_, opts_.device, frames, n_q); });
}

DecodePlan& Engine::decode_plan(int64_t frames, int n_q) {
  const PlanKey key{opts_.device, Direction::Decode, frames, n_q};
  return dec_cache_.get(key, [&] { return std::make_unique<DecodePlan>(*model_, opts_.device, frames, n_q); });
}

Codes Engine::encode(const float* pcm, int64_t T, int n_q) {
  if (T < 1) throw Error(ErrorKind::Usage, "cannot encode an empty signal (0 samples)");
  if (n_q < 1 || n_q > config().n_q)
    throw Error(ErrorKind::Usage,
                "n_q must be in 1.." + std::to_string(config().n_q) + ", got " + std::to_string(n_q));
  const int64_t F = frames_for(T, config()), fs = config().frame_size();
  const int64_t chunk = opts_.chunk_frames > 0 ? std::min(F, opts_.chunk_frames) : F;
  EncodePlan& plan = encode_plan(chunk, n_q);
  plan.reset();
  Codes out{n_q, F, std::vector<int32_t>(size_t(n_q) * size_t(F))};
  std::vector<float> last;  // the final chunk, zero-padded to whole frames
  for (int64_t f0 = 0; f0 < F; f0 += chunk) {
    const int64_t n = std::min(chunk, F - f0);
    const float* src = pcm + f0 * fs;
    if ((f0 + n) * fs > T) {
      last.assign(size_t(n * fs), 0.0f);
      std::copy(src, pcm + T, last.begin());
      src = last.data();
    }
    plan.push(src, n);
    for (int k = 0; k < n_q; ++k)
      std::copy_n(plan.codes().begin() + k * n, n, out.data.begin() + k * F + f0);
  }
  return out;
}

std::vector<float> Engine::decode(const Codes& codes, int n_q) {
  if (n_q < 0) n_q = codes.n_q;
  if (codes.frames < 1) throw Error(ErrorKind::Input, "no frames to decode");
  if (n_q < 1 || n_q > codes.n_q)
    throw Error(ErrorKind::Usage, "cannot decode with " + std::to_string(n_q) + " codebooks: the codes hold " +
                                      std::to_string(codes.n_q));
  if (codes.n_q > config().n_q)
    throw Error(ErrorKind::Input, "the codes have " + std::to_string(codes.n_q) + " codebooks, the model " +
                                      std::to_string(config().n_q));
  if (codes.data.size() != size_t(codes.n_q) * size_t(codes.frames))
    throw Error(ErrorKind::Internal, "codes size does not match n_q x frames");
  const int64_t F = codes.frames, fs = config().frame_size();
  const int64_t chunk = opts_.chunk_frames > 0 ? std::min(F, opts_.chunk_frames) : F;
  DecodePlan& plan = decode_plan(chunk, n_q);
  plan.reset();
  std::vector<float> out(size_t(F * fs));
  std::vector<int32_t> part(size_t(n_q) * size_t(chunk));
  for (int64_t f0 = 0; f0 < F; f0 += chunk) {
    const int64_t n = std::min(chunk, F - f0);
    for (int k = 0; k < n_q; ++k)  // the first n_q codebooks of frames [f0, f0 + n)
      std::copy_n(codes.data.begin() + k * F + f0, n, part.begin() + k * n);
    plan.push(part.data(), n);
    std::copy_n(plan.output().ptr(), n * fs, out.begin() + f0 * fs);
  }
  return out;
}

}  // namespace mimi
