// The decode plan (codec/plan.h): RVQ decoding and the transformer with the active slots side by
// side, the upsampling and the SEANet decoder per slot.
#include <algorithm>
#include <cstring>

#include "codec/error.h"
#include "codec/plan.h"
#include "codec/layer_steps.h"
#include "codec/plan_flight.h"
#include "codec/plan_memory.h"

namespace mimi {

using namespace plan_detail;

DecodePlan::DecodePlan(const Model& m, const Kernels& kernels, int64_t max_frames, int n_q, int slots)
    : m_(m), k_(kernels), max_frames_(max_frames), frame_size_(m.cfg.frame_size()), n_q_(n_q), graphs_(kernels) {
  const Config& c = m.cfg;
  check_frames_nq(c, max_frames, n_q);
  check_slots(slots);
  check_placement(m, kernels);
  const int64_t B = slots, T25 = max_frames * c.downsample_stride(), T = max_frames * frame_size_;
  split_ = seanet_split(m);
  together_ = uses_segments(k_) && max_frames <= split_.sub_frames && B * max_frames <= kTogetherFrames;
  const int64_t W = together_ ? B : 1;  // the slots whose columns the scratch holds at once
  ScratchSizer body, tail;
  body.convtr(m.upsample, max_frames * W);
  body.conv(m.dec_in, T25 * W);
  body.maxCT = std::max(body.maxCT, int64_t(c.dimension) * T25 * W);
  int64_t tw = T25 * W, t = std::min(split_.sub_frames, max_frames) * c.downsample_stride() * W;
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
  const bool rings = uses_rings(k_, c, T25);
  size_transformer(k_, s_, c, T25, B * T25, !rings);
  codes_.assign(size_t(n_q) * size_t(B * max_frames), 0);
  codes_dev_ = alloc_codes(k_, size_t(n_q) * size_t(B * max_frames));
  positions_dev_ = alloc_codes(k_, positions_ints(slots));  // positions, then the segment table
  if (rings)
    init_rings(k_, rings_, c, m.dec_tf.size(), slots, T25, segment_table(positions_dev_.get(), slots));
  sum_.allocate(k_, {c.q_dimension, B * max_frames});
  quantized_.allocate(k_, {c.dimension, B * max_frames});
  tmp_.allocate(k_, {c.dimension, B * max_frames});
  upsampled_.allocate(k_, {c.dimension, B * T25});
  tf_out_.allocate(k_, {c.dimension, B * T25});
  output_.allocate(k_, {1, B * T});
  for (int set = 0; set < 2; ++set) {
    codes_stage_[set].allocate(k_, codes_dev_.get(), size_t(n_q) * size_t(B * max_frames));
    positions_stage_[set].allocate(k_, positions_dev_.get(), positions_ints(slots));
    output_stage_[set].allocate(k_, output_.ptr(), size_t(B * T), /*own_host=*/true);
  }
  output_view_.view(output_stage_[0].host(), B * T, {1, 0});
  offset_.assign(size_t(B), 0);
  frames_.assign(size_t(B), 0);
  result_offset_.assign(size_t(B), 0);
  result_frames_.assign(size_t(B), 0);
  // stream state, per slot
  streams_.resize(size_t(B));
  for (DecodeStream& s : streams_) {
    init_state(k_, s.up, m.upsample);
    init_state(k_, s.conv_in, m.dec_in);
    s.convtr.resize(m.dec.size());
    s.res.resize(m.dec.size() * size_t(c.n_residual_layers));
    for (size_t b = 0; b < m.dec.size(); ++b) {
      init_state(k_, s.convtr[b], m.dec[b].up);
      for (size_t i = 0; i < m.dec[b].res.size(); ++i)
        init_state(k_, s.res[b * m.dec[b].res.size() + i], m.dec[b].res[i].conv1);
    }
    init_state(k_, s.conv_out, m.dec_out);
    tf_.push_back(&s.tf);
    init_state(k_, s.tf, c, m.dec_tf.size(), !rings);
  }
  if (together_) {  // each conv's contexts and each transposed conv's carries of every slot in one buffer
    auto share = [&](const auto& layer, auto get) { share_slots(k_, slot_contexts_, streams_, layer, get); };
    share(m.upsample, [](DecodeStream& st) -> ConvTrState& { return st.up; });
    share(m.dec_in, [](DecodeStream& st) -> ConvState& { return st.conv_in; });
    for (size_t b = 0; b < m.dec.size(); ++b) {
      const size_t nr = m.dec[b].res.size();
      share(m.dec[b].up, [&](DecodeStream& st) -> ConvTrState& { return st.convtr[b]; });
      for (size_t i = 0; i < nr; ++i)
        share(m.dec[b].res[i].conv1, [&](DecodeStream& st) -> ConvState& { return st.res[b * nr + i]; });
    }
    share(m.dec_out, [](DecodeStream& st) -> ConvState& { return st.conv_out; });
  }
  reset();
}

void DecodePlan::reset() {
  discard();
  for (DecodeStream& s : streams_) s.reset();
}

void DecodePlan::discard() noexcept { discard_flight(flight_, graphs_); }

void DecodePlan::reset(int slot) {
  if (slot < 0 || slot >= slots()) throw Error(ErrorKind::Usage, "no slot " + std::to_string(slot));
  streams_[size_t(slot)].reset();
}

void DecodePlan::bind_codes(const int32_t* codes) {
  check_none_in_flight(flight_, "bind_codes()");
  std::memcpy(codes_.data(), codes, size_t(n_q_) * size_t(max_frames_) * sizeof(int32_t));
}

void DecodePlan::run() {
  reset();
  const std::vector<int32_t> all(codes_.begin(), codes_.begin() + n_q_ * max_frames_);
  push(all.data(), max_frames_);
}

void DecodePlan::push(const int32_t* codes, int64_t n) {
  if (n < 1 || n > max_frames_)
    throw Error(ErrorKind::Usage, "decode plan takes 1.." + std::to_string(max_frames_) + " frames per push, got " +
                                      std::to_string(n));
  std::vector<const int32_t*> all(size_t(slots()), nullptr);
  std::vector<int64_t> frames(size_t(slots()), 0);
  all[0] = codes;
  frames[0] = n;
  step(all.data(), frames.data());
}

void DecodePlan::step(const int32_t* const* codes, const int64_t* frames) {
  check_none_in_flight(flight_, "step()");
  submit(codes, frames);
  collect();
}

void DecodePlan::collect() {
  const StepInFlight f = collect_flight(flight_, graphs_, result_offset_, result_frames_);
  check_finite(output_stage_[f.set].host(), f.total * frame_size_, "the decoded audio");
  output_view_.view(output_stage_[f.set].host(), output_view_.capacity(), {1, f.total * frame_size_});
}

void DecodePlan::submit(const int32_t* const* codes, const int64_t* frames) {
  const Config& c = m_.cfg;
  const int bins = c.bins;
  const int set = free_set(flight_);
  total_ = lay_out_slots(frames, slots(), max_frames_, "decode", offset_, frames_);
  for (int s = 0; s < slots(); ++s) {
    const int64_t n = frames[s];
    for (int64_t i = 0; i < int64_t(n_q_) * n; ++i)
      if (codes[s][i] < 0 || codes[s][i] >= bins)
        throw Error(ErrorKind::Input, "code " + std::to_string(codes[s][i]) + " at codebook " + std::to_string(i / n) +
                                          ", frame " + std::to_string(i % n) + " is outside [0, " +
                                          std::to_string(bins) + ")");
  }
  const int64_t F = total_, ds = c.downsample_stride(), Tt = F * ds, D = c.dimension;
  set_shape(quantized_, {D, F});
  set_shape(upsampled_, {D, Tt});
  set_shape(tf_out_, {D, Tt});
  set_shape(output_, {1, F * frame_size_});
  if (F > 0) {
    // the active slots' codes side by side, [n_q, F], staged: copied to the device with the step
    int32_t* staged = codes_stage_[set].host();
    for (int s = 0; s < slots(); ++s)
      for (int k = 0; k < n_q_; ++k)
        std::copy_n(codes[s] + k * frames_[size_t(s)], frames_[size_t(s)], staged + k * F + offset_[size_t(s)]);
    int32_t* positions = positions_stage_[set].host();
    const bool steady = stage_slots(tf_, frames_, ds, max_frames_, c, positions);
    const int64_t nseg = stage_segments(frames_, offset_, ds, positions, segment_table(positions, slots()));
    // The graph copies from and to this set's host buffers: one graph per (shape, set).
    std::vector<int64_t> key = frames_;
    key.push_back(set);
    graphs_.run(key, steady && profile_ == nullptr, [&] {  // the transfers in, the compute, the samples out: one graph
      codes_stage_[set].to_device(size_t(n_q_) * size_t(F));
      positions_stage_[set].to_device(size_t(slots()) + sizeof(WindowSegment) / sizeof(int32_t) * size_t(nseg));
      decode_work();
      output_stage_[set].to_host(size_t(F * frame_size_));
    });
    advance_slots(tf_, frames_, ds, c);
    graphs_.mark(set);
  }
  flight_.push_back({set, offset_, frames_, F});  // after the work: a step that threw is not in flight
}

// A step's device work: the codes (uploaded) -> the samples of output_.
void DecodePlan::decode_work() {
  const Config& c = m_.cfg;
  const int bins = c.bins;
  const int64_t F = total_, ds = c.downsample_stride(), Tt = F * ds, D = c.dimension, Q = c.q_dimension;
  const int32_t* dcodes = codes_dev_.get();
  // quantized = out_proj_sem(e0) + out_proj_ac(e1 + e2 + ...), on all frames
  const int n_sem = std::min(n_q_, c.n_q_semantic), n_ac = n_q_ - n_sem;
  {
    StageTimer rvq_timer(profile_, "dec.rvq");
    rvq_timer.add_flops(2.0 * double(F) * double(D) * Q * (n_ac > 0 ? 2 : 1));
    auto sem_e = book_ptrs(m_.semantic, n_sem, false);
    k_.rvq_decode(Q, F, bins, n_sem, dcodes, sem_e.data(), sum_.ptr());
    k_.linear(Q, D, F, m_.semantic.output_proj.data, sum_.ptr(), quantized_.ptr());
    if (n_ac > 0) {
      auto ac_e = book_ptrs(m_.acoustic, n_ac, false);
      k_.rvq_decode(Q, F, bins, n_ac, dcodes + n_sem * F, ac_e.data(), sum_.ptr());
      k_.linear(Q, D, F, m_.acoustic.output_proj.data, sum_.ptr(), tmp_.ptr());
      k_.add_inplace(D * F, tmp_.ptr(), quantized_.ptr());
    }
  }
  const bool together = segments_together();
  std::vector<TfSegment> segments;
  {  // upsample to 25 Hz, slot by slot (each carries its transposed conv's overlap) or all at once
    StageTimer t(profile_, "dec.upsample");
    if (together) {  // the slots' columns of quantized_ -> theirs of upsampled_, as they lie
      const auto up = slot_states(streams_, [](DecodeStream& st) -> ConvTrState& { return st.up; }, &frames_);
      convtr_step_segments(k_, m_.upsample, int64_t(up.size()), up, segment_table(positions_dev_.get(), slots()),
                           quantized_.ptr(), F / int64_t(up.size()), upsampled_.ptr(), t);
      k_.copy2d(tf_out_.ptr(), Tt, upsampled_.ptr(), Tt, Tt, D);
    }
    for (int b = 0; b < slots(); ++b) {
      const int64_t n = frames_[size_t(b)], o = offset_[size_t(b)], T = n * ds;
      if (n == 0) continue;
      if (!together) {
        k_.copy2d(tmp_.ptr(), n, quantized_.ptr() + o, F, n, D);
        convtr_step(k_, m_.upsample, streams_[size_t(b)].up, tmp_.ptr(), n, s_.a.ptr(), s_, t);  // s_.a [D, T]
        k_.copy2d(upsampled_.ptr() + o * ds, Tt, s_.a.ptr(), T, T, D);
        k_.copy2d(tf_out_.ptr() + o * ds, Tt, s_.a.ptr(), T, T, D);
      }
      segments.push_back({o * ds, T, &streams_[size_t(b)].tf, positions_dev_.get() + b, b});
    }
  }
  {  // decoder transformer on every active slot's columns
    StageTimer t(profile_, "dec.transformer");
    transformer_step(k_, c, m_.dec_tf, segments, tf_out_.ptr(), Tt, s_, t, rings_.R > 0 ? &rings_ : nullptr);
  }
  if (together) seanet_segments();
  else
    for (int b = 0; b < slots(); ++b)
      if (frames_[size_t(b)] > 0) seanet(b);
}

bool DecodePlan::segments_together() const { return together_ && common_frames(frames_) > 0; }

// seanet() for every active slot at once: their columns of tf_out_ side by side (equal lengths,
// one sub-chunk) through each layer in one conv over all of them, each segment with its slot's
// context or carried overlap; the samples land in output_ as the slots lie.
void DecodePlan::seanet_segments() {
  const int64_t n = common_frames(frames_);
  const WindowSegment* table = segment_table(positions_dev_.get(), slots());
  auto states = [&](auto get) { return slot_states(streams_, get, &frames_); };
  const int64_t S = std::count_if(frames_.begin(), frames_.end(), [](int64_t f) { return f > 0; });  // segments
  int64_t T = n * m_.cfg.downsample_stride(), C = m_.dec_in.shape.out_channels;
  {
    StageTimer t(profile_, "dec.seanet.conv_in");
    conv_step_segments(k_, m_.dec_in, S, states([](DecodeStream& st) -> ConvState& { return st.conv_in; }), table,
                       tf_out_.ptr(), T, s_.a.ptr(), t);
  }
  auto block_all = [&](size_t b, Scratch& sc) {
    const DecoderStage& stage = m_.dec[b];
    const size_t nr = stage.res.size();
    StageTimer t(profile_, "dec.seanet.block" + std::to_string(b + 1));
    k_.elu(C * S * T, sc.a.ptr(), sc.b.ptr());
    T = convtr_step_segments(k_, stage.up, S, states([&](DecodeStream& st) -> ConvTrState& { return st.convtr[b]; }),
                             table, sc.b.ptr(), T, sc.a.ptr(), t);
    C = stage.up.shape.out_channels;
    for (size_t i = 0; i < nr; ++i)
      resblock_step_segments(k_, stage.res[i], S,
                             states([&](DecodeStream& st) -> ConvState& { return st.res[b * nr + i]; }), table,
                             sc.a.ptr(), T, sc, t);
  };
  for (size_t b = 0; b < split_.dec_tail; ++b) block_all(b, s_);
  k_.copy2d(tail_.a.ptr(), S * T, s_.a.ptr(), S * T, S * T, C);
  for (size_t b = split_.dec_tail; b < m_.dec.size(); ++b) block_all(b, tail_);
  StageTimer t(profile_, "dec.seanet.conv_out");  // ELU -> conv (64 -> 1 channel) in one pass
  conv_step_segments(k_, m_.dec_out, S, states([](DecodeStream& st) -> ConvState& { return st.conv_out; }), table,
                     tail_.a.ptr(), T, output_.ptr(), t, false, /*elu_input=*/true);
}

// The SEANet decoder of one slot: conv -> [ELU, convtr, resblocks] x 4 -> ELU -> conv, from its
// columns of tf_out_ to its samples of output_.
void DecodePlan::seanet(int slot) {
  DecodeStream& st = streams_[size_t(slot)];
  Scratch& s = s_;
  const int64_t n = frames_[size_t(slot)], ds = m_.cfg.downsample_stride(), D = m_.cfg.dimension;
  int64_t T = n * ds, C = m_.dec_in.shape.out_channels;
  {
    StageTimer t(profile_, "dec.seanet.conv_in");
    k_.copy2d(s.b.ptr(), T, tf_out_.ptr() + offset_[size_t(slot)] * ds, total_ * ds, T, D);
    conv_step(k_, m_.dec_in, st.conv_in, s.b.ptr(), T, s.a.ptr(), t);
  }
  for (size_t b = 0; b < split_.dec_tail; ++b) block(st, b, s, C, T);
  // the SEANet tail on sub-chunks: gather each one's columns of s.a [C, T]
  float* out = output_.ptr() + offset_[size_t(slot)] * frame_size_;
  const int64_t sub = std::min(split_.sub_frames, n), per_frame = T / n;
  for (int64_t f0 = 0; f0 < n; f0 += sub) {
    const int64_t nf = std::min(sub, n - f0);
    int64_t t = nf * per_frame, ch = C;
    k_.copy2d(tail_.a.ptr(), t, s.a.ptr() + f0 * per_frame, T, t, ch);
    for (size_t b = split_.dec_tail; b < m_.dec.size(); ++b) block(st, b, tail_, ch, t);
    StageTimer timer(profile_, "dec.seanet.conv_out");  // ELU -> conv (64 -> 1 channel) in one pass
    conv_step(k_, m_.dec_out, st.conv_out, tail_.a.ptr(), t, out + f0 * frame_size_, timer, false,
              /*elu_input=*/true);
  }
}

void DecodePlan::block(DecodeStream& st, size_t b, Scratch& sc, int64_t& C, int64_t& T) {
  const DecoderStage& stage = m_.dec[b];
  StageTimer t(profile_, "dec.seanet.block" + std::to_string(b + 1));
  k_.elu(C * T, sc.a.ptr(), sc.b.ptr());
  T = convtr_step(k_, stage.up, st.convtr[b], sc.b.ptr(), T, sc.a.ptr(), sc, t);
  C = stage.up.shape.out_channels;
  for (size_t i = 0; i < stage.res.size(); ++i)
    resblock_step(k_, stage.res[i], st.res[b * stage.res.size() + i], sc.a.ptr(), C, T, sc, t);
}

const Buffer& DecodePlan::stage(const std::string& name) const {
  check_none_in_flight(flight_, "stage()");  // a step in flight may still be writing them
  const Buffer* b = name == "quantized_latent"          ? &quantized_
                    : name == "upsampled_latent"        ? &upsampled_
                    : name == "decoder_transformer_out" ? &tf_out_
                    : name == "output"                  ? &output_
                                                        : nullptr;
  if (!b) throw Error(ErrorKind::Usage, "decode plan has no stage '" + name + "'");
  return host_copy(k_, *b, host_copies_, name);
}

}  // namespace mimi
