// Plan memory: buffers, stream state, scratch sizing, the plans' shape checks (codec/plan_memory.h).
#include "codec/plan_memory.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "codec/error.h"

namespace mimi {

void Buffer::allocate(const Kernels& k, Shape s) {
  capacity_ = std::max<int64_t>(numel(s), 1);
  mem_ = std::shared_ptr<float>(k.alloc(size_t(capacity_)), k.release);
  shape = std::move(s);
}

void Buffer::view(float* p, int64_t capacity, Shape s) {
  mem_ = std::shared_ptr<float>(p, [](float*) {});
  capacity_ = capacity;
  shape = std::move(s);
}

void EncodeStream::reset() {
  for (ConvState* st : {&conv_in, &conv_out, &down}) st->started = false;
  for (ConvState& st : res) st.started = false;
  for (ConvState& st : stride) st.started = false;
  tf.cached = tf.pos = 0;
}

void DecodeStream::reset() {
  for (ConvState* st : {&conv_in, &conv_out}) st->started = false;
  for (ConvState& st : res) st.started = false;
  up.started = false;
  for (ConvTrState& st : convtr) st.started = false;
  tf.cached = tf.pos = 0;
}

namespace plan_detail {

void set_shape(Buffer& b, Shape s) {
  if (numel(s) > b.capacity()) throw Error(ErrorKind::Internal, "plan buffer too small for " + shape_str(s));
  b.shape = std::move(s);
}

void init_state(const Kernels& k, ConvState& st, const Conv& c) {
  const int64_t Cin = c.shape.in_channels, P = c.shape.context();
  if (P <= 0) return;
  st.hist.allocate(k, {Cin, P});
  st.next.allocate(k, {Cin, P});
}

std::vector<const float*> book_ptrs(const QuantizerGroup& g, int n, bool sq) {
  std::vector<const float*> p;
  for (int i = 0; i < n; ++i) p.push_back(sq ? g.books[size_t(i)].sq_norm.data : g.books[size_t(i)].embedding.data);
  return p;
}

void check_slots(int slots) {
  if (slots < 1 || slots > 4096) throw Error(ErrorKind::Usage, "a plan needs 1..4096 slots, got " + std::to_string(slots));
}

void check_placement(const Model& m, const Kernels& k) {
  if (m.in_device_memory == k.host_memory)
    throw Error(ErrorKind::Internal, k.host_memory ? "a plan on host kernels over a model in device memory"
                                                   : "a plan on device kernels over a model in host memory "
                                                     "(place_model, codec/engine.h, uploads it)");
}

void check_finite(const float* p, int64_t n, const char* stage, float limit) {
  for (int64_t i = 0; i < n; ++i)
    if (!(std::fabs(p[i]) <= limit))  // NaN too
      throw Error(ErrorKind::Weights, std::string(stage) + " holds " + (std::isfinite(p[i]) ? "values past 1e15" : "non-finite values") +
                                          " from inputs in range: the weights overflow the model (a corrupt tensor, "
                                          "e.g. a flipped exponent bit?); nothing was written");
}

void check_frames_nq(const Config& c, int64_t frames, int n_q) {
  if (frames < 1) throw Error(ErrorKind::Usage, "a plan needs at least one frame, got " + std::to_string(frames));
  if (n_q < 1 || n_q > c.n_q)
    throw Error(ErrorKind::Usage, "n_q must be in 1.." + std::to_string(c.n_q) + ", got " + std::to_string(n_q));
}

void ScratchSizer::conv(const Conv& cv, int64_t t_in) {
  maxCT = std::max({maxCT, cv.shape.in_channels * t_in, cv.shape.out_channels * (t_in / cv.shape.stride)});
}
void ScratchSizer::convtr(const ConvTr& cv, int64_t t_in) {
  const int64_t S = cv.shape.stride, m = std::min(t_in, (cv.shape.kernel + S - 1) / S);
  maxCT = std::max({maxCT, cv.shape.in_channels * t_in, cv.shape.out_channels * t_in * S});
  work = std::max(work, cv.shape.in_channels * m);
  full = std::max(full, cv.shape.out_channels * ((m - 1) * S + cv.shape.kernel));
}
void ScratchSizer::resblocks(const std::vector<ResBlock>& res, int64_t t) {
  for (const ResBlock& r : res) conv(r.conv1, t), conv(r.conv2, t);
}
void ScratchSizer::allocate(const Kernels& k, Scratch& s, int compress) const {
  s.a.allocate(k, {maxCT});
  s.b.allocate(k, {maxCT});
  s.c.allocate(k, {(maxCT + compress - 1) / compress});
  s.work.allocate(k, {work});
  s.full.allocate(k, {full});
}

void size_transformer(const Kernels& k, Scratch& s, const Config& c, int64_t slot_T, int64_t total_T,
                      bool per_slot_windows) {
  const int64_t D = c.d_model, Tk = c.context - 1 + slot_T;
  s.h.allocate(k, {D, total_T});
  s.qkv.allocate(k, {3 * D, total_T});
  s.o.allocate(k, {D, total_T});
  s.ff.allocate(k, {c.dim_feedforward, total_T});
  s.stats.allocate(k, {2, total_T});
  if (!per_slot_windows) return;
  s.kbuf.allocate(k, {D, Tk});
  s.vbuf.allocate(k, {D, Tk});
  s.qs.allocate(k, {D, slot_T});
  s.ks.allocate(k, {D, slot_T});
  s.os.allocate(k, {D, slot_T});
}

void init_state(const Kernels& k, TransformerState& st, const Config& c, size_t layers, bool per_slot_windows) {
  if (!per_slot_windows) return;
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

}  // namespace plan_detail
}  // namespace mimi
