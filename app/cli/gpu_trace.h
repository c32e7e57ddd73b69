// `mimi gpu-trace`: the ops the GPU plans launch, with their shapes, for the cost model
// (scripts/gpu_model.py; docs/GPU.md "Cost model"). Developer tool: no GPU needed.
#pragma once

#include <string>
#include <vector>

namespace mimi::app {

struct GpuTraceOptions {
  std::string out;               // JSON Lines: one workload per line {workload, audio_s, slots, ops: [...]}
  std::string config = "full";   // PRNG weights of this test config (the ops do not depend on the values)
  std::vector<double> seconds{10};             // offline encode/decode at batch 1
  std::vector<int> batches{64};                // offline batched: this many slots x 128 frames, one step
  std::vector<int> slots{1, 64, 256, 1024};    // streaming: one frame per slot per step
  int64_t steps = 260;                         // streaming steps before the one written (past the window's fill)
  int n_q = 8;
};

int run_gpu_trace(const GpuTraceOptions& o);

}  // namespace mimi::app
