// mimi bench: encode/decode timing table (not a test: it prints, it does not assert).
#pragma once

#include <string>
#include <vector>

#include "codec/engine.h"

namespace mimi::app {

struct BenchOptions {
  std::vector<double> seconds{10, 60};
  int runs = 5;
  int n_q = 8;
  std::string weights;  // empty: the full-size PRNG test weights, generated in memory
  std::string config;
  std::string input;  // audio file tiled to each length (empty: a synthetic speech-like signal)
  int threads = 0;
  std::string device = "cpu";
  int batch = 1;  // inputs per timed run, at once in the slots of one batched plan
  int64_t chunk_frames = -1;  // --chunk, both directions; -1: the engine's defaults
  int64_t latency_frames = 250;  // frames pushed one at a time for the latency line (0 = skip)
  bool json = false;
  bool stages = true;       // the CPU's stage table (host clock, the median run)
  bool gpu_stages = false;  // on a GPU (--verbose): one more run, op by op, timed by device events
  bool graphs = true;  // on a GPU: capture and replay steady steps (codec/step_graph.h)
};

int run_bench(const BenchOptions& o);

}  // namespace mimi::app
