#include "codec/engine.h"

#include <algorithm>

#include "codec/error.h"

namespace mimi {

std::shared_ptr<const Model> place_model(const std::shared_ptr<const Model>& host, const Kernels& k) {
  if (k.host_memory || host->in_device_memory) return host;
  auto dev = std::make_shared<Model>(*host);
  dev->in_device_memory = true;
  for_each_tensor(*dev, [&](Tensor& t) {
    if (t.empty()) return;
    std::shared_ptr<float> mem(k.alloc(size_t(t.size())), k.release);
    k.upload(mem.get(), t.data, size_t(t.size()));
    t.data = mem.get();
    t.owner = mem;
  });
  return dev;
}

Engine::Engine(std::shared_ptr<const Model> model, EngineOptions opts)
    : model_(std::move(model)),
      opts_(opts),
      // fails now, not at the first call, if the device is missing
      kernels_(opts.kernels ? opts.kernels : &kernels_for(opts.device)),
      placed_(place_model(model_, *kernels_)),
      enc_cache_(opts.plan_cache_capacity),
      dec_cache_(opts.plan_cache_capacity) {
  if (opts_.threads > 0) cpu::set_num_threads(opts_.threads);
}

EncodePlan& Engine::encode_plan(int64_t frames, int n_q, int slots) {
  if (!model_->has_encoder) throw Error(ErrorKind::Internal, "encode with a model loaded without its encoder");
  const PlanKey key{opts_.device, Direction::Encode, frames, n_q, slots};
  EncodePlan& plan =
      enc_cache_.get(key, [&] { return std::make_unique<EncodePlan>(*placed_, *kernels_, frames, n_q, slots); });
  plan.set_profile(profile_);
  plan.set_graphs(opts_.graphs);
  plan.set_graph_stats(&graph_stats_);
  return plan;
}

DecodePlan& Engine::decode_plan(int64_t frames, int n_q, int slots) {
  if (!model_->has_decoder) throw Error(ErrorKind::Internal, "decode with a model loaded without its decoder");
  const PlanKey key{opts_.device, Direction::Decode, frames, n_q, slots};
  DecodePlan& plan =
      dec_cache_.get(key, [&] { return std::make_unique<DecodePlan>(*placed_, *kernels_, frames, n_q, slots); });
  plan.set_profile(profile_);
  plan.set_graphs(opts_.graphs);
  plan.set_graph_stats(&graph_stats_);
  return plan;
}

Codes Engine::encode(const float* pcm, int64_t T, int n_q) {
  if (T < 1) throw Error(ErrorKind::Usage, "cannot encode an empty signal (0 samples)");
  EncoderSession session(*this, n_q);
  session.feed(pcm, T);
  return session.finish();
}

EncoderSession::EncoderSession(Engine& engine, int n_q)
    : engine_(engine), n_q_(n_q), frame_size_(engine.config().frame_size()) {
  const Config& c = engine.config();
  if (n_q < 1 || n_q > c.n_q)
    throw Error(ErrorKind::Usage, "n_q must be in 1.." + std::to_string(c.n_q) + ", got " + std::to_string(n_q));
  chunk_ = engine.options().encode_chunk_frames > 0 ? engine.options().encode_chunk_frames : 0;
  rows_.resize(size_t(n_q));
}

void EncoderSession::feed(const float* pcm, int64_t n) {
  pending_.insert(pending_.end(), pcm, pcm + n);
  samples_ += n;
  if (chunk_ > 0) encode_pending(false);
}

// The pushes: chunks of chunk_ frames while the signal lasts; at the end, one push of the frames
// left, the last one zero-padded (encode_pushes() states the same rule for the batch runner,
// whose slots must push exactly these chunks to give the same codes).
void EncoderSession::encode_pending(bool final) {
  if (final && pending_.size() % size_t(frame_size_) != 0)  // zero-pad the last partial frame
    pending_.resize((pending_.size() / size_t(frame_size_) + 1) * size_t(frame_size_), 0.0f);
  const int64_t whole = int64_t(pending_.size()) / frame_size_;
  // chunked: only full chunks until the end; one-chunk mode: everything at the end
  const int64_t max = chunk_ > 0 ? chunk_ : std::max<int64_t>(whole, 1);
  int64_t done = 0;  // frames
  while (whole - done >= max || (final && whole > done)) {
    const int64_t n = std::min(max, whole - done);
    if (!plan_) {  // one plan for the whole session, from a fresh state
      // A signal that ends before its first chunk is full gets a plan of its own size (a power of
      // two, so that short files share a few cached plans), not a chunk's: a 1 s file allocated
      // and cleared 10 s worth of buffers (issue 29). The pushes are the same either way.
      int64_t cap = max;
      if (final && done == 0)
        for (cap = 1; cap < whole && cap < max; cap *= 2) {
        }
      plan_ = &engine_.encode_plan(std::min(cap, max), n_q_);
      plan_->reset();
    }
    EncodePlan& plan = *plan_;
    plan.push(pending_.data() + done * frame_size_, n);
    for (int k = 0; k < n_q_; ++k) rows_[size_t(k)].insert(rows_[size_t(k)].end(), plan.codes().begin() + k * n,
                                                          plan.codes().begin() + (k + 1) * n);
    done += n;
  }
  pending_.erase(pending_.begin(), pending_.begin() + done * frame_size_);
}

Codes EncoderSession::finish() {
  if (samples_ < 1) throw Error(ErrorKind::Usage, "cannot encode an empty signal (0 samples)");
  encode_pending(true);
  Codes out{n_q_, int64_t(rows_[0].size()), {}};
  for (const auto& r : rows_) out.data.insert(out.data.end(), r.begin(), r.end());
  return out;
}

void Engine::check_codes(const Codes& codes, int n_q) const {
  if (codes.frames < 1) throw Error(ErrorKind::Input, "no frames to decode");
  if (n_q < 1 || n_q > codes.n_q)
    throw Error(ErrorKind::Usage, "cannot decode with " + std::to_string(n_q) + " codebooks: the codes hold " +
                                      std::to_string(codes.n_q));
  if (codes.n_q > config().n_q)
    throw Error(ErrorKind::Input, "the codes have " + std::to_string(codes.n_q) + " codebooks, the model " +
                                      std::to_string(config().n_q));
  if (codes.data.size() != size_t(codes.n_q) * size_t(codes.frames))
    throw Error(ErrorKind::Internal, "codes size does not match n_q x frames");
}

std::vector<float> Engine::decode(const Codes& codes, int n_q) {
  if (n_q < 0) n_q = codes.n_q;
  check_codes(codes, n_q);
  std::vector<float> out;
  out.reserve(size_t(codes.frames * config().frame_size()));
  decode_chunks(codes, n_q, [&](const float* y, int64_t n) { out.insert(out.end(), y, y + n); });
  return out;
}

void Engine::decode_chunks(const Codes& codes, int n_q, const std::function<void(const float*, int64_t)>& sink) {
  if (n_q < 0) n_q = codes.n_q;
  if (n_q < 1 || n_q > codes.n_q || codes.frames < 1 || codes.data.size() != size_t(codes.n_q) * size_t(codes.frames))
    throw Error(ErrorKind::Usage, "decode_chunks: bad codes or n_q");
  const int64_t F = codes.frames, fs = config().frame_size();
  const int64_t chunk = opts_.decode_chunk_frames > 0 ? std::min(F, opts_.decode_chunk_frames) : F;
  DecodePlan& plan = decode_plan(chunk, n_q);
  plan.reset();
  std::vector<int32_t> part(size_t(n_q) * size_t(chunk));
  for (int64_t f0 = 0; f0 < F; f0 += chunk) {
    const int64_t n = std::min(chunk, F - f0);
    for (int k = 0; k < n_q; ++k)  // the first n_q codebooks of frames [f0, f0 + n)
      std::copy_n(codes.data.begin() + k * F + f0, n, part.begin() + k * n);
    plan.push(part.data(), n);
    sink(plan.output().ptr(), n * fs);
  }
}

}  // namespace mimi
