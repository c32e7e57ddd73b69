// A very small but valid Mimi configuration (weights of a few KB), so that mutated weights
// files stay short enough to fuzz quickly; seeds are generated for it (scripts/fuzz.sh --make-seeds).
#pragma once

#include "codec/config.h"

namespace mimi::fuzz {

inline Config micro_config() {
  Config c = Config::official();
  c.sample_rate = 1000;
  c.frame_rate = 125;  // 1000 / (2 * 2) / 125 = downsample stride 2
  c.ratios = {2, 2};
  c.dimension = c.d_model = 8;
  c.n_filters = 2;
  c.kernel_size = c.last_kernel_size = c.residual_kernel_size = 3;
  c.num_heads = 2;
  c.num_layers = 1;
  c.dim_feedforward = 16;
  c.context = 8;
  c.q_dimension = 4;
  c.n_q = 3;
  c.bins = 8;
  return c;
}

// The streaming harnesses' model: the micro model with 8 codebooks, so that every `--n-q` a
// harness can pick (1-8) is valid, as it is for the tiny and full models, and 32 samples a frame
// (ratios 4 x 4, 31.25 frames a second), so that a 4 KB stream is at most 64 frames of model work
// (the stream parsing, which is what these harnesses fuzz, costs the same).
inline Config micro_stream_config() {
  Config c = micro_config();
  c.n_q = 8;
  c.ratios = {4, 4};
  c.frame_rate = 31.25;  // 1000 / (4 * 4) / 31.25 = downsample stride 2, as in Mimi
  return c;
}

}  // namespace mimi::fuzz
