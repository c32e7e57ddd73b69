#include "codec/engine.h"

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
  const int64_t F = frames_for(T, config());
  EncodePlan& plan = encode_plan(F, n_q);
  plan.bind_input(pcm, T);
  plan.run();
  return Codes{n_q, F, plan.codes()};
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
  DecodePlan& plan = decode_plan(codes.frames, n_q);
  plan.bind_codes(codes.data.data());  // the first n_q rows
  plan.run();
  return plan.output().data;
}

}  // namespace mimi
