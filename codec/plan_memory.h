// Plan memory (codec/plan.h's build -> allocate steps): buffers, stream state, scratch sized from
// the stages that will run on it, host copies, and the shape checks every plan makes. Internal to
// codec/ (the plans: encode_plan.cpp, decode_plan.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codec/model.h"
#include "codec/plan.h"

namespace mimi::plan_detail {

// Sets the logical shape of a buffer allocated for the largest chunk (throws if it is larger).
void set_shape(Buffer& b, Shape s);

void check_frames_nq(const Config& c, int64_t frames, int n_q);
// A stage's result in host memory must be finite and within `limit`: the inputs are (audio within
// +-1000, codes in range), so NaN, Inf or a value past what the next op can square means weights
// that overflow the model, finite but corrupt (a flipped exponent bit: 1e30). Throws
// Error(Weights) naming the stage: the RVQ's distances would be Inf and every code 0, exit 0.
void check_finite(const float* p, int64_t n, const char* stage, float limit = 3.4e38f);
void check_slots(int slots);
// The model's tensors must live where the kernels compute (Model::in_device_memory).
void check_placement(const Model& m, const Kernels& k);

// Stream state allocation: a conv's context [Cin, P] (nothing when P = 0), a transposed conv's
// overlap, a transformer's key/value windows.
void init_state(const Kernels& k, ConvState& st, const Conv& c);
void init_state(const Kernels& k, ConvTrState& st, const ConvTr& c);
// (per_slot_windows false: the windows live in the plan's rings, codec/plan.h TfRings)
void init_state(const Kernels& k, TransformerState& st, const Config& c, size_t layers, bool per_slot_windows);

std::vector<const float*> book_ptrs(const QuantizerGroup& g, int n, bool sq);

// Sizes scratch buffers from the stages that will run on them: each conv's input and output
// [C, T], and a transposed conv's carried-tail inputs/outputs (work/full).
struct ScratchSizer {
  int64_t maxCT = 1, work = 1, full = 1;
  void conv(const Conv& cv, int64_t t_in);
  void convtr(const ConvTr& cv, int64_t t_in);
  void resblocks(const std::vector<ResBlock>& res, int64_t t);
  void allocate(const Kernels& k, Scratch& s, int compress) const;
};
// Transformer buffers for `slot_T` steps per slot and `total_T` steps in all (per_slot_windows:
// also one slot's window and queries, for the per-segment attention).
void size_transformer(const Kernels& k, Scratch& s, const Config& c, int64_t slot_T, int64_t total_T,
                      bool per_slot_windows);
// The step's staged positions [slots] followed by its segment table [slots] (stage_segments), as
// int32: the size of the plan's positions buffer, and where the table starts in it.
inline size_t positions_ints(int slots) { return size_t(slots) * (1 + sizeof(WindowSegment) / sizeof(int32_t)); }
inline WindowSegment* segment_table(int32_t* positions, int slots) {
  return reinterpret_cast<WindowSegment*>(positions + slots);
}

// A device buffer's contents in host memory (the buffer itself for host backends).
const Buffer& host_copy(const Kernels& k, const Buffer& b, std::map<std::string, Buffer>& copies,
                        const std::string& name);
std::shared_ptr<int32_t> alloc_codes(const Kernels& k, size_t n);

}  // namespace mimi::plan_detail
