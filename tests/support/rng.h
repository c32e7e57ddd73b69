// The kernel tests' input generator: xorshift64, seeded, the same sequence on every machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mimi::testing {

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  float uniform(float lo, float hi) { return lo + (hi - lo) * float(next() >> 40) / 16777216.0f; }
  int small_int(int lo, int hi) { return lo + int(next() % uint64_t(hi - lo + 1)); }
};

inline std::vector<float> random_vec(size_t n, Rng& r, float lo = -1, float hi = 1) {
  std::vector<float> v(n);
  for (auto& x : v) x = r.uniform(lo, hi);
  return v;
}
inline std::vector<float> int_vec(size_t n, Rng& r, int lo = -3, int hi = 3) {
  std::vector<float> v(n);
  for (auto& x : v) x = float(r.small_int(lo, hi));
  return v;
}

}  // namespace mimi::testing
