#include "codec/plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "codec/error.h"
#include "codec/profile.h"

namespace mimi {
namespace {

Conv1dShape at_length(Conv1dShape s, int64_t T) {
  s.length_in = T;
  return s;
}
ConvTranspose1dShape at_length(ConvTranspose1dShape s, int64_t T) {
  s.length_in = T;
  return s;
}

const float* opt(const Tensor& t) { return t.empty() ? nullptr : t.data; }

double conv_flops(const Conv1dShape& s) {
  return 2.0 * double(s.out_channels) * double(s.in_channels / s.groups) * double(s.kernel) * double(s.length_out());
}
double convtr_flops(const ConvTranspose1dShape& s) {
  return 2.0 * double(s.in_channels) * double(s.out_channels / s.groups) * double(s.kernel) * double(s.length_in);
}

// y [Cout, T'] = conv(x [Cin, T])
int64_t run_conv(const Kernels& k, const Conv& c, const float* x, int64_t T, float* y, StageTimer& t,
                 bool accumulate = false) {
  const Conv1dShape s = at_length(c.shape, T);
  k.conv1d(s, x, c.weight.data, opt(c.bias), y, accumulate);
  t.add_flops(conv_flops(s));
  return s.length_out();
}

// x [C, T] += conv2(ELU(conv1(ELU(x)))); uses scratch b [C, T] and c [C/compress, T]; the
// residual add is fused into conv2.
void run_resblock(const Kernels& k, const ResBlock& r, float* x, int64_t C, int64_t T, Scratch& s, StageTimer& t) {
  k.elu(C * T, x, s.b.ptr());
  run_conv(k, r.conv1, s.b.ptr(), T, s.c.ptr(), t);
  k.elu(r.conv1.shape.out_channels * T, s.c.ptr(), s.c.ptr());
  run_conv(k, r.conv2, s.c.ptr(), T, x, t, /*accumulate=*/true);
}

// Sizes the SEANet ping-pong scratch for signals up to maxCT floats.
void size_seanet_scratch(Scratch& s, int64_t maxCT, int64_t compress) {
  s.a.resize({maxCT});
  s.b.resize({maxCT});
  s.c.resize({(maxCT + compress - 1) / compress});
}

void size_transformer_scratch(Scratch& s, const Config& c, int64_t T) {
  const int64_t D = c.d_model;
  s.h.resize({D, T});
  s.qkv.resize({3 * D, T});
  s.o.resize({D, T});
  s.ff.resize({c.dim_feedforward, T});
}

// x [D, T] through the transformer layers, in place (offline: positions start at 0).
void run_transformer(const Kernels& k, const Config& c, const std::vector<TransformerLayer>& layers,
                     float* x, int64_t T, Scratch& s, StageTimer& t) {
  const int64_t D = c.d_model, H = c.num_heads, hd = c.head_dim(), FF = c.dim_feedforward;
  const float scale = 1.0f / std::sqrt(float(hd));
  float* q = s.qkv.ptr();
  float* kk = q + D * T;
  float* v = kk + D * T;
  for (const TransformerLayer& L : layers) {
    k.layer_norm(D, T, x, L.norm1_w.data, L.norm1_b.data, float(c.norm_eps), s.h.ptr());
    k.linear(D, 3 * D, T, L.in_proj.data, s.h.ptr(), s.qkv.ptr());
    k.rope(H, hd, T, 0, float(c.max_period), RopeLayout::Interleaved, q);
    k.rope(H, hd, T, 0, float(c.max_period), RopeLayout::Interleaved, kk);
    k.attention(H, T, T, hd, 0, 0, c.context, scale, q, kk, v, s.o.ptr());
    k.linear(D, D, T, L.out_proj.data, s.o.ptr(), s.h.ptr());
    k.layer_scale_add(D, T, L.scale1.data, s.h.ptr(), x);
    k.layer_norm(D, T, x, L.norm2_w.data, L.norm2_b.data, float(c.norm_eps), s.h.ptr());
    k.linear(D, FF, T, L.linear1.data, s.h.ptr(), s.ff.ptr());
    k.gelu_erf(FF * T, s.ff.ptr(), s.ff.ptr());
    k.linear(FF, D, T, L.linear2.data, s.ff.ptr(), s.o.ptr());
    k.layer_scale_add(D, T, L.scale2.data, s.o.ptr(), x);
    const double window = double(std::min<int64_t>(T, c.context));
    t.add_flops(2.0 * double(T) * (4.0 * D * D + 2.0 * D * FF) + 4.0 * double(T) * window * double(D));
  }
}

std::vector<const float*> book_ptrs(const QuantizerGroup& g, int n, bool sq) {
  std::vector<const float*> p;
  for (int i = 0; i < n; ++i) p.push_back(sq ? g.books[size_t(i)].sq_norm.data : g.books[size_t(i)].embedding.data);
  return p;
}

void check_frames_nq(const Config& c, int64_t frames, int n_q) {
  if (frames < 1) throw Error(ErrorKind::Usage, "a plan needs at least one frame, got " + std::to_string(frames));
  if (n_q < 1 || n_q > c.n_q)
    throw Error(ErrorKind::Usage, "n_q must be in 1.." + std::to_string(c.n_q) + ", got " + std::to_string(n_q));
}

}  // namespace

// ---------------------------------------------------------------------------------- encode

EncodePlan::EncodePlan(const Model& m, const Device& device, int64_t frames, int n_q)
    : m_(m), k_(kernels_for(device)), frames_(frames), n_q_(n_q) {
  const Config& c = m.cfg;
  check_frames_nq(c, frames, n_q);
  const int64_t T = frames * c.frame_size();
  const int64_t T25 = frames * c.downsample_stride();  // encoder frame rate steps
  input_.resize({1, T});
  // Largest SEANet activation: widths double as the time axis shrinks by the ratio.
  int64_t maxCT = c.n_filters * T, ch = c.n_filters, t = T;
  for (auto it = c.ratios.rbegin(); it != c.ratios.rend(); ++it) {
    ch *= 2;
    t /= *it;
    maxCT = std::max(maxCT, ch * t);
  }
  maxCT = std::max<int64_t>(maxCT, int64_t(c.dimension) * T25);
  size_seanet_scratch(s_, maxCT, c.compress);
  size_transformer_scratch(s_, c, T25);
  seanet_out_.resize({c.dimension, T25});
  tf_out_.resize({c.dimension, T25});
  latent_.resize({c.dimension, frames});
  first_in_.resize({c.q_dimension, frames});
  rest_in_.resize({c.q_dimension, frames});
  codes_.assign(size_t(n_q) * size_t(frames), 0);
}

void EncodePlan::bind_input(const float* pcm, int64_t T) {
  if (T < 1 || T > samples())
    throw Error(ErrorKind::Usage, "encode plan for " + std::to_string(samples()) + " samples got " +
                                      std::to_string(T));
  std::memcpy(input_.ptr(), pcm, size_t(T) * sizeof(float));
  std::fill(input_.data.begin() + T, input_.data.end(), 0.0f);
}

void EncodePlan::run() {
  const Config& c = m_.cfg;
  Scratch& s = s_;
  // SEANet encoder: conv -> [resblocks, ELU, strided conv] x 4 -> ELU -> conv
  int64_t T = samples(), C = m_.enc_in.shape.out_channels;
  {
    StageTimer t(profile_, "enc.seanet.conv_in");
    run_conv(k_, m_.enc_in, input_.ptr(), T, s.a.ptr(), t);
  }
  static const char* kBlocks[] = {"enc.seanet.block1", "enc.seanet.block2", "enc.seanet.block3", "enc.seanet.block4",
                                  "enc.seanet.block5", "enc.seanet.block6"};
  int b = 0;
  for (const EncoderStage& st : m_.enc) {
    StageTimer t(profile_, kBlocks[std::min(b++, 5)]);
    for (const ResBlock& r : st.res) run_resblock(k_, r, s.a.ptr(), C, T, s, t);
    k_.elu(C * T, s.a.ptr(), s.b.ptr());
    T = run_conv(k_, st.down, s.b.ptr(), T, s.a.ptr(), t);
    C = st.down.shape.out_channels;
  }
  {
    StageTimer t(profile_, "enc.seanet.conv_out");
    k_.elu(C * T, s.a.ptr(), s.b.ptr());
    run_conv(k_, m_.enc_out, s.b.ptr(), T, seanet_out_.ptr(), t);
  }
  // encoder transformer (25 Hz), then downsample to the 12.5 Hz latent
  {
    StageTimer t(profile_, "enc.transformer");
    tf_out_.data = seanet_out_.data;
    run_transformer(k_, c, m_.enc_tf, tf_out_.ptr(), T, s, t);
  }
  {
    StageTimer t(profile_, "enc.downsample");
    run_conv(k_, m_.downsample, tf_out_.ptr(), T, latent_.ptr(), t);
  }
  StageTimer rvq_timer(profile_, "enc.rvq");

  // split RVQ: both groups quantize projections of the same latent
  const int64_t F = frames_, D = c.dimension, Q = c.q_dimension;
  k_.linear(D, Q, F, m_.semantic.input_proj.data, latent_.ptr(), first_in_.ptr());
  k_.linear(D, Q, F, m_.acoustic.input_proj.data, latent_.ptr(), rest_in_.ptr());
  const int n_sem = std::min(n_q_, c.n_q_semantic), n_ac = n_q_ - n_sem;
  auto sem_e = book_ptrs(m_.semantic, n_sem, false), sem_n = book_ptrs(m_.semantic, n_sem, true);
  k_.rvq_encode(Q, F, c.bins, n_sem, first_in_.ptr(), sem_e.data(), sem_n.data(), codes_.data());
  if (n_ac > 0) {
    auto ac_e = book_ptrs(m_.acoustic, n_ac, false), ac_n = book_ptrs(m_.acoustic, n_ac, true);
    k_.rvq_encode(Q, F, c.bins, n_ac, rest_in_.ptr(), ac_e.data(), ac_n.data(), codes_.data() + n_sem * F);
  }
  rvq_timer.add_flops(2.0 * double(F) * (2.0 * D * Q + double(n_q_) * c.bins * Q));
}

const Buffer& EncodePlan::stage(const std::string& name) const {
  if (name == "input") return input_;
  if (name == "seanet_encoder_out") return seanet_out_;
  if (name == "encoder_transformer_out") return tf_out_;
  if (name == "latent") return latent_;
  if (name == "rvq_first_in") return first_in_;
  if (name == "rvq_rest_in") return rest_in_;
  throw Error(ErrorKind::Usage, "encode plan has no stage '" + name + "'");
}

// ---------------------------------------------------------------------------------- decode

DecodePlan::DecodePlan(const Model& m, const Device& device, int64_t frames, int n_q)
    : m_(m), k_(kernels_for(device)), frames_(frames), n_q_(n_q) {
  const Config& c = m.cfg;
  check_frames_nq(c, frames, n_q);
  const int64_t T25 = frames * c.downsample_stride(), T = frames * c.frame_size();
  codes_.assign(size_t(n_q) * size_t(frames), 0);
  sum_.resize({c.q_dimension, frames});
  quantized_.resize({c.dimension, frames});
  tmp_.resize({c.dimension, frames});
  upsampled_.resize({c.dimension, T25});
  tf_out_.resize({c.dimension, T25});
  output_.resize({1, T});
  int64_t ch = int64_t(c.n_filters) << c.ratios.size(), t = T25;
  int64_t maxCT = ch * t;
  for (int r : c.ratios) {
    ch /= 2;
    t *= r;
    maxCT = std::max(maxCT, ch * t);
  }
  size_seanet_scratch(s_, maxCT, c.compress);
  size_transformer_scratch(s_, c, T25);
}

void DecodePlan::bind_codes(const int32_t* codes) {
  const int bins = m_.cfg.bins;
  for (size_t i = 0; i < codes_.size(); ++i) {
    if (codes[i] < 0 || codes[i] >= bins)
      throw Error(ErrorKind::Input, "code " + std::to_string(codes[i]) + " at codebook " +
                                        std::to_string(i / size_t(frames_)) + ", frame " +
                                        std::to_string(i % size_t(frames_)) + " is outside [0, " +
                                        std::to_string(bins) + ")");
    codes_[i] = codes[i];
  }
}

void DecodePlan::run() {
  const Config& c = m_.cfg;
  Scratch& s = s_;
  const int64_t F = frames_, D = c.dimension, Q = c.q_dimension;
  // quantized = out_proj_sem(e0) + out_proj_ac(e1 + e2 + ...)
  const int n_sem = std::min(n_q_, c.n_q_semantic), n_ac = n_q_ - n_sem;
  {
    StageTimer rvq_timer(profile_, "dec.rvq");
    rvq_timer.add_flops(2.0 * double(F) * double(D) * Q * (n_ac > 0 ? 2 : 1));
    auto sem_e = book_ptrs(m_.semantic, n_sem, false);
    k_.rvq_decode(Q, F, c.bins, n_sem, codes_.data(), sem_e.data(), sum_.ptr());
    k_.linear(Q, D, F, m_.semantic.output_proj.data, sum_.ptr(), quantized_.ptr());
    if (n_ac > 0) {
      auto ac_e = book_ptrs(m_.acoustic, n_ac, false);
      k_.rvq_decode(Q, F, c.bins, n_ac, codes_.data() + n_sem * F, ac_e.data(), sum_.ptr());
      k_.linear(Q, D, F, m_.acoustic.output_proj.data, sum_.ptr(), tmp_.ptr());
      k_.add_inplace(D * F, tmp_.ptr(), quantized_.ptr());
    }
  }
  // upsample to 25 Hz, decoder transformer
  const ConvTranspose1dShape up = at_length(m_.upsample.shape, F);
  int64_t T = up.length_out();
  {
    StageTimer t(profile_, "dec.upsample");
    k_.conv_transpose1d(up, quantized_.ptr(), m_.upsample.weight.data, nullptr, upsampled_.ptr());
    t.add_flops(convtr_flops(up));
  }
  {
    StageTimer t(profile_, "dec.transformer");
    tf_out_.data = upsampled_.data;
    run_transformer(k_, c, m_.dec_tf, tf_out_.ptr(), T, s, t);
  }
  // SEANet decoder: conv -> [ELU, convtr, resblocks] x 4 -> ELU -> conv
  int64_t C = m_.dec_in.shape.out_channels;
  {
    StageTimer t(profile_, "dec.seanet.conv_in");
    run_conv(k_, m_.dec_in, tf_out_.ptr(), T, s.a.ptr(), t);
  }
  static const char* kBlocks[] = {"dec.seanet.block1", "dec.seanet.block2", "dec.seanet.block3", "dec.seanet.block4",
                                  "dec.seanet.block5", "dec.seanet.block6"};
  int b = 0;
  for (const DecoderStage& st : m_.dec) {
    StageTimer t(profile_, kBlocks[std::min(b++, 5)]);
    k_.elu(C * T, s.a.ptr(), s.b.ptr());
    const ConvTranspose1dShape sh = at_length(st.up.shape, T);
    k_.conv_transpose1d(sh, s.b.ptr(), st.up.weight.data, opt(st.up.bias), s.a.ptr());
    t.add_flops(convtr_flops(sh));
    T = sh.length_out();
    C = sh.out_channels;
    for (const ResBlock& r : st.res) run_resblock(k_, r, s.a.ptr(), C, T, s, t);
  }
  StageTimer t(profile_, "dec.seanet.conv_out");
  k_.elu(C * T, s.a.ptr(), s.b.ptr());
  run_conv(k_, m_.dec_out, s.b.ptr(), T, output_.ptr(), t);
}

const Buffer& DecodePlan::stage(const std::string& name) const {
  if (name == "quantized_latent") return quantized_;
  if (name == "upsampled_latent") return upsampled_;
  if (name == "decoder_transformer_out") return tf_out_;
  if (name == "output") return output_;
  throw Error(ErrorKind::Usage, "decode plan has no stage '" + name + "'");
}

}  // namespace mimi
