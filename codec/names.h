// The official Mimi state dict: every tensor's moshi name (the released checkpoint's naming,
// also the PRNG key of the test weights), shape and kind, in checkpoint order; and the
// moshi -> Hugging Face renaming of transformers' convert_mimi_checkpoint_to_pytorch.py.
#pragma once

#include <string>
#include <vector>

#include "codec/config.h"
#include "codec/tensor.h"

namespace mimi {

enum class Dialect { Moshi, HuggingFace };
const char* dialect_name(Dialect d);

struct TensorSpec {
  std::string name;  // moshi name
  Shape shape;
  std::string kind;  // WEIGHTS_SPEC.md section 2 kinds: conv_weight, conv_bias, ...
  int64_t fan_in = 0;
};

std::vector<TensorSpec> mimi_tensor_specs(const Config& cfg);

// moshi name -> HF name (the converter's ordered str.replace list; in_proj_weight is split
// separately, see hf_split_names).
std::string hf_name(const std::string& moshi_name);

// HF names of the q/k/v projections that replace a moshi `...in_proj_weight`.
struct QkvNames {
  std::string q, k, v;
};
QkvNames hf_split_names(const std::string& moshi_in_proj_name);

// Row permutation between moshi's interleaved RoPE pairs and HF's rotate-half layout:
// HF row h*hd + j*(hd/2) + p holds moshi row h*hd + 2p + j.
int64_t hf_row_to_moshi_row(int64_t hf_row, int64_t head_dim);

}  // namespace mimi
