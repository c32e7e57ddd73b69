// The encode plan (codec/plan.h): SEANet encoder per slot, then the transformer, downsampling
// and split RVQ with the active slots side by side.
#include <algorithm>

#include "codec/error.h"
#include "codec/plan.h"
#include "codec/layer_steps.h"
#include "codec/plan_flight.h"
#include "codec/plan_memory.h"

namespace mimi {

using namespace plan_detail;

EncodePlan::EncodePlan(const Model& m, const Kernels& kernels, int64_t max_frames, int n_q, int slots)
    : m_(m), k_(kernels), max_frames_(max_frames), frame_size_(m.cfg.frame_size()), n_q_(n_q), graphs_(kernels) {
  const Config& c = m.cfg;
  check_frames_nq(c, max_frames, n_q);
  check_slots(slots);
  check_placement(m, kernels);
  const int64_t B = slots, T = max_frames * frame_size_, T25 = max_frames * c.downsample_stride();
  split_ = seanet_split(m);
  together_ = uses_segments(k_) && max_frames <= split_.sub_frames && B * max_frames <= kTogetherFrames;
  const int64_t W = together_ ? B : 1;  // the slots whose columns the scratch holds at once
  ScratchSizer head, body;
  int64_t t = std::min(split_.sub_frames, max_frames) * frame_size_ * W, tw = T * W;
  head.conv(m.enc_in, t);
  for (size_t b = 0; b < m.enc.size(); ++b) {
    ScratchSizer& z = b < split_.enc_head ? head : body;
    const int64_t tb = b < split_.enc_head ? t : tw;
    z.resblocks(m.enc[b].res, tb);
    z.conv(m.enc[b].down, tb);
    t /= m.enc[b].down.shape.stride;
    tw /= m.enc[b].down.shape.stride;
  }
  body.conv(m.enc_out, T25 * W);
  body.conv(m.downsample, T25 * W);
  body.maxCT = std::max(body.maxCT, int64_t(c.dimension) * T25 * W);
  head.allocate(k_, head_, c.compress);
  body.allocate(k_, s_, c.compress);
  const bool rings = uses_rings(k_, c, T25);
  size_transformer(k_, s_, c, T25, B * T25, !rings);
  input_.allocate(k_, {1, B * T});
  seanet_out_.allocate(k_, {c.dimension, B * T25});
  tf_out_.allocate(k_, {c.dimension, B * T25});
  latent_.allocate(k_, {c.dimension, B * max_frames});
  first_in_.allocate(k_, {c.q_dimension, B * max_frames});
  rest_in_.allocate(k_, {c.q_dimension, B * max_frames});
  rvq_work_.allocate(k_, {rvq_work_floats(c.q_dimension, B * max_frames, c.bins)});
  codes_dev_ = alloc_codes(k_, size_t(n_q) * size_t(B * max_frames));
  positions_dev_ = alloc_codes(k_, positions_ints(slots));  // positions, then the segment table
  if (rings)
    init_rings(k_, rings_, c, m.enc_tf.size(), slots, T25, segment_table(positions_dev_.get(), slots));
  for (int set = 0; set < 2; ++set) {
    input_stage_[set].allocate(k_, input_.ptr(), size_t(B * T));
    positions_stage_[set].allocate(k_, positions_dev_.get(), positions_ints(slots));
    codes_stage_[set].allocate(k_, codes_dev_.get(), size_t(n_q) * size_t(B * max_frames), /*own_host=*/true);
  }
  codes_.reserve(size_t(n_q) * size_t(B * max_frames));
  offset_.assign(size_t(B), 0);
  frames_.assign(size_t(B), 0);
  result_offset_.assign(size_t(B), 0);
  result_frames_.assign(size_t(B), 0);
  // stream state, per slot
  streams_.resize(size_t(B));
  for (EncodeStream& s : streams_) {
    init_state(k_, s.conv_in, m.enc_in);
    s.res.resize(m.enc.size() * size_t(c.n_residual_layers));
    s.stride.resize(m.enc.size());
    for (size_t b = 0; b < m.enc.size(); ++b) {
      for (size_t i = 0; i < m.enc[b].res.size(); ++i)
        init_state(k_, s.res[b * m.enc[b].res.size() + i], m.enc[b].res[i].conv1);
      init_state(k_, s.stride[b], m.enc[b].down);
    }
    init_state(k_, s.conv_out, m.enc_out);
    init_state(k_, s.down, m.downsample);
    tf_.push_back(&s.tf);
    init_state(k_, s.tf, c, m.enc_tf.size(), !rings);
  }
  if (together_) {  // each conv's contexts of every slot in one buffer
    auto share = [&](const auto& layer, auto get) { share_slots(k_, slot_contexts_, streams_, layer, get); };
    share(m.enc_in, [](EncodeStream& st) -> ConvState& { return st.conv_in; });
    for (size_t b = 0; b < m.enc.size(); ++b) {
      const size_t nr = m.enc[b].res.size();
      for (size_t i = 0; i < nr; ++i)
        share(m.enc[b].res[i].conv1, [&](EncodeStream& st) -> ConvState& { return st.res[b * nr + i]; });
      share(m.enc[b].down, [&](EncodeStream& st) -> ConvState& { return st.stride[b]; });
    }
    share(m.enc_out, [](EncodeStream& st) -> ConvState& { return st.conv_out; });
    share(m.downsample, [](EncodeStream& st) -> ConvState& { return st.down; });
  }
  reset();
}

void EncodePlan::reset() {
  discard();
  for (EncodeStream& s : streams_) s.reset();
}

void EncodePlan::discard() noexcept { discard_flight(flight_, graphs_); }

void EncodePlan::reset(int slot) {
  if (slot < 0 || slot >= slots()) throw Error(ErrorKind::Usage, "no slot " + std::to_string(slot));
  streams_[size_t(slot)].reset();
}

void EncodePlan::bind_input(const float* pcm, int64_t T) {
  if (T < 1 || T > samples())
    throw Error(ErrorKind::Usage, "encode plan for " + std::to_string(samples()) + " samples got " + std::to_string(T));
  check_none_in_flight(flight_, "bind_input()");
  bound_frames_ = (T + frame_size_ - 1) / frame_size_;
  float* staged = input_stage_[0].host();  // run() submits with set 0; copied to the device with the step
  std::copy_n(pcm, T, staged);
  std::fill(staged + T, staged + bound_frames_ * frame_size_, 0.0f);
}

void EncodePlan::run() {
  if (bound_frames_ < 1) throw Error(ErrorKind::Usage, "encode plan: bind_input before run");
  reset();  // nothing in flight: the step takes set 0, where bind_input() staged the samples
  std::vector<int64_t> frames(size_t(slots()), 0);
  frames[0] = bound_frames_;
  set_frames(frames.data());
  encode(0);
  collect();
}

void EncodePlan::push(const float* pcm, int64_t n) {
  if (n < 1 || n > max_frames_)
    throw Error(ErrorKind::Usage, "encode plan takes 1.." + std::to_string(max_frames_) + " frames per push, got " +
                                      std::to_string(n));
  std::vector<const float*> pcms(size_t(slots()), nullptr);
  std::vector<int64_t> frames(size_t(slots()), 0);
  pcms[0] = pcm;
  frames[0] = n;
  step(pcms.data(), frames.data());
}

void EncodePlan::set_frames(const int64_t* frames) {
  total_ = lay_out_slots(frames, slots(), max_frames_, "encode", offset_, frames_);
}

void EncodePlan::step(const float* const* pcm, const int64_t* frames) {
  check_none_in_flight(flight_, "step()");
  submit(pcm, frames);
  collect();
}

void EncodePlan::submit(const float* const* pcm, const int64_t* frames) {
  const int set = free_set(flight_);
  set_frames(frames);
  float* staged = input_stage_[set].host();
  for (int s = 0; s < slots(); ++s)  // the active slots side by side, copied to the device with the step
    if (frames_[size_t(s)] > 0)
      std::copy_n(pcm[s], frames_[size_t(s)] * frame_size_, staged + offset_[size_t(s)] * frame_size_);
  encode(set);
}

void EncodePlan::collect() {
  const StepInFlight f = collect_flight(flight_, graphs_, result_offset_, result_frames_);
  codes_.assign(codes_stage_[f.set].host(), codes_stage_[f.set].host() + size_t(n_q_) * size_t(f.total));
}

// The SEANet encoder of one slot: its samples of input_ -> its columns of seanet_out_ (and a
// copy in tf_out_, which the transformer updates in place).
void EncodePlan::seanet(int slot) {
  EncodeStream& st = streams_[size_t(slot)];
  Scratch& s = s_;
  const int64_t n = frames_[size_t(slot)], ds = m_.cfg.downsample_stride();
  const float* input = input_.ptr() + offset_[size_t(slot)] * frame_size_;
  int64_t T = n * frame_size_, C = 0;
  // the SEANet head on sub-chunks, each result scattered into its columns of s.a [C, T]
  const int64_t sub = std::min(split_.sub_frames, n);
  for (int64_t f0 = 0; f0 < n; f0 += sub) {
    const int64_t nf = std::min(sub, n - f0);
    int64_t t = nf * frame_size_, ch = m_.enc_in.shape.out_channels;
    {
      StageTimer timer(profile_, "enc.seanet.conv_in");
      conv_step(k_, m_.enc_in, st.conv_in, input + f0 * frame_size_, t, head_.a.ptr(), timer);
    }
    for (size_t b = 0; b < split_.enc_head; ++b) block(st, b, head_, ch, t);
    const int64_t per_frame = t / nf;
    C = ch;
    T = n * per_frame;
    k_.copy2d(s.a.ptr() + f0 * per_frame, T, head_.a.ptr(), t, t, ch);
  }
  for (size_t b = split_.enc_head; b < m_.enc.size(); ++b) block(st, b, s, C, T);
  const int64_t D = m_.cfg.dimension, Tt = total_ * ds, o = offset_[size_t(slot)] * ds;
  StageTimer t(profile_, "enc.seanet.conv_out");
  k_.elu(C * T, s.a.ptr(), s.b.ptr());
  conv_step(k_, m_.enc_out, st.conv_out, s.b.ptr(), T, s.a.ptr(), t);  // s.a [D, T]
  k_.copy2d(seanet_out_.ptr() + o, Tt, s.a.ptr(), T, T, D);
  k_.copy2d(tf_out_.ptr() + o, Tt, s.a.ptr(), T, T, D);
}

bool EncodePlan::segments_together() const { return together_ && common_frames(frames_) > 0; }

// seanet() for every active slot at once: their samples side by side in input_ (equal lengths,
// one sub-chunk) through each layer in one conv over all their columns, each segment with its
// slot's context; the results are the slots' columns of seanet_out_ and tf_out_ as they lie.
void EncodePlan::seanet_segments() {
  const int64_t n = common_frames(frames_);
  const WindowSegment* table = segment_table(positions_dev_.get(), slots());
  auto states = [&](auto get) { return slot_states(streams_, get, &frames_); };
  const int64_t S = std::count_if(frames_.begin(), frames_.end(), [](int64_t f) { return f > 0; });  // segments
  int64_t T = n * frame_size_, C = m_.enc_in.shape.out_channels;
  {
    StageTimer timer(profile_, "enc.seanet.conv_in");
    T = conv_step_segments(k_, m_.enc_in, S, states([](EncodeStream& st) -> ConvState& { return st.conv_in; }), table,
                           input_.ptr(), T, head_.a.ptr(), timer);
  }
  auto block_all = [&](size_t b, Scratch& sc) {
    const EncoderStage& stage = m_.enc[b];
    const size_t nr = stage.res.size();
    StageTimer t(profile_, "enc.seanet.block" + std::to_string(b + 1));
    for (size_t i = 0; i < nr; ++i)
      resblock_step_segments(k_, stage.res[i], S,
                             states([&](EncodeStream& st) -> ConvState& { return st.res[b * nr + i]; }), table,
                             sc.a.ptr(), T, sc, t);
    T = conv_step_segments(k_, stage.down, S, states([&](EncodeStream& st) -> ConvState& { return st.stride[b]; }),
                           table, sc.a.ptr(), T, sc.b.ptr(), t, false, /*elu_input=*/true);
    std::swap(sc.a, sc.b);
    C = stage.down.shape.out_channels;
  };
  for (size_t b = 0; b < split_.enc_head; ++b) block_all(b, head_);
  k_.copy2d(s_.a.ptr(), S * T, head_.a.ptr(), S * T, S * T, C);
  for (size_t b = split_.enc_head; b < m_.enc.size(); ++b) block_all(b, s_);
  StageTimer t(profile_, "enc.seanet.conv_out");
  k_.elu(C * S * T, s_.a.ptr(), s_.b.ptr());
  T = conv_step_segments(k_, m_.enc_out, S, states([](EncodeStream& st) -> ConvState& { return st.conv_out; }), table,
                         s_.b.ptr(), T, s_.a.ptr(), t);  // s_.a [D, S*T]: the slots' columns side by side
  const int64_t D = m_.cfg.dimension;
  k_.copy2d(seanet_out_.ptr(), S * T, s_.a.ptr(), S * T, S * T, D);
  k_.copy2d(tf_out_.ptr(), S * T, s_.a.ptr(), S * T, S * T, D);
}

void EncodePlan::encode(int set) {
  const Config& c = m_.cfg;
  const int64_t F = total_, ds = c.downsample_stride(), Tt = F * ds, D = c.dimension, Q = c.q_dimension;
  set_shape(input_, {1, F * frame_size_});
  set_shape(seanet_out_, {D, Tt});
  set_shape(tf_out_, {D, Tt});
  set_shape(latent_, {D, F});
  set_shape(first_in_, {Q, F});
  set_shape(rest_in_, {Q, F});
  if (F > 0) {
    int32_t* positions = positions_stage_[set].host();
    const bool steady = stage_slots(tf_, frames_, ds, max_frames_, c, positions);
    const int64_t nseg = stage_segments(frames_, offset_, ds, positions, segment_table(positions, slots()));
    // The graph copies from and to this set's host buffers: one graph per (shape, set).
    std::vector<int64_t> key = frames_;
    key.push_back(set);
    graphs_.run(key, steady && profile_ == nullptr, [&] {  // the transfers in, the compute, the codes out: one graph
      input_stage_[set].to_device(size_t(F * frame_size_));
      positions_stage_[set].to_device(size_t(slots()) + sizeof(WindowSegment) / sizeof(int32_t) * size_t(nseg));
      encode_work();
      codes_stage_[set].to_host(size_t(n_q_) * size_t(F));
    });
    // the quantizer's inputs: |r|^2 must not overflow, or every distance is Inf and every code 0
    // (on a GPU they stay on the device: not checked there yet)
    if (k_.host_memory) {
      check_finite(first_in_.ptr(), int64_t(c.q_dimension) * F, "the encoder's latent (semantic projection)", 1e15f);
      check_finite(rest_in_.ptr(), int64_t(c.q_dimension) * F, "the encoder's latent (acoustic projection)", 1e15f);
    }
    advance_slots(tf_, frames_, ds, c);
    graphs_.mark(set);
  }
  flight_.push_back({set, offset_, frames_, F});  // after the work: a step that threw is not in flight
}

void EncodePlan::encode_work() {
  const Config& c = m_.cfg;
  Scratch& s = s_;
  const int64_t F = total_, ds = c.downsample_stride(), Tt = F * ds, D = c.dimension, Q = c.q_dimension;
  const bool together = segments_together();
  if (together) seanet_segments();
  std::vector<TfSegment> segments;
  for (int b = 0; b < slots(); ++b)
    if (frames_[size_t(b)] > 0) {
      if (!together) seanet(b);
      segments.push_back({offset_[size_t(b)] * ds, frames_[size_t(b)] * ds, &streams_[size_t(b)].tf,
                          positions_dev_.get() + b, b});
    }
  {  // encoder transformer (25 Hz) on every active slot's columns
    StageTimer t(profile_, "enc.transformer");
    transformer_step(k_, c, m_.enc_tf, segments, tf_out_.ptr(), Tt, s, t, rings_.R > 0 ? &rings_ : nullptr);
  }
  {  // downsample to the 12.5 Hz latent, slot by slot (replicate-padded stream context)
    StageTimer t(profile_, "enc.downsample");
    if (together) {  // every slot's columns of tf_out_ -> its columns of latent_, as they lie
      const auto down = slot_states(streams_, [](EncodeStream& st) -> ConvState& { return st.down; }, &frames_);
      conv_step_segments(k_, m_.downsample, int64_t(segments.size()), down, segment_table(positions_dev_.get(), slots()),
                         tf_out_.ptr(), segments.front().length, latent_.ptr(), t);
    }
    for (int b = 0; b < slots() && !together; ++b) {
      const int64_t n = frames_[size_t(b)], T = n * ds;
      if (n == 0) continue;
      k_.copy2d(s.a.ptr(), T, tf_out_.ptr() + offset_[size_t(b)] * ds, Tt, T, D);
      conv_step(k_, m_.downsample, streams_[size_t(b)].down, s.a.ptr(), T, s.b.ptr(), t);
      k_.copy2d(latent_.ptr() + offset_[size_t(b)], F, s.b.ptr(), n, n, D);
    }
  }
  // split RVQ on all frames: both groups quantize projections of the same latent
  StageTimer rvq_timer(profile_, "enc.rvq");
  k_.linear(D, Q, F, m_.semantic.input_proj.data, latent_.ptr(), first_in_.ptr());
  k_.linear(D, Q, F, m_.acoustic.input_proj.data, latent_.ptr(), rest_in_.ptr());
  const int n_sem = std::min(n_q_, c.n_q_semantic), n_ac = n_q_ - n_sem;
  auto sem_e = book_ptrs(m_.semantic, n_sem, false), sem_n = book_ptrs(m_.semantic, n_sem, true);
  k_.rvq_encode(Q, F, c.bins, n_sem, first_in_.ptr(), sem_e.data(), sem_n.data(), codes_dev_.get(), rvq_work_.ptr());
  if (n_ac > 0) {
    auto ac_e = book_ptrs(m_.acoustic, n_ac, false), ac_n = book_ptrs(m_.acoustic, n_ac, true);
    k_.rvq_encode(Q, F, c.bins, n_ac, rest_in_.ptr(), ac_e.data(), ac_n.data(), codes_dev_.get() + n_sem * F,
                  rvq_work_.ptr());
  }
  rvq_timer.add_flops(2.0 * double(F) * (2.0 * D * Q + double(n_q_) * c.bins * Q));
}

void EncodePlan::block(EncodeStream& st, size_t b, Scratch& sc, int64_t& C, int64_t& T) {
  const EncoderStage& stage = m_.enc[b];
  StageTimer t(profile_, "enc.seanet.block" + std::to_string(b + 1));
  for (size_t i = 0; i < stage.res.size(); ++i)
    resblock_step(k_, stage.res[i], st.res[b * stage.res.size() + i], sc.a.ptr(), C, T, sc, t);
  // ELU -> strided conv in one pass (the conv splits its input into phases, ELU'd on the way)
  T = conv_step(k_, stage.down, st.stride[b], sc.a.ptr(), T, sc.b.ptr(), t, false, /*elu_input=*/true);
  std::swap(sc.a, sc.b);  // the output is the next input; both are sized for either
  C = stage.down.shape.out_channels;
}

const Buffer& EncodePlan::stage(const std::string& name) const {
  check_none_in_flight(flight_, "stage()");  // a step in flight may still be writing them
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

}  // namespace mimi
