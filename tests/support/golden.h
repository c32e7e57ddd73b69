// Helpers for golden tests: the reference data folder, case discovery, test weights written to
// real files, and the tolerance policy of shared/reference/README.md.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codec/engine.h"
#include "codec/safetensors.h"
#include "codec/weights.h"

namespace mimi::test {

std::string data_dir();                                   // tests/data (the in-repo reference copy)
std::vector<std::string> case_files(const std::string& config);  // sorted .safetensors paths

// Writes the PRNG weights (seed 1) of a reference config in a dialect to a temporary file once
// per process, and loads them through the ordinary loader. Cached per (config, dialect).
std::shared_ptr<const Model> reference_model(const std::string& config, Dialect dialect);
std::string reference_weights_path(const std::string& config, Dialect dialect);

struct StageError {
  double max_abs = 0;       // max |c - g|
  double max_ref = 0;       // max |g|
  double worst_ratio = 0;   // max |c - g| / (1e-4 max|g| + 1e-5); <= 1 passes
  int64_t count = 0;
  bool shape_ok = true;
};
// Continuous tensors: |c - g| <= 1e-4 * max|g| + 1e-5 everywhere.
StageError compare_stage(const float* got, int64_t n_got, const float* golden, int64_t n_golden);

struct CodeReport {
  int64_t total = 0;
  int64_t near_tie_flips = 0;  // codes that differ, inside a group whose first difference
                               // sits on a code with margin < 1e-4
  int64_t hard_mismatches = 0; // first difference of a group on a code with margin >= 1e-4
  std::string first_hard;      // where, for the message
};
// codes, margin: [n_q, F]. Groups: codebook 0 (semantic) and 1..n_q-1 (acoustic).
CodeReport compare_codes(const std::vector<int32_t>& got, const std::vector<int32_t>& golden,
                         const std::vector<float>& margin, int n_q, int64_t frames);

// "cuda" or "hip", whichever this build has a device for (the emulated one included); without
// one, prints "SKIPPED: no CUDA or HIP device; <what> did not run on a GPU" and exits 77, which
// ctest reports as skipped.
std::string gpu_device_or_skip(const std::string& what);

// The GPU plans' code path on the CPU: the CPU kernels declared as device memory (weights
// uploaded, inputs uploaded, outputs downloaded, every copy through the memory ops) and without
// the fused resblock (composed from the ops, as on the GPU).
const Kernels& cpu_as_device();

}  // namespace mimi::test
