// The building blocks of the encode and decode plans (codec/plan.h): one streaming step of each
// layer kind, written once on the Kernels table so every backend runs the same plan. Internal to
// codec/ (plan_steps.cpp, encode_plan.cpp, decode_plan.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codec/model.h"
#include "codec/plan.h"
#include "codec/profile.h"

namespace mimi::plan_detail {

inline const float* opt(const Tensor& t) { return t.empty() ? nullptr : t.data; }

// Sets the logical shape of a buffer allocated for the largest chunk (throws if it is larger).
void set_shape(Buffer& b, Shape s);

void check_frames_nq(const Config& c, int64_t frames, int n_q);
void check_slots(int slots);
// The model's tensors must live where the kernels compute (Model::in_device_memory).
void check_placement(const Model& m, const Kernels& k);

// Stream state allocation: a conv's context [Cin, P] (nothing when P = 0), a transposed conv's
// overlap, a transformer's key/value windows.
void init_state(const Kernels& k, ConvState& st, const Conv& c);
void init_state(const Kernels& k, ConvTrState& st, const ConvTr& c);
void init_state(const Kernels& k, TransformerState& st, const Config& c, size_t layers);

// y [Cout, T/stride] = conv(x [Cin, T]) continuing the stream in `st` (its causal left context);
// `accumulate` adds into y (residual), `elu_input` applies ELU to every input the conv reads.
// Returns T_out.
int64_t conv_step(const Kernels& k, const Conv& c, ConvState& st, const float* x, int64_t T, float* y,
                  StageTimer& t, bool accumulate = false, bool elu_input = false);
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
};
// x [D, T_total] through the transformer layers in place: the norms, projections and MLP on all
// columns at once, RoPE and attention per segment against its own key/value window. Device work
// only: the states' counters move on in advance_slots(), after the step (a replayed step skips this
// host code, codec/step_graph.h).
void transformer_step(const Kernels& k, const Config& c, const std::vector<TransformerLayer>& layers,
                      const std::vector<TfSegment>& segments, float* x, int64_t T_total, Scratch& s, StageTimer& t);

// Before a step of `frames` [slots] frames (ds transformer steps each): every slot's position (the
// RoPE offset) into positions [slots], to be staged to the device where rope reads it; returns
// whether every active slot is steady (started, key/value window full: the step can be
// captured). Throws Error(Input) for a stream that would pass int32 within this step.
bool stage_slots(const std::vector<TransformerState*>& tf, const std::vector<int64_t>& frames, int64_t ds,
                 int64_t max_frames, const Config& c, int32_t* positions);
// After it: the active slots' windows and positions moved on.
void advance_slots(const std::vector<TransformerState*>& tf, const std::vector<int64_t>& frames, int64_t ds,
                   const Config& c);

// Pipelined steps (codec/plan.h): the staging set for the next submit (the one no step in flight
// holds; throws Error(Usage) with two in flight), and collect's bookkeeping.
int free_set(const std::deque<StepInFlight>& flight);
// Pops the oldest step after `graphs` waited for it; its columns go to offset/frames.
StepInFlight collect_flight(std::deque<StepInFlight>& flight, StepGraphs& graphs, std::vector<int64_t>& offset,
                            std::vector<int64_t>& frames);
void check_none_in_flight(const std::deque<StepInFlight>& flight, const char* what);
// Waits for every step in flight and drops them; never throws (used on error paths).
void discard_flight(std::deque<StepInFlight>& flight, StepGraphs& graphs) noexcept;

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
// Transformer buffers for `slot_T` steps per slot and `total_T` steps in all.
void size_transformer(const Kernels& k, Scratch& s, const Config& c, int64_t slot_T, int64_t total_T);

// A device buffer's contents in host memory (the buffer itself for host backends).
const Buffer& host_copy(const Kernels& k, const Buffer& b, std::map<std::string, Buffer>& copies,
                        const std::string& name);
std::shared_ptr<int32_t> alloc_codes(const Kernels& k, size_t n);

}  // namespace mimi::plan_detail
