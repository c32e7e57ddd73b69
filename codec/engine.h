// The engine: a loaded model, a device, and cached plans. encode() turns 24 kHz mono PCM into
// codes, decode() codes into PCM, exactly as the official MimiModel.encode/decode.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "codec/device.h"
#include "codec/model.h"
#include "codec/plan.h"
#include "codec/plan_cache.h"

namespace mimi {

struct EngineOptions {
  Device device;
  size_t plan_cache_capacity = 4;  // 0 = no caching
  int threads = 0;                 // CPU threads, 0 = all
  // Signals longer than this many 80 ms frames run through one plan in chunks of it (constant
  // memory, one plan for any length); 0 = always one chunk. Encoding's chunk is the smaller: its
  // plan holds ~2.4x decoding's activations per frame (the 24 kHz input side of the SEANet), and
  // at 64 frames it runs as fast as at 128 with half the memory (docs/PERF.md, issue 29), while
  // decoding at 64 is 3-5 % slower. The codes and samples are the same at any chunk.
  int64_t encode_chunk_frames = 64;
  int64_t decode_chunk_frames = 128;
  EngineOptions& with_chunk_frames(int64_t frames) {  // both directions (tests, bench --chunk)
    encode_chunk_frames = decode_chunk_frames = frames;
    return *this;
  }
  // On a GPU: capture a plan's steady steps into graphs and replay them (codec/step_graph.h).
  bool graphs = true;
  // Tests only: run on this kernel table instead of the device's (e.g. the CPU kernels with
  // host_memory = false and no fused ops, to exercise the GPU plans' code path on the CPU).
  const Kernels* kernels = nullptr;
};

struct Codes {
  int n_q = 0;
  int64_t frames = 0;
  std::vector<int32_t> data;  // [n_q, frames], codebook 0 = semantic
};

class Engine;

// Incremental encoding that gives exactly Engine::encode's result: feed samples in pieces of any
// size; complete frames are encoded chunk by chunk; finish() pads the last partial frame.
class EncoderSession {
 public:
  EncoderSession(Engine& engine, int n_q);
  void feed(const float* pcm, int64_t n);
  Codes finish();
  int64_t samples() const { return samples_; }

 private:
  void encode_pending(bool final);
  Engine& engine_;
  int n_q_;
  int64_t chunk_, frame_size_, samples_ = 0;
  std::vector<float> pending_;
  std::vector<std::vector<int32_t>> rows_;  // per codebook
  EncodePlan* plan_ = nullptr;              // owned by the engine's cache; kept for the session
};

// A copy of `host` whose tensors live in the memory of kernels `k`, uploaded once (the model itself
// where `k` computes in host memory). Plans over device kernels need it (plan.h).
std::shared_ptr<const Model> place_model(const std::shared_ptr<const Model>& host, const Kernels& k);

class Engine {
 public:
  Engine(std::shared_ptr<const Model> model, EngineOptions opts = {});

  const Model& model() const { return *model_; }
  // The model itself, to give another engine (a stream of its own: its plans, its state).
  std::shared_ptr<const Model> shared_model() const { return model_; }
  const Config& config() const { return model_->cfg; }
  const Device& device() const { return opts_.device; }
  const EngineOptions& options() const { return opts_; }

  // F = ceil(T / frame_size) frames; the input is zero-padded to F * frame_size first. Runs in
  // chunks of encode_chunk_frames through a streaming plan, which gives the offline result.
  // T = 0 and n_q outside 1..cfg.n_q throw Error(Usage).
  Codes encode(const float* pcm, int64_t T, int n_q);
  // Decodes with the first n_q codebooks (n_q <= codes.n_q; -1 = all of them).
  // Returns frames * frame_size samples (no trimming).
  std::vector<float> decode(const Codes& codes, int n_q = -1);

  // Throws unless the first n_q codebooks of `codes` can be decoded by this model: frames >= 1
  // (Error(Input)), 1 <= n_q <= codes.n_q (Usage), codes.n_q <= the model's (Input), data of
  // n_q x frames (Internal). The values' range is checked as they are decoded.
  void check_codes(const Codes& codes, int n_q) const;

  // Decodes in chunks, handing each chunk's samples to `sink` as soon as it is done (constant
  // memory for any length).
  void decode_chunks(const Codes& codes, int n_q, const std::function<void(const float*, int64_t)>& sink);

  // The cached plans themselves (tests read their stage outputs); `slots` independent streams.
  EncodePlan& encode_plan(int64_t frames, int n_q, int slots = 1);
  DecodePlan& decode_plan(int64_t frames, int n_q, int slots = 1);

  // Per-stage timing for every plan the engine hands out from now on (nullptr: off).
  // Attaches a profile to the plans this engine hands out (nullptr: none). On a GPU its stages
  // are timed with device events: call p->resolve() after the run, before reading it.
  void set_profile(Profile* p) {
    profile_ = p;
    if (p) p->device = kernels_->graphs;
  }

  // Steps captured, replayed and run op by op on a backend with graphs, over every plan so far.
  const GraphStats& graph_stats() const { return graph_stats_; }

  PlanCache<EncodePlan>& encode_cache() { return enc_cache_; }
  PlanCache<DecodePlan>& decode_cache() { return dec_cache_; }

  static int64_t frames_for(int64_t samples, const Config& c) {
    return (samples + c.frame_size() - 1) / c.frame_size();
  }

 private:
  std::shared_ptr<const Model> model_;
  EngineOptions opts_;
  const Kernels* kernels_;
  std::shared_ptr<const Model> placed_;  // model_ with its tensors where kernels_ compute
  PlanCache<EncodePlan> enc_cache_;
  PlanCache<DecodePlan> dec_cache_;
  Profile* profile_ = nullptr;
  GraphStats graph_stats_;
};

}  // namespace mimi
