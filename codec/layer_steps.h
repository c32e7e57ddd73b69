// The building blocks of the encode and decode plans (codec/plan.h): one streaming step of each
// layer kind, written once on the Kernels table so every backend runs the same plan. Internal to
// codec/ (layer_steps.cpp, encode_plan.cpp, decode_plan.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "codec/model.h"
#include "codec/plan.h"
#include "codec/profile.h"

namespace mimi::plan_detail {

inline const float* opt(const Tensor& t) { return t.empty() ? nullptr : t.data; }

// y [Cout, T/stride] = conv(x [Cin, T]) continuing the stream in `st` (its causal left context);
// `accumulate` adds into y (residual), `elu_input` applies ELU to every input the conv reads.
// Returns T_out.
int64_t conv_step(const Kernels& k, const Conv& c, ConvState& st, const float* x, int64_t T, float* y,
                  StageTimer& t, bool accumulate = false, bool elu_input = false);
// conv_step for nseg streams at once, on a backend with conv1d_segments (uses_segments): x
// [Cin, nseg * T] holds segment i's T inputs in columns [i*T, (i+1)*T), y [Cout, nseg * T_out]
// likewise; segment i continues the stream whose state is states[i] (the step's segment table
// `table` in device memory names its slot; every slot's context of this conv in one buffer:
// share_state). Unused when the conv has no context (states may then be empty). Every column
// is bitwise what conv_step gives that stream alone. Returns T_out.
int64_t conv_step_segments(const Kernels& k, const Conv& c, int64_t nseg, const std::vector<ConvState*>& states,
                           const WindowSegment* table, const float* x, int64_t T, float* y, StageTimer& t,
                           bool accumulate = false, bool elu_input = false);
// convtr_step for nseg streams at once (conv_transpose1d_segments): x [Cin, nseg * T], y [Cout,
// nseg * T * stride], segment i continuing states[i] (their carries one buffer: share_state).
int64_t convtr_step_segments(const Kernels& k, const ConvTr& c, int64_t nseg, const std::vector<ConvTrState*>& states,
                             const WindowSegment* table, const float* x, int64_t T, float* y, StageTimer& t);
// resblock_step for nseg streams at once, composed as resblock_step composes it (states: conv1's).
void resblock_step_segments(const Kernels& k, const ResBlock& r, int64_t nseg, const std::vector<ConvState*>& states,
                            const WindowSegment* table, float* x, int64_t T, Scratch& s, StageTimer& t);
bool uses_segments(const Kernels& k);
// The most frames (all slots' pushes together) a plan runs its SEANet on at once: the scratch
// then holds every slot's columns (at 1024 frames ~0.5 GB per 24 kHz buffer), so wider plans go
// slot by slot.
constexpr int64_t kTogetherFrames = 1024;
void share_state(const Kernels& k, Buffer& base, const std::vector<ConvTrState*>& slots, const ConvTr& c);
// Lays one conv's contexts of every slot out in one [slots, Cin, P] buffer `base` (kept by the
// plan): each slot's hist becomes a view of its part (nothing when the conv has no context).
void share_state(const Kernels& k, Buffer& base, const std::vector<ConvState*>& slots, const Conv& c);
// share_state for one layer of every stream of a plan (get(stream): that layer's state), its
// buffer appended to `bases`, which the plan keeps.
// get(stream): one layer's state of a stream; of every stream, or (frames given) of the slots
// active in the step, in slot order (the segments' order).
template <class Stream, class Get>
auto slot_states(std::vector<Stream>& streams, Get get, const std::vector<int64_t>* frames = nullptr) {
  std::vector<std::remove_reference_t<decltype(get(streams.front()))>*> v;
  for (size_t s = 0; s < streams.size(); ++s)
    if (!frames || (*frames)[s] > 0) v.push_back(&get(streams[s]));
  return v;
}
template <class Stream, class Layer, class Get>
void share_slots(const Kernels& k, std::vector<Buffer>& bases, std::vector<Stream>& streams, const Layer& layer, Get get) {
  share_state(k, bases.emplace_back(), slot_states(streams, get), layer);
}
// y [Cout, T*stride] = convtr(x [Cin, T]) plus the overlap carried in `st`. Returns T*stride.
int64_t convtr_step(const Kernels& k, const ConvTr& c, ConvTrState& st, const float* x, int64_t T, float* y,
                    Scratch& s, StageTimer& t);
// x [C, T] += conv2(ELU(conv1(ELU(x)))); s.c holds the hidden activation.
void resblock_step(const Kernels& k, const ResBlock& r, ConvState& st, float* x, int64_t C, int64_t T, Scratch& s,
                   StageTimer& t);

// One stream's columns of a batched [D, T_total] signal, its transformer state and its position
// in device memory (upload_positions).
struct TfSegment {
  int64_t offset = 0, length = 0;
  TransformerState* state = nullptr;
  const int32_t* position = nullptr;
  int slot = 0;
};

// TfRings (codec/plan.h): on a backend with the windowed fused ops.
// Rings where the backend has the windowed ops and a slot's push is bounded (slot_T <= 2 *
// context: the ring at most 3 windows wide; a plan for a whole file in one push keeps the
// per-slot windows, whose memory does not grow with the push).
bool uses_rings(const Kernels& k, const Config& c, int64_t slot_T);
void init_rings(const Kernels& k, TfRings& r, const Config& c, size_t layers, int slots, int64_t slot_T,
                const WindowSegment* table);
// x [D, T_total] through the transformer layers in place: the norms, projections and MLP on all
// columns at once, RoPE and attention per segment against its own key/value window. Device work
// only: the states' counters move on in advance_slots(), after the step (a replayed step skips this
// host code, codec/step_graph.h).
// With `rings` (uses_rings), the segments' windows are those rings; else each segment's state's k/v.
void transformer_step(const Kernels& k, const Config& c, const std::vector<TransformerLayer>& layers,
                      const std::vector<TfSegment>& segments, float* x, int64_t T_total, Scratch& s, StageTimer& t,
                      TfRings* rings);

}  // namespace mimi::plan_detail
