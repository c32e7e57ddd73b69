// Deterministic Mimi test weights, exactly as shared/reference/WEIGHTS_SPEC.md defines them
// (counter-based PRNG keyed by the moshi tensor name and a seed), in either file dialect.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/config.h"
#include "codec/names.h"
#include "codec/safetensors.h"

namespace mimi {

// The reference configurations: "full" (official), "tiny", "tiny-window".
Config test_config(const std::string& name);

// One element: float32(a + b * v_i), v_i the PRNG value of element i of tensor `name`.
uint64_t prng_base(const std::string& name, uint64_t seed);
double prng_v(uint64_t base, uint64_t i);

struct TensorRule {
  double a = 0.0, b = 0.0;
};
TensorRule tensor_rule(const TensorSpec& spec, const Config& cfg);

struct GeneratedWeights {
  Config cfg;
  std::vector<TensorSpec> specs;            // moshi names, checkpoint order
  std::vector<std::vector<float>> values;   // one per spec, row-major
};

GeneratedWeights generate_prng_weights(const Config& cfg, uint64_t seed);

// The file in the requested dialect (HF: renamed, in_proj split and q/k permuted as
// transformers' converter does). `metadata` goes into __metadata__.
std::vector<uint8_t> prng_weights_file(const GeneratedWeights& w, Dialect dialect,
                                       const std::map<std::string, std::string>& metadata = {});
void write_prng_weights(const std::string& path, const GeneratedWeights& w, Dialect dialect,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace mimi
