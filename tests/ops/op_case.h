// One table of op cases for every backend (ggml's test-backend-ops): each case names its op and
// shape, states its tolerance against the naive reference (kernels/ref, the oracle) and its
// FLOP and byte counts, and binds itself to any Kernels table (codec/device.h) the same way, so
// the CPU kernels, the GPU kernels and the emulated GPU run exactly the same cases.
// Lifecycle per case and backend: bind (inputs made from the case's seed, uploaded into an
// Arena of that backend) -> call (the op; again and again when timing) -> read (the output,
// downloaded). Properties that are not "equals the reference" (column invariance, streaming
// prefixes, a backend's summation order) stay in the per-backend tests (test_kernels.cpp,
// test_gpu_kernels.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <utility>
#include <string>
#include <vector>

#include "codec/device.h"
#include "support/rng.h"

namespace mimi::optest {

// Inputs: uniform floats in [lo, hi), or small integers (every sum of products of them is exact
// in float32 whatever the order, so the backend must equal the reference bit for bit).
struct Rng : testing::Rng {
  bool integer = false;
  Rng(uint64_t seed, bool integer_values) : testing::Rng(seed), integer(integer_values) {}
  std::vector<float> vec(size_t n, float lo = -1, float hi = 1);  // integers in [-3, 3] when integer
};

// Device memory of one Kernels table, freed together.
class Arena {
 public:
  explicit Arena(const Kernels& k) : k(k) {}
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  float* put(const std::vector<float>& host);  // a device copy
  float* zeros(size_t n);
  // An output or workspace: NaN until the op writes it, so an element read before it is written
  // (or never written) shows up as a mismatch.
  float* nans(size_t n);
  int32_t* put_i32(const std::vector<int32_t>& host);
  std::vector<float> get(const float* p, size_t n) const;
  std::vector<int32_t> get_i32(const int32_t* p, size_t n) const;
  const Kernels& k;

 private:
  std::vector<void*> owned_;
};

struct Bound {
  std::function<void()> call;               // runs the op once
  std::function<std::vector<float>()> read;  // the output (codes as floats: exact below 2^24)
};

// |got - ref| <= rel * max|ref| + abs for every element; {0, 0} is bit for bit.
struct Tol {
  double rel = 0, abs = 0;
};

struct OpCase {
  std::string op;     // the Kernels field it tests: "gemm", "conv1d", ...
  std::string shape;  // its shape variables and variant: "M=7 N=33 K=5 pad=3 acc int"
  Tol cpu, gpu;       // the tolerance on the CPU backends and on the GPU backends
  double flops = 0, bytes = 0;  // per call: arithmetic, and the bytes an op must at least move
  uint64_t seed = 0;
  bool integer = false;
  // nullptr where the backend lacks the (optional) op, e.g. the fused resblock on the GPU
  std::function<bool(const Kernels&)> present = [](const Kernels&) { return true; };
  std::function<Bound(Arena&, Rng&)> bind;
};

// "name=value" pairs for the shape column
inline std::string kv(std::initializer_list<std::pair<const char*, int64_t>> vars) {
  std::string s;
  for (auto [name, v] : vars) {
    if (!s.empty()) s += ' ';
    s.append(name).append("=").append(std::to_string(v));
  }
  return s;
}

inline constexpr Tol kExact{0, 0};

// The table being filled (op_cases.cpp, op_cases_transformer.cpp); each case gets its own seed.
struct Table {
  std::vector<OpCase> cases;
  OpCase& add(std::string op, std::string shape, Tol cpu, Tol gpu, bool integer, double flops, double bytes,
              std::function<Bound(Arena&, Rng&)> bind) {
    if (integer) {
      shape += " int";
      cpu = gpu = kExact;  // small integers: exact in any summation order
    }
    // the seed from the case's name (FNV-1a): adding a case changes no other case's inputs
    uint64_t seed = 0xcbf29ce484222325ull;
    for (const char ch : op + " " + shape) seed = (seed ^ uint8_t(ch)) * 0x100000001b3ull;
    OpCase c{.op = std::move(op), .shape = std::move(shape), .cpu = cpu, .gpu = gpu, .flops = flops,
             .bytes = bytes, .seed = seed, .integer = integer, .bind = std::move(bind)};
    cases.push_back(std::move(c));
    return cases.back();
  }
};
void transformer_cases(Table& t);  // linear, fused linears, rope, attention, rvq

std::vector<OpCase> all_cases();  // op_cases.cpp
// The table's conv shapes (elu_input off; trimmed), for the shape checks of tests/test_kernels.cpp.
std::vector<Conv1dShape> conv1d_shapes();
std::vector<ConvTranspose1dShape> conv_transpose1d_shapes();

}  // namespace mimi::optest
