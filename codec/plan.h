// Encode and decode plans. Lifecycle: build (shapes resolved for a fixed frame count and n_q,
// every intermediate buffer allocated once) -> bind inputs -> run -> read outputs; run as often
// as you like. Stage outputs stay readable after run() so tests can compare layer by layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/device.h"
#include "codec/model.h"
#include "codec/profile.h"

namespace mimi {

struct Buffer {
  Shape shape;              // [C, T]
  std::vector<float> data;  // row-major
  void resize(Shape s) {
    shape = std::move(s);
    data.assign(size_t(numel(shape)), 0.0f);
  }
  float* ptr() { return data.data(); }
  const float* ptr() const { return data.data(); }
};

// Scratch shared by the SEANet and transformer runs of a plan.
struct Scratch {
  Buffer a, b, c;                  // SEANet ping-pong: a, b [maxC, maxT], c half of that
  Buffer h, qkv, o, ff;            // transformer: [D,T], [3D,T], [D,T], [FF,T]
};

class EncodePlan {
 public:
  EncodePlan(const Model& model, const Device& device, int64_t frames, int n_q);

  int64_t frames() const { return frames_; }
  int n_q() const { return n_q_; }
  int64_t samples() const { return input_.shape[1]; }  // frames * frame_size

  // Copies pcm[0:T] (T <= samples()) and zero-pads to samples().
  void bind_input(const float* pcm, int64_t T);
  void run();

  const std::vector<int32_t>& codes() const { return codes_; }  // [n_q, frames]
  // Attach a profile to time stages and count FLOPs on later runs (nullptr detaches).
  void set_profile(Profile* p) { profile_ = p; }
  // "seanet_encoder_out", "encoder_transformer_out", "latent", "rvq_first_in", "rvq_rest_in"
  const Buffer& stage(const std::string& name) const;

 private:
  const Model& m_;
  const Kernels& k_;
  int64_t frames_;
  int n_q_;
  Buffer input_, seanet_out_, tf_out_, latent_, first_in_, rest_in_;
  std::vector<int32_t> codes_;
  Scratch s_;
  Profile* profile_ = nullptr;
};

class DecodePlan {
 public:
  DecodePlan(const Model& model, const Device& device, int64_t frames, int n_q);

  int64_t frames() const { return frames_; }
  int n_q() const { return n_q_; }

  // codes [n_q, frames]; every value must be in [0, bins) (checked, throws Error(Input)).
  void bind_codes(const int32_t* codes);
  void run();

  const Buffer& output() const { return output_; }  // [1, frames * frame_size]
  void set_profile(Profile* p) { profile_ = p; }
  // "quantized_latent", "upsampled_latent", "decoder_transformer_out", "output"
  const Buffer& stage(const std::string& name) const;

 private:
  const Model& m_;
  const Kernels& k_;
  int64_t frames_;
  int n_q_;
  std::vector<int32_t> codes_;
  Buffer sum_, quantized_, tmp_, upsampled_, tf_out_, output_;
  Scratch s_;
  Profile* profile_ = nullptr;
};

}  // namespace mimi
