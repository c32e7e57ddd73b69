// Around a step of a batched plan (codec/plan.h): the slots' transformer positions staged before
// it and moved on after it, and the pipelined steps in flight (at most two). Internal to codec/.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "codec/plan.h"

namespace mimi::plan_detail {

// Before a step of `frames` [slots] frames (ds transformer steps each): every slot's position (the
// RoPE offset) into positions [slots], to be staged to the device where rope reads it; returns
// whether every active slot is steady (started, key/value window full: the step can be
// captured). Throws Error(Input) for a stream that would pass int32 within this step.
bool stage_slots(const std::vector<TransformerState*>& tf, const std::vector<int64_t>& frames, int64_t ds,
                 int64_t max_frames, const Config& c, int32_t* positions);
// And its segment table (kernels/ops.h WindowSegment), for the windowed fused ops
// (codec/layer_steps.h TfRings): one entry per active slot in slot order (the transformer's
// segments), its columns (offsets and frames of ds steps each) and position (as staged by
// stage_slots into `positions`). Returns the number of entries.
int64_t stage_segments(const std::vector<int64_t>& frames, const std::vector<int64_t>& offsets, int64_t ds,
                       const int32_t* positions, WindowSegment* table);
// The frames every active slot pushes in this step when they are all the same (a step the SEANet
// can take on every slot at once), else 0.
int64_t common_frames(const std::vector<int64_t>& frames);
// After it: the active slots' windows and positions moved on.
void advance_slots(const std::vector<TransformerState*>& tf, const std::vector<int64_t>& frames, int64_t ds,
                   const Config& c);

// A step's columns, for either plan: slot s's frames[s] (0..max_frames, else Error(Usage) naming
// `plan`) into out_frames[s], at out_offset[s] with the active slots side by side; returns the
// step's total frames. Every count is checked before any is written.
int64_t lay_out_slots(const int64_t* frames, int slots, int64_t max_frames, const char* plan,
                      std::vector<int64_t>& out_offset, std::vector<int64_t>& out_frames);

// Pipelined steps (codec/plan.h): the staging set for the next submit (the one no step in flight
// holds; throws Error(Usage) with two in flight), and collect's bookkeeping.
int free_set(const std::deque<StepInFlight>& flight);
// Pops the oldest step after `graphs` waited for it; its columns go to offset/frames.
StepInFlight collect_flight(std::deque<StepInFlight>& flight, StepGraphs& graphs, std::vector<int64_t>& offset,
                            std::vector<int64_t>& frames);
void check_none_in_flight(const std::deque<StepInFlight>& flight, const char* what);
// Waits for every step in flight and drops them; never throws (used on error paths).
void discard_flight(std::deque<StepInFlight>& flight, StepGraphs& graphs) noexcept;

}  // namespace mimi::plan_detail
