// One streaming step of each layer kind (codec/layer_steps.h), and where the SEANet is cut into
// sub-chunks.
#include "codec/layer_steps.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "codec/error.h"
#include "codec/plan_memory.h"

namespace mimi {
namespace plan_detail {

namespace {

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
// A copy, not a swap of the two buffers: a replayed step (codec/step_graph.h) uses the buffers
// it was captured with, so a stream's state must stay in the same buffers from step to step.
void commit_context(const Kernels& k, ConvState& st, int64_t C, int64_t P) {
  k.copy2d(st.hist.ptr(), P, st.next.ptr(), P, P, C);
}

double conv_flops(const Conv1dShape& s) {
  return 2.0 * double(s.out_channels) * double(s.in_channels / s.groups) * double(s.kernel) * double(s.length_out());
}
double convtr_flops(const ConvTranspose1dShape& s) {
  return 2.0 * double(s.in_channels) * double(s.out_channels / s.groups) * double(s.kernel) * double(s.length_in);
}

}  // namespace

// The kernel reads the causal left context from `st` in place (zeros, or the first input column
// repeated for replicate padding, at the start of a stream); the last P inputs are kept in `st`
// for the next chunk.
int64_t conv_step(const Kernels& k, const Conv& c, ConvState& st, const float* x, int64_t T, float* y,
                  StageTimer& t, bool accumulate, bool elu_input) {
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
  commit_context(k, st, Cin, P);
  t.add_flops(conv_flops(sh));
  return sh.length_out();
}

bool uses_segments(const Kernels& k) {
  return k.fused && k.fused->conv1d_segments && k.fused->conv_transpose1d_segments;
}

void share_state(const Kernels& k, Buffer& base, const std::vector<ConvTrState*>& slots, const ConvTr& c) {
  const int64_t Cout = c.shape.out_channels, O = c.shape.overlap();
  if (O == 0 || slots.empty()) return;
  base.allocate(k, {int64_t(slots.size()), Cout, O});
  for (size_t s = 0; s < slots.size(); ++s) {
    slots[s]->carry.view(base.ptr() + int64_t(s) * Cout * O, Cout * O, {Cout, O});
    slots[s]->slots_base = base.ptr();
  }
}

void resblock_step_segments(const Kernels& k, const ResBlock& r, int64_t nseg, const std::vector<ConvState*>& states,
                            const WindowSegment* table, float* x, int64_t T, Scratch& s, StageTimer& t) {
  conv_step_segments(k, r.conv1, nseg, states, table, x, T, s.c.ptr(), t, false, /*elu_input=*/true);
  k.elu(r.conv1.shape.out_channels * nseg * T, s.c.ptr(), s.c.ptr());
  conv_step_segments(k, r.conv2, nseg, {}, table, s.c.ptr(), T, x, t, /*accumulate=*/true);
}

int64_t convtr_step_segments(const Kernels& k, const ConvTr& c, int64_t nseg, const std::vector<ConvTrState*>& states,
                             const WindowSegment* table, const float* x, int64_t T, float* y, StageTimer& t) {
  ConvTranspose1dShape sh = c.shape;
  sh.length_in = T;
  const int64_t O = sh.overlap();
  float* carries = nullptr;
  if (O > 0) {
    if (int64_t(states.size()) != nseg) throw Error(ErrorKind::Internal, "convtr_step_segments: a state per segment");
    for (int64_t i = 0; i < nseg; ++i) {  // a stream's first chunk: nothing carried yet, as convtr_step
      ConvTrState& st = *states[size_t(i)];
      if (!st.started) k.fill(st.carry.ptr(), sh.out_channels * O, 0.0f), st.started = true;
    }
    carries = states.front()->slots_base;
    if (!carries) throw Error(ErrorKind::Internal, "convtr_step_segments: carries not shared (share_state)");
  }
  k.fused->conv_transpose1d_segments(sh, nseg, table, x, c.weight.data, opt(c.bias), y, carries);
  t.add_flops(double(nseg) * convtr_flops(sh));
  return T * sh.stride;
}

void share_state(const Kernels& k, Buffer& base, const std::vector<ConvState*>& slots, const Conv& c) {
  const int64_t Cin = c.shape.in_channels, P = c.shape.context();
  if (P == 0 || slots.empty()) return;
  base.allocate(k, {int64_t(slots.size()), Cin, P});
  for (size_t s = 0; s < slots.size(); ++s) {
    slots[s]->hist.view(base.ptr() + int64_t(s) * Cin * P, Cin * P, {Cin, P});
    slots[s]->slots_base = base.ptr();
  }
}

int64_t conv_step_segments(const Kernels& k, const Conv& c, int64_t nseg, const std::vector<ConvState*>& states,
                           const WindowSegment* table, const float* x, int64_t T, float* y, StageTimer& t,
                           bool accumulate, bool elu_input) {
  Conv1dShape sh = c.shape;
  sh.length_in = T;
  sh.elu_input = elu_input;
  const int64_t P = sh.context(), Cin = sh.in_channels;
  float* contexts = nullptr;
  if (P > 0) {
    if (int64_t(states.size()) != nseg) throw Error(ErrorKind::Internal, "conv_step_segments: a state per segment");
    for (int64_t i = 0; i < nseg; ++i) {  // a stream's first chunk: its padding as context, as conv_step
      ConvState& st = *states[size_t(i)];
      if (st.started) continue;
      if (sh.pad == PadMode::Replicate)
        for (int64_t j = 0; j < P; ++j) k.copy2d(st.hist.ptr() + j, P, x + i * T, nseg * T, 1, Cin);
      else k.fill(st.hist.ptr(), Cin * P, 0.0f);
      st.started = true;
    }
    contexts = states.front()->slots_base;
    if (!contexts) throw Error(ErrorKind::Internal, "conv_step_segments: contexts not shared (share_state)");
  }
  k.fused->conv1d_segments(sh, nseg, table, x, c.weight.data, opt(c.bias), y, accumulate, contexts);
  t.add_flops(double(nseg) * conv_flops(sh));
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
  // a chunk shorter than the overlap: keep the rest (copied, not swapped: see commit_context)
  if (O > Tout) k.copy2d(st.old.ptr(), O, st.carry.ptr(), O, O, Cout);
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
    if (P > 0) commit_context(k, st, C, P);
    Conv1dShape s1 = c1, s2 = r.conv2.shape;
    s1.length_in = T;
    s2.length_in = T;
    t.add_flops(conv_flops(s1) + conv_flops(s2));
    return;
  }
  // composed: conv1 reads ELU(x) (its context is raw x, as for the fused op), ELU, conv2 adds
  conv_step(k, r.conv1, st, x, T, s.c.ptr(), t, false, /*elu_input=*/true);
  k.elu(r.conv1.shape.out_channels * T, s.c.ptr(), s.c.ptr());
  ConvState none;  // pointwise: no context
  conv_step(k, r.conv2, none, s.c.ptr(), T, x, t, /*accumulate=*/true);
}

// Per layer: LayerNorm, the q/k/v projection, the output projection and the MLP on all T_total
// columns (one GEMM each); per segment, RoPE at its own position, attention against its own
// window (the cached keys/values, then its new ones) and the window's update.
bool uses_rings(const Kernels& k, const Config& c, int64_t slot_T) {
  return k.fused && k.fused->rope_append && k.fused->attention_window && slot_T <= 2 * c.context;
}

void init_rings(const Kernels& k, TfRings& r, const Config& c, size_t layers, int slots, int64_t slot_T,
                const WindowSegment* table) {
  r.R = c.context - 1 + slot_T;
  r.table = table;
  r.k.resize(layers);
  r.v.resize(layers);
  for (size_t l = 0; l < layers; ++l) {
    r.k[l].allocate(k, {int64_t(slots), c.d_model, r.R});
    r.v[l].allocate(k, {int64_t(slots), c.d_model, r.R});
  }
}

void transformer_step(const Kernels& k, const Config& c, const std::vector<TransformerLayer>& layers,
                      const std::vector<TfSegment>& segments, float* x, int64_t Tt, Scratch& s, StageTimer& t,
                      TfRings* rings) {
  const int64_t D = c.d_model, H = c.num_heads, hd = c.head_dim(), FF = c.dim_feedforward;
  const int64_t cap = c.context - 1;
  const float scale = 1.0f / std::sqrt(float(hd));
  set_shape(s.h, {D, Tt});
  set_shape(s.o, {D, Tt});
  set_shape(s.qkv, {3 * D, Tt});
  set_shape(s.ff, {FF, Tt});
  const float* q = s.qkv.ptr();  // [D, Tt] each, row stride Tt
  const float* kn = q + D * Tt;
  const float* vn = kn + D * Tt;
  for (size_t l = 0; l < layers.size(); ++l) {
    const TransformerLayer& L = layers[l];
    if (k.fused)  // the norm applied as the GEMM reads x: the same bits, without writing h
      k.fused->layer_norm_linear(D, 3 * D, Tt, L.in_proj.data, x, L.norm1_w.data, L.norm1_b.data, float(c.norm_eps),
                                 false, s.stats.ptr(), s.qkv.ptr());
    else {
      k.layer_norm(D, Tt, x, L.norm1_w.data, L.norm1_b.data, float(c.norm_eps), s.h.ptr());
      k.linear(D, 3 * D, Tt, L.in_proj.data, s.h.ptr(), s.qkv.ptr());
    }
    if (rings) {  // every segment at once, on the rings: bitwise the per-segment ops below
      int64_t max_len = 0;
      for (const TfSegment& seg : segments) {
        max_len = std::max(max_len, seg.length);
        const double window = double(std::min<int64_t>(seg.state->cached + seg.length, c.context));
        t.add_flops(4.0 * double(seg.length) * window * double(D));
      }
      const int64_t n = int64_t(segments.size());
      k.fused->rope_append(H, hd, Tt, n, max_len, rings->table, float(c.max_period), RopeLayout::Interleaved,
                           s.qkv.ptr(), rings->k[l].ptr(), rings->v[l].ptr(), rings->R);
      k.fused->attention_window(H, hd, Tt, n, max_len, rings->table, c.context, scale, q, rings->k[l].ptr(),
                                rings->v[l].ptr(), rings->R, s.o.ptr());
    } else {
      for (const TfSegment& seg : segments) {
        TransformerState& st = *seg.state;
        const int64_t T = seg.length, o = seg.offset, cached = st.cached, Tk = cached + T;
        const int64_t keep = std::min(cap, Tk);  // cached columns after this step
        set_shape(s.qs, {D, T});
        set_shape(s.ks, {D, T});
        set_shape(s.os, {D, T});
        set_shape(s.kbuf, {D, Tk});
        set_shape(s.vbuf, {D, Tk});
        k.copy2d(s.qs.ptr(), T, q + o, Tt, T, D);
        k.copy2d(s.ks.ptr(), T, kn + o, Tt, T, D);
        k.rope(H, hd, T, seg.position, float(c.max_period), RopeLayout::Interleaved, s.qs.ptr());
        k.rope(H, hd, T, seg.position, float(c.max_period), RopeLayout::Interleaved, s.ks.ptr());
        // keys/values: the cached steps, then the new ones
        k.copy2d(s.kbuf.ptr(), Tk, st.k[l].ptr(), cap, cached, D);
        k.copy2d(s.kbuf.ptr() + cached, Tk, s.ks.ptr(), T, T, D);
        k.copy2d(s.vbuf.ptr(), Tk, st.v[l].ptr(), cap, cached, D);
        k.copy2d(s.vbuf.ptr() + cached, Tk, vn + o, Tt, T, D);
        // positions relative to the window's first key (only differences matter), so that a
        // captured step's arguments hold for every step with a full window
        k.attention(H, T, Tk, hd, cached, 0, c.context, scale, s.qs.ptr(), s.kbuf.ptr(), s.vbuf.ptr(), s.os.ptr());
        k.copy2d(s.o.ptr() + o, Tt, s.os.ptr(), T, T, D);
        k.copy2d(st.k[l].ptr(), cap, s.kbuf.ptr() + Tk - keep, Tk, keep, D);
        k.copy2d(st.v[l].ptr(), cap, s.vbuf.ptr() + Tk - keep, Tk, keep, D);
        const double window = double(std::min<int64_t>(Tk, c.context));
        t.add_flops(4.0 * double(T) * window * double(D));
      }
    }
    // x += scale1 * out_proj(o); h = norm2(x); ff = gelu(linear1(h)); x += scale2 * linear2(ff)
    if (k.fused) {  // the same bits without the passes over the intermediate results
      k.fused->linear_scale_add(D, D, Tt, L.out_proj.data, s.o.ptr(), L.scale1.data, x);
      k.fused->layer_norm_linear(D, FF, Tt, L.linear1.data, x, L.norm2_w.data, L.norm2_b.data, float(c.norm_eps),
                                 true, s.stats.ptr(), s.ff.ptr());
      k.fused->linear_scale_add(FF, D, Tt, L.linear2.data, s.ff.ptr(), L.scale2.data, x);
    } else {
      k.linear(D, D, Tt, L.out_proj.data, s.o.ptr(), s.h.ptr());
      k.layer_scale_add(D, Tt, L.scale1.data, s.h.ptr(), x);
      k.layer_norm(D, Tt, x, L.norm2_w.data, L.norm2_b.data, float(c.norm_eps), s.h.ptr());
      k.linear(D, FF, Tt, L.linear1.data, s.h.ptr(), s.ff.ptr());
      k.gelu_erf(FF * Tt, s.ff.ptr(), s.ff.ptr());
      k.linear(FF, D, Tt, L.linear2.data, s.ff.ptr(), s.o.ptr());
      k.layer_scale_add(D, Tt, L.scale2.data, s.o.ptr(), x);
    }
    t.add_flops(2.0 * double(Tt) * (4.0 * D * D + 2.0 * D * FF));
  }
}

}  // namespace plan_detail

SeanetSplit seanet_split(const Model& m) {
  // A stage is sub-chunked when its activation exceeds kFloatsPerFrame per frame: 64 channels
  // at 24 kHz are 122880 floats (480 kB) a frame, so a 128-frame push (the default chunk) would
  // stream 63 MB per pass through memory. Sub-chunks of kSubFrames keep it near 8 MB. Measured
  // (docs/PERF.md): cutting only the 24 kHz stages beat also cutting the 6 kHz ones, whose
  // transposed conv and GEMMs lose more to the narrower columns than they gain in cache, and 16
  // frames beat 8.
  //
  // The encoder also cuts its 6 kHz block (128 channels, 61440 floats a frame): there it costs no
  // speed (its strided conv is the pair path, as wide at 16 frames as at 64) and the chunk's
  // scratch shrinks from 128 x 6 kHz columns to 256 x 1.2 kHz ones, 24 MB at 64 frames (issue
  // 29: the memory of a process that encodes).
  constexpr int64_t kFloatsPerFrame = 65536, kEncFloatsPerFrame = 32768, kSubFrames = 16;
  SeanetSplit sp;
  sp.sub_frames = kSubFrames;
  int64_t per_frame = m.cfg.frame_size();  // samples per frame at the current stage's rate
  for (const EncoderStage& st : m.enc) {    // input of block b: in_channels of its first conv
    const int64_t C = st.res.empty() ? st.down.shape.in_channels : st.res.front().conv1.shape.in_channels;
    if (C * per_frame < kEncFloatsPerFrame) break;
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

}  // namespace mimi
