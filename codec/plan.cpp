#include "codec/plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "codec/error.h"
#include "codec/profile.h"

namespace mimi {

void Buffer::allocate(const Kernels& k, Shape s) {
  capacity_ = std::max<int64_t>(numel(s), 1);
  mem_ = std::shared_ptr<float>(k.alloc(size_t(capacity_)), k.release);
  shape = std::move(s);
}

namespace {

const float* opt(const Tensor& t) { return t.empty() ? nullptr : t.data; }

// Sets the logical shape of a buffer allocated for the largest chunk.
void set_shape(Buffer& b, Shape s) {
  if (numel(s) > b.capacity()) throw Error(ErrorKind::Internal, "plan buffer too small for " + shape_str(s));
  b.shape = std::move(s);
}

// Allocates a conv's stream state: its context, [Cin, P] (nothing when P = 0).
void init_state(const Kernels& k, ConvState& st, const Conv& c) {
  const int64_t Cin = c.shape.in_channels, P = c.shape.context();
  if (P <= 0) return;
  st.hist.allocate(k, {Cin, P});
  st.next.allocate(k, {Cin, P});
}

// st.next = the last P inputs of [hist | x] (x [C, T]): the context of the next chunk. Built
// before the op (a fused resblock overwrites x); commit_context() makes it current after.
void build_context(const Kernels& k, ConvState& st, const float* x, int64_t C, int64_t T, int64_t P) {
  if (T >= P) {
    k.copy2d(st.next.ptr(), P, x + T - P, T, P, C);
  } else {
    k.copy2d(st.next.ptr(), P, st.hist.ptr() + T, P, P - T, C);
    k.copy2d(st.next.ptr() + P - T, P, x, T, T, C);
  }
}
void commit_context(ConvState& st) { std::swap(st.hist, st.next); }

double conv_flops(const Conv1dShape& s) {
  return 2.0 * double(s.out_channels) * double(s.in_channels / s.groups) * double(s.kernel) * double(s.length_out());
}
double convtr_flops(const ConvTranspose1dShape& s) {
  return 2.0 * double(s.in_channels) * double(s.out_channels / s.groups) * double(s.kernel) * double(s.length_in);
}

// y [Cout, T/stride] = conv(x [Cin, T]) where the causal left context comes from `st` (zeros,
// or the first input column repeated for replicate padding, at the start of a stream) and the
// last P inputs are kept in `st` for the next chunk; the kernel reads the context in place, so
// nothing is copied. `accumulate` adds into y (residual).
int64_t conv_step(const Kernels& k, const Conv& c, ConvState& st, const float* x, int64_t T, float* y,
                  Scratch& s, StageTimer& t, bool accumulate = false, bool elu_input = false) {
  (void)s;
  Conv1dShape sh = c.shape;
  sh.length_in = T;
  sh.elu_input = elu_input;
  const int64_t P = sh.context(), Cin = sh.in_channels;
  if (P == 0) {  // no context to carry (pointwise, or kernel == stride)
    k.conv1d(sh, x, c.weight.data, opt(c.bias), y, accumulate, nullptr);
    t.add_flops(conv_flops(sh));
    return sh.length_out();
  }
  if (!st.started) {  // a stream's first chunk: the padding as context
    if (sh.pad == PadMode::Replicate)
      for (int64_t j = 0; j < P; ++j) k.copy2d(st.hist.ptr() + j, P, x, T, 1, Cin);  // column x[:, 0]
    else k.fill(st.hist.ptr(), Cin * P, 0.0f);
    st.started = true;
  }
  build_context(k, st, x, Cin, T, P);
  k.conv1d(sh, x, c.weight.data, opt(c.bias), y, accumulate, st.hist.ptr());
  commit_context(st);
  t.add_flops(conv_flops(sh));
  return sh.length_out();
}

// y [Cout, T*stride] = convtr(x [Cin, T]) plus the overlap carried from the previous chunk. The
// kernel writes the trimmed output (bias included) straight into y; the trimmed-off tail, which
// only the last ceil(K/stride) inputs reach, is recomputed from those few columns (bias-free)
// and carried on.
int64_t convtr_step(const Kernels& k, const ConvTr& c, ConvTrState& st, const float* x, int64_t T, float* y,
                    Scratch& s, StageTimer& t) {
  ConvTranspose1dShape sh = c.shape;
  sh.length_in = T;
  const int64_t Cin = sh.in_channels, Cout = sh.out_channels, O = sh.overlap(), S = sh.stride, Tout = T * S;
  k.conv_transpose1d(sh, x, c.weight.data, opt(c.bias), y);
  t.add_flops(convtr_flops(sh));
  if (O == 0) return Tout;
  if (!st.started) {
    k.fill(st.carry.ptr(), Cout * O, 0.0f);
    st.started = true;
  }
  k.add2d(y, Tout, st.carry.ptr(), O, std::min(O, Tout), Cout);
  // the tail: outputs Tout .. Tout+O-1 of the untrimmed transform, from the last m inputs
  const int64_t m = std::min(T, (sh.kernel + S - 1) / S);
  set_shape(s.work, {Cin, m});
  k.copy2d(s.work.ptr(), m, x + T - m, T, m, Cin);
  ConvTranspose1dShape tail = sh;
  tail.length_in = m;
  tail.trimmed = false;
  const int64_t L = tail.length_out();  // (m-1)*S + K; its last O outputs are the tail
  set_shape(s.full, {Cout, L});
  k.conv_transpose1d(tail, s.work.ptr(), c.weight.data, nullptr, s.full.ptr());
  if (O > Tout) std::swap(st.carry, st.old);  // a chunk shorter than the overlap: keep the rest
  k.copy2d(st.carry.ptr(), O, s.full.ptr() + L - O, L, O, Cout);
  if (O > Tout) k.add2d(st.carry.ptr(), O, st.old.ptr() + Tout, O, O - Tout, Cout);
  return Tout;
}

// x [C, T] += conv2(ELU(conv1(ELU(x)))): the backend's fused op when it has one, else the ops
// (the residual add fused into conv2). `st` carries conv1's left context of raw x.
// The caller's scratch `s` has room for the hidden activation in s.c.
void resblock_step(const Kernels& k, const ResBlock& r, ConvState& st, float* x, int64_t C, int64_t T, Scratch& s,
                   StageTimer& t) {
  const Conv1dShape& c1 = r.conv1.shape;
  if (k.resblock && c1.stride == 1 && c1.groups == 1 && r.conv2.shape.kernel == 1) {
    const int64_t P = c1.context();
    if (P > 0) {
      if (!st.started) k.fill(st.hist.ptr(), C * P, 0.0f);  // conv1 pads with zeros
      st.started = true;
      build_context(k, st, x, C, T, P);  // before the op overwrites x
    }
    const ResBlockShape sh{C, c1.out_channels, c1.kernel, c1.dilation, T};
    k.resblock(sh, r.conv1.weight.data, opt(r.conv1.bias), r.conv2.weight.data, opt(r.conv2.bias),
               P > 0 ? st.hist.ptr() : nullptr, x);
    if (P > 0) commit_context(st);
    Conv1dShape s1 = c1, s2 = r.conv2.shape;
    s1.length_in = T;
    s2.length_in = T;
    t.add_flops(conv_flops(s1) + conv_flops(s2));
    return;
  }
  // composed: conv1 reads ELU(x) (its context is raw x, as for the fused op), ELU, conv2 adds
  conv_step(k, r.conv1, st, x, T, s.c.ptr(), s, t, false, /*elu_input=*/true);
  k.elu(r.conv1.shape.out_channels * T, s.c.ptr(), s.c.ptr());
  ConvState none;  // pointwise: no context
  conv_step(k, r.conv2, none, s.c.ptr(), T, x, s, t, /*accumulate=*/true);
}

// x [D, T] through the transformer layers in place, continuing the stream in `st`.
void transformer_step(const Kernels& k, const Config& c, const std::vector<TransformerLayer>& layers,
                      TransformerState& st, float* x, int64_t T, Scratch& s, StageTimer& t) {
  const int64_t D = c.d_model, H = c.num_heads, hd = c.head_dim(), FF = c.dim_feedforward;
  const int64_t cap = c.context - 1, cached = st.cached, Tk = cached + T;
  const float scale = 1.0f / std::sqrt(float(hd));
  set_shape(s.h, {D, T});
  set_shape(s.o, {D, T});
  set_shape(s.qkv, {3 * D, T});
  set_shape(s.ff, {FF, T});
  set_shape(s.kbuf, {D, Tk});
  set_shape(s.vbuf, {D, Tk});
  float* q = s.qkv.ptr();
  float* kn = q + D * T;
  float* vn = kn + D * T;
  const int64_t keep = std::min(cap, Tk);  // cached columns after this step
  for (size_t l = 0; l < layers.size(); ++l) {
    const TransformerLayer& L = layers[l];
    k.layer_norm(D, T, x, L.norm1_w.data, L.norm1_b.data, float(c.norm_eps), s.h.ptr());
    k.linear(D, 3 * D, T, L.in_proj.data, s.h.ptr(), s.qkv.ptr());
    k.rope(H, hd, T, st.pos, float(c.max_period), RopeLayout::Interleaved, q);
    k.rope(H, hd, T, st.pos, float(c.max_period), RopeLayout::Interleaved, kn);
    // keys/values: the cached steps, then the new ones
    k.copy2d(s.kbuf.ptr(), Tk, st.k[l].ptr(), cap, cached, D);
    k.copy2d(s.kbuf.ptr() + cached, Tk, kn, T, T, D);
    k.copy2d(s.vbuf.ptr(), Tk, st.v[l].ptr(), cap, cached, D);
    k.copy2d(s.vbuf.ptr() + cached, Tk, vn, T, T, D);
    k.attention(H, T, Tk, hd, st.pos, st.pos - cached, c.context, scale, q, s.kbuf.ptr(), s.vbuf.ptr(), s.o.ptr());
    k.copy2d(st.k[l].ptr(), cap, s.kbuf.ptr() + Tk - keep, Tk, keep, D);
    k.copy2d(st.v[l].ptr(), cap, s.vbuf.ptr() + Tk - keep, Tk, keep, D);
    k.linear(D, D, T, L.out_proj.data, s.o.ptr(), s.h.ptr());
    k.layer_scale_add(D, T, L.scale1.data, s.h.ptr(), x);
    k.layer_norm(D, T, x, L.norm2_w.data, L.norm2_b.data, float(c.norm_eps), s.h.ptr());
    k.linear(D, FF, T, L.linear1.data, s.h.ptr(), s.ff.ptr());
    k.gelu_erf(FF * T, s.ff.ptr(), s.ff.ptr());
    k.linear(FF, D, T, L.linear2.data, s.ff.ptr(), s.o.ptr());
    k.layer_scale_add(D, T, L.scale2.data, s.o.ptr(), x);
    const double window = double(std::min<int64_t>(Tk, c.context));
    t.add_flops(2.0 * double(T) * (4.0 * D * D + 2.0 * D * FF) + 4.0 * double(T) * window * double(D));
  }
  st.cached = keep;
  st.pos += T;
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

// Sizes scratch buffers from the stages that will run on them: each conv's input and output
// [C, T], and a transposed conv's carried-tail inputs/outputs (work/full).
struct ScratchSizer {
  int64_t maxCT = 1, work = 1, full = 1;
  void conv(const Conv& cv, int64_t t_in) {
    maxCT = std::max({maxCT, cv.shape.in_channels * t_in, cv.shape.out_channels * (t_in / cv.shape.stride)});
  }
  void convtr(const ConvTr& cv, int64_t t_in) {
    const int64_t S = cv.shape.stride, m = std::min(t_in, (cv.shape.kernel + S - 1) / S);
    maxCT = std::max({maxCT, cv.shape.in_channels * t_in, cv.shape.out_channels * t_in * S});
    work = std::max(work, cv.shape.in_channels * m);
    full = std::max(full, cv.shape.out_channels * ((m - 1) * S + cv.shape.kernel));
  }
  void resblocks(const std::vector<ResBlock>& res, int64_t t) {
    for (const ResBlock& r : res) conv(r.conv1, t), conv(r.conv2, t);
  }
  void allocate(const Kernels& k, Scratch& s, int compress) const {
    s.a.allocate(k, {maxCT});
    s.b.allocate(k, {maxCT});
    s.c.allocate(k, {(maxCT + compress - 1) / compress});
    s.work.allocate(k, {work});
    s.full.allocate(k, {full});
  }
};

// Transformer buffers for T25 steps.
void size_transformer(const Kernels& k, Scratch& s, const Config& c, int64_t T25) {
  const int64_t D = c.d_model, Tk = c.context - 1 + T25;
  s.h.allocate(k, {D, T25});
  s.qkv.allocate(k, {3 * D, T25});
  s.o.allocate(k, {D, T25});
  s.ff.allocate(k, {c.dim_feedforward, T25});
  s.kbuf.allocate(k, {D, Tk});
  s.vbuf.allocate(k, {D, Tk});
}

// Stream state of a transformer: per layer keys and values of the last context-1 steps.
void init_state(const Kernels& k, TransformerState& st, const Config& c, size_t layers) {
  st.k.resize(layers);
  st.v.resize(layers);
  for (size_t l = 0; l < layers; ++l) {
    st.k[l].allocate(k, {c.d_model, std::max<int64_t>(c.context - 1, 1)});
    st.v[l].allocate(k, {c.d_model, std::max<int64_t>(c.context - 1, 1)});
  }
}
void init_state(const Kernels& k, ConvTrState& st, const ConvTr& c) {
  const int64_t O = std::max<int64_t>(c.shape.overlap(), 1);
  st.carry.allocate(k, {c.shape.out_channels, O});
  st.old.allocate(k, {c.shape.out_channels, O});
}

// A device buffer's contents in host memory (the buffer itself for host backends).
const Buffer& host_copy(const Kernels& k, const Buffer& b, std::map<std::string, Buffer>& copies,
                        const std::string& name) {
  if (k.host_memory) return b;
  Buffer& h = copies[name];
  if (h.capacity() < b.capacity()) h.allocate(kernels_for(Device{}), {b.capacity()});
  h.shape = b.shape;
  k.download(h.ptr(), b.ptr(), size_t(b.size()));
  return h;
}

std::shared_ptr<int32_t> alloc_codes(const Kernels& k, size_t n) {
  return std::shared_ptr<int32_t>(k.alloc_i32(n), k.release);
}

}  // namespace

SeanetSplit seanet_split(const Model& m) {
  // A stage is sub-chunked when its activation exceeds kFloatsPerFrame per frame: 64 channels
  // at 24 kHz are 122880 floats (480 kB) a frame, so a 64-frame push would stream 31 MB per pass
  // through memory. Sub-chunks of kSubFrames keep it near 8 MB. Measured (docs/PERF.md): cutting
  // only the 24 kHz stages beat also cutting the 6 kHz ones, whose transposed conv and GEMMs
  // lose more to the narrower columns than they gain in cache, and 16 frames beat 8.
  constexpr int64_t kFloatsPerFrame = 65536, kSubFrames = 16;
  SeanetSplit sp;
  sp.sub_frames = kSubFrames;
  int64_t per_frame = m.cfg.frame_size();  // samples per frame at the current stage's rate
  for (const EncoderStage& st : m.enc) {    // input of block b: in_channels of its first conv
    const int64_t C = st.res.empty() ? st.down.shape.in_channels : st.res.front().conv1.shape.in_channels;
    if (C * per_frame < kFloatsPerFrame) break;
    ++sp.enc_head;
    per_frame /= st.down.shape.stride;
  }
  per_frame = m.cfg.frame_size();
  sp.dec_tail = m.dec.size();
  for (size_t b = m.dec.size(); b-- > 0;) {  // output of block b
    if (m.dec[b].up.shape.out_channels * per_frame < kFloatsPerFrame) break;
    sp.dec_tail = b;
    per_frame /= m.dec[b].up.shape.stride;
  }
  return sp;
}

// ---------------------------------------------------------------------------------- encode

EncodePlan::EncodePlan(const Model& m, const Kernels& kernels, int64_t max_frames, int n_q)
    : m_(m), k_(kernels), max_frames_(max_frames), frame_size_(m.cfg.frame_size()), n_q_(n_q) {
  const Config& c = m.cfg;
  check_frames_nq(c, max_frames, n_q);
  const int64_t T = max_frames * frame_size_, T25 = max_frames * c.downsample_stride();
  split_ = seanet_split(m);
  ScratchSizer head, body;
  int64_t t = std::min(split_.sub_frames, max_frames) * frame_size_, tw = T;
  head.conv(m.enc_in, t);
  for (size_t b = 0; b < m.enc.size(); ++b) {
    ScratchSizer& z = b < split_.enc_head ? head : body;
    const int64_t tb = b < split_.enc_head ? t : tw;
    z.resblocks(m.enc[b].res, tb);
    z.conv(m.enc[b].down, tb);
    t /= m.enc[b].down.shape.stride;
    tw /= m.enc[b].down.shape.stride;
  }
  body.conv(m.enc_out, T25);
  body.conv(m.downsample, T25);
  body.maxCT = std::max(body.maxCT, int64_t(c.dimension) * T25);
  head.allocate(k_, head_, c.compress);
  body.allocate(k_, s_, c.compress);
  size_transformer(k_, s_, c, T25);
  input_.allocate(k_, {1, T});
  seanet_out_.allocate(k_, {c.dimension, T25});
  tf_out_.allocate(k_, {c.dimension, T25});
  latent_.allocate(k_, {c.dimension, max_frames});
  first_in_.allocate(k_, {c.q_dimension, max_frames});
  rest_in_.allocate(k_, {c.q_dimension, max_frames});
  codes_dev_ = alloc_codes(k_, size_t(n_q) * size_t(max_frames));
  codes_.reserve(size_t(n_q) * size_t(max_frames));
  // stream state
  init_state(k_, conv_in_, m.enc_in);
  res_.resize(m.enc.size() * size_t(c.n_residual_layers));
  stride_.resize(m.enc.size());
  for (size_t b = 0; b < m.enc.size(); ++b) {
    for (size_t i = 0; i < m.enc[b].res.size(); ++i)
      init_state(k_, res_[b * m.enc[b].res.size() + i], m.enc[b].res[i].conv1);
    init_state(k_, stride_[b], m.enc[b].down);
  }
  init_state(k_, conv_out_, m.enc_out);
  init_state(k_, down_, m.downsample);
  init_state(k_, tf_, c, m.enc_tf.size());
  reset();
}

void EncodePlan::reset() {
  for (ConvState* st : {&conv_in_, &conv_out_, &down_}) st->started = false;
  for (ConvState& st : res_) st.started = false;
  for (ConvState& st : stride_) st.started = false;
  tf_.cached = tf_.pos = 0;
}

void EncodePlan::bind_input(const float* pcm, int64_t T) {
  if (T < 1 || T > samples())
    throw Error(ErrorKind::Usage, "encode plan for " + std::to_string(samples()) + " samples got " + std::to_string(T));
  bound_frames_ = (T + frame_size_ - 1) / frame_size_;
  k_.upload(input_.ptr(), pcm, size_t(T));
  k_.fill(input_.ptr() + T, bound_frames_ * frame_size_ - T, 0.0f);
}

void EncodePlan::run() {
  if (bound_frames_ < 1) throw Error(ErrorKind::Usage, "encode plan: bind_input before run");
  reset();
  encode(bound_frames_);
}

void EncodePlan::push(const float* pcm, int64_t n) {
  if (n < 1 || n > max_frames_)
    throw Error(ErrorKind::Usage, "encode plan takes 1.." + std::to_string(max_frames_) + " frames per push, got " +
                                      std::to_string(n));
  k_.upload(input_.ptr(), pcm, size_t(n * frame_size_));
  encode(n);
}

void EncodePlan::encode(int64_t n) {
  const Config& c = m_.cfg;
  Scratch& s = s_;
  int64_t T = n * frame_size_, C = 0;
  set_shape(input_, {1, T});
  // the SEANet head on sub-chunks, each result scattered into its columns of s.a [C, T]
  const int64_t sub = std::min(split_.sub_frames, n);
  for (int64_t f0 = 0; f0 < n; f0 += sub) {
    const int64_t nf = std::min(sub, n - f0);
    int64_t t = nf * frame_size_, ch = m_.enc_in.shape.out_channels;
    {
      StageTimer timer(profile_, "enc.seanet.conv_in");
      conv_step(k_, m_.enc_in, conv_in_, input_.ptr() + f0 * frame_size_, t, head_.a.ptr(), head_, timer);
    }
    for (size_t b = 0; b < split_.enc_head; ++b) block(b, head_, ch, t);
    const int64_t per_frame = t / nf;
    C = ch;
    T = n * per_frame;
    k_.copy2d(s.a.ptr() + f0 * per_frame, T, head_.a.ptr(), t, t, ch);
  }
  for (size_t b = split_.enc_head; b < m_.enc.size(); ++b) block(b, s, C, T);
  const int64_t D = c.dimension, Q = c.q_dimension;
  set_shape(seanet_out_, {D, T});
  {
    StageTimer t(profile_, "enc.seanet.conv_out");
    k_.elu(C * T, s.a.ptr(), s.b.ptr());
    conv_step(k_, m_.enc_out, conv_out_, s.b.ptr(), T, seanet_out_.ptr(), s, t);
  }
  // encoder transformer (25 Hz), then downsample to the 12.5 Hz latent
  set_shape(tf_out_, {D, T});
  {
    StageTimer t(profile_, "enc.transformer");
    k_.copy2d(tf_out_.ptr(), D * T, seanet_out_.ptr(), D * T, D * T, 1);
    transformer_step(k_, c, m_.enc_tf, tf_, tf_out_.ptr(), T, s, t);
  }
  set_shape(latent_, {D, n});
  {
    StageTimer t(profile_, "enc.downsample");
    conv_step(k_, m_.downsample, down_, tf_out_.ptr(), T, latent_.ptr(), s, t);
  }
  // split RVQ: both groups quantize projections of the same latent
  StageTimer rvq_timer(profile_, "enc.rvq");
  set_shape(first_in_, {Q, n});
  set_shape(rest_in_, {Q, n});
  k_.linear(D, Q, n, m_.semantic.input_proj.data, latent_.ptr(), first_in_.ptr());
  k_.linear(D, Q, n, m_.acoustic.input_proj.data, latent_.ptr(), rest_in_.ptr());
  codes_.resize(size_t(n_q_) * size_t(n));
  const int n_sem = std::min(n_q_, c.n_q_semantic), n_ac = n_q_ - n_sem;
  auto sem_e = book_ptrs(m_.semantic, n_sem, false), sem_n = book_ptrs(m_.semantic, n_sem, true);
  k_.rvq_encode(Q, n, c.bins, n_sem, first_in_.ptr(), sem_e.data(), sem_n.data(), codes_dev_.get());
  if (n_ac > 0) {
    auto ac_e = book_ptrs(m_.acoustic, n_ac, false), ac_n = book_ptrs(m_.acoustic, n_ac, true);
    k_.rvq_encode(Q, n, c.bins, n_ac, rest_in_.ptr(), ac_e.data(), ac_n.data(), codes_dev_.get() + n_sem * n);
  }
  k_.download_i32(codes_.data(), codes_dev_.get(), codes_.size());
  rvq_timer.add_flops(2.0 * double(n) * (2.0 * D * Q + double(n_q_) * c.bins * Q));
}

void EncodePlan::block(size_t b, Scratch& sc, int64_t& C, int64_t& T) {
  const EncoderStage& st = m_.enc[b];
  StageTimer t(profile_, "enc.seanet.block" + std::to_string(b + 1));
  for (size_t i = 0; i < st.res.size(); ++i)
    resblock_step(k_, st.res[i], res_[b * st.res.size() + i], sc.a.ptr(), C, T, sc, t);
  // ELU -> strided conv in one pass (the conv splits its input into phases, ELU'd on the way)
  T = conv_step(k_, st.down, stride_[b], sc.a.ptr(), T, sc.b.ptr(), sc, t, false, /*elu_input=*/true);
  std::swap(sc.a, sc.b);  // the output is the next input; both are sized for either
  C = st.down.shape.out_channels;
}

const Buffer& EncodePlan::stage(const std::string& name) const {
  const Buffer* b = name == "input"                     ? &input_
                    : name == "seanet_encoder_out"      ? &seanet_out_
                    : name == "encoder_transformer_out" ? &tf_out_
                    : name == "latent"                  ? &latent_
                    : name == "rvq_first_in"            ? &first_in_
                    : name == "rvq_rest_in"             ? &rest_in_
                                                        : nullptr;
  if (!b) throw Error(ErrorKind::Usage, "encode plan has no stage '" + name + "'");
  return host_copy(k_, *b, host_copies_, name);
}

// ---------------------------------------------------------------------------------- decode

DecodePlan::DecodePlan(const Model& m, const Kernels& kernels, int64_t max_frames, int n_q)
    : m_(m), k_(kernels), max_frames_(max_frames), frame_size_(m.cfg.frame_size()), n_q_(n_q) {
  const Config& c = m.cfg;
  check_frames_nq(c, max_frames, n_q);
  const int64_t T25 = max_frames * c.downsample_stride(), T = max_frames * frame_size_;
  split_ = seanet_split(m);
  ScratchSizer body, tail;
  body.convtr(m.upsample, max_frames);
  body.conv(m.dec_in, T25);
  body.maxCT = std::max(body.maxCT, int64_t(c.dimension) * T25);
  int64_t tw = T25, t = std::min(split_.sub_frames, max_frames) * c.downsample_stride();
  for (size_t b = 0; b < m.dec.size(); ++b) {
    ScratchSizer& z = b < split_.dec_tail ? body : tail;
    const int64_t tb = b < split_.dec_tail ? tw : t;
    z.convtr(m.dec[b].up, tb);
    z.resblocks(m.dec[b].res, tb * m.dec[b].up.shape.stride);
    t *= m.dec[b].up.shape.stride;
    tw *= m.dec[b].up.shape.stride;
  }
  tail.conv(m.dec_out, t);
  body.allocate(k_, s_, c.compress);
  tail.allocate(k_, tail_, c.compress);
  size_transformer(k_, s_, c, T25);
  codes_.assign(size_t(n_q) * size_t(max_frames), 0);
  codes_dev_ = alloc_codes(k_, size_t(n_q) * size_t(max_frames));
  sum_.allocate(k_, {c.q_dimension, max_frames});
  quantized_.allocate(k_, {c.dimension, max_frames});
  tmp_.allocate(k_, {c.dimension, max_frames});
  upsampled_.allocate(k_, {c.dimension, T25});
  tf_out_.allocate(k_, {c.dimension, T25});
  output_.allocate(k_, {1, T});
  // stream state
  init_state(k_, up_, m.upsample);
  init_state(k_, conv_in_, m.dec_in);
  convtr_.resize(m.dec.size());
  res_.resize(m.dec.size() * size_t(c.n_residual_layers));
  for (size_t b = 0; b < m.dec.size(); ++b) {
    init_state(k_, convtr_[b], m.dec[b].up);
    for (size_t i = 0; i < m.dec[b].res.size(); ++i)
      init_state(k_, res_[b * m.dec[b].res.size() + i], m.dec[b].res[i].conv1);
  }
  init_state(k_, conv_out_, m.dec_out);
  init_state(k_, tf_, c, m.dec_tf.size());
  reset();
}

void DecodePlan::reset() {
  for (ConvState* st : {&conv_in_, &conv_out_}) st->started = false;
  for (ConvState& st : res_) st.started = false;
  up_.started = false;
  for (ConvTrState& st : convtr_) st.started = false;
  tf_.cached = tf_.pos = 0;
}

void DecodePlan::bind_codes(const int32_t* codes) {
  std::memcpy(codes_.data(), codes, codes_.size() * sizeof(int32_t));
}

void DecodePlan::run() {
  reset();
  const std::vector<int32_t> all = codes_;
  push(all.data(), max_frames_);
}

void DecodePlan::push(const int32_t* codes, int64_t n) {
  if (n < 1 || n > max_frames_)
    throw Error(ErrorKind::Usage, "decode plan takes 1.." + std::to_string(max_frames_) + " frames per push, got " +
                                      std::to_string(n));
  const Config& c = m_.cfg;
  const int bins = c.bins;
  for (int64_t i = 0; i < int64_t(n_q_) * n; ++i)
    if (codes[i] < 0 || codes[i] >= bins)
      throw Error(ErrorKind::Input, "code " + std::to_string(codes[i]) + " at codebook " + std::to_string(i / n) +
                                        ", frame " + std::to_string(i % n) + " is outside [0, " + std::to_string(bins) +
                                        ")");
  Scratch& s = s_;
  const int64_t D = c.dimension, Q = c.q_dimension;
  k_.upload_i32(codes_dev_.get(), codes, size_t(n_q_) * size_t(n));
  const int32_t* dcodes = codes_dev_.get();  // [n_q, n] on the device
  // quantized = out_proj_sem(e0) + out_proj_ac(e1 + e2 + ...)
  const int n_sem = std::min(n_q_, c.n_q_semantic), n_ac = n_q_ - n_sem;
  set_shape(quantized_, {D, n});
  {
    StageTimer rvq_timer(profile_, "dec.rvq");
    rvq_timer.add_flops(2.0 * double(n) * double(D) * Q * (n_ac > 0 ? 2 : 1));
    auto sem_e = book_ptrs(m_.semantic, n_sem, false);
    k_.rvq_decode(Q, n, bins, n_sem, dcodes, sem_e.data(), sum_.ptr());
    k_.linear(Q, D, n, m_.semantic.output_proj.data, sum_.ptr(), quantized_.ptr());
    if (n_ac > 0) {
      auto ac_e = book_ptrs(m_.acoustic, n_ac, false);
      k_.rvq_decode(Q, n, bins, n_ac, dcodes + n_sem * n, ac_e.data(), sum_.ptr());
      k_.linear(Q, D, n, m_.acoustic.output_proj.data, sum_.ptr(), tmp_.ptr());
      k_.add_inplace(D * n, tmp_.ptr(), quantized_.ptr());
    }
  }
  // upsample to 25 Hz, decoder transformer
  int64_t T = n * c.downsample_stride();
  set_shape(upsampled_, {D, T});
  set_shape(tf_out_, {D, T});
  {
    StageTimer t(profile_, "dec.upsample");
    convtr_step(k_, m_.upsample, up_, quantized_.ptr(), n, upsampled_.ptr(), s, t);
  }
  {
    StageTimer t(profile_, "dec.transformer");
    k_.copy2d(tf_out_.ptr(), D * T, upsampled_.ptr(), D * T, D * T, 1);
    transformer_step(k_, c, m_.dec_tf, tf_, tf_out_.ptr(), T, s, t);
  }
  // SEANet decoder: conv -> [ELU, convtr, resblocks] x 4 -> ELU -> conv
  int64_t C = m_.dec_in.shape.out_channels;
  {
    StageTimer t(profile_, "dec.seanet.conv_in");
    conv_step(k_, m_.dec_in, conv_in_, tf_out_.ptr(), T, s.a.ptr(), s, t);
  }
  for (size_t b = 0; b < split_.dec_tail; ++b) block(b, s, C, T);
  // the SEANet tail on sub-chunks: gather each one's columns of s.a [C, T]
  set_shape(output_, {1, n * frame_size_});
  const int64_t sub = std::min(split_.sub_frames, n), per_frame = T / n;
  for (int64_t f0 = 0; f0 < n; f0 += sub) {
    const int64_t nf = std::min(sub, n - f0);
    int64_t t = nf * per_frame, ch = C;
    k_.copy2d(tail_.a.ptr(), t, s.a.ptr() + f0 * per_frame, T, t, ch);
    for (size_t b = split_.dec_tail; b < m_.dec.size(); ++b) block(b, tail_, ch, t);
    StageTimer timer(profile_, "dec.seanet.conv_out");  // ELU -> conv (64 -> 1 channel) in one pass
    conv_step(k_, m_.dec_out, conv_out_, tail_.a.ptr(), t, output_.ptr() + f0 * frame_size_, tail_, timer, false,
              /*elu_input=*/true);
  }
}

const Buffer& DecodePlan::output() const { return host_copy(k_, output_, host_copies_, "output"); }

void DecodePlan::block(size_t b, Scratch& sc, int64_t& C, int64_t& T) {
  const DecoderStage& st = m_.dec[b];
  StageTimer t(profile_, "dec.seanet.block" + std::to_string(b + 1));
  k_.elu(C * T, sc.a.ptr(), sc.b.ptr());
  T = convtr_step(k_, st.up, convtr_[b], sc.b.ptr(), T, sc.a.ptr(), sc, t);
  C = st.up.shape.out_channels;
  for (size_t i = 0; i < st.res.size(); ++i)
    resblock_step(k_, st.res[i], res_[b * st.res.size() + i], sc.a.ptr(), C, T, sc, t);
}

const Buffer& DecodePlan::stage(const std::string& name) const {
  const Buffer* b = name == "quantized_latent"          ? &quantized_
                    : name == "upsampled_latent"        ? &upsampled_
                    : name == "decoder_transformer_out" ? &tf_out_
                    : name == "output"                  ? &output_
                                                        : nullptr;
  if (!b) throw Error(ErrorKind::Usage, "decode plan has no stage '" + name + "'");
  return host_copy(k_, *b, host_copies_, name);
}

}  // namespace mimi
