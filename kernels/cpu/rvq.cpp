// CPU residual vector quantization: per codebook one GEMM dot[bins, F] = E[bins, Q] * r[Q, F],
// then d = sqrt(max(0, |r|^2 - 2 dot + |e|^2)) and a column argmin (ties to the lowest index).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/threads.h"
#include "kernels/ops.h"

namespace mimi::cpu {

void rvq_encode(int64_t Q, int64_t F, int64_t bins, int64_t n, const float* x,
                const float* const* codebooks, const float* const* sq_norms, int32_t* codes, float* work) {
  float* r = work;            // the residual [Q, F]
  float* dot = r + Q * F;     // [bins, F]
  float* rr = dot + bins * F;  // |r|^2 [F]
  std::copy(x, x + Q * F, r);
  const float* dotp = dot;
  const float* rrp = rr;
  for (int64_t j = 0; j < n; ++j) {
    const float* E = codebooks[j];
    const float* ee = sq_norms[j];
    gemm(bins, F, Q, E, Q, r, F, dot, F, false);
    std::fill(rr, rr + F, 0.0f);
    for (int64_t q = 0; q < Q; ++q)
      for (int64_t f = 0; f < F; ++f) rr[f] += r[q * F + f] * r[q * F + f];
    parallel_for(F, 16, [&](int64_t f0, int64_t f1) {
      rvq_argmin(f1 - f0, bins, rrp + f0, dotp + f0, F, ee, codes + j * F + f0);
    });
    for (int64_t q = 0; q < Q; ++q)
      for (int64_t f = 0; f < F; ++f) r[q * F + f] -= E[codes[j * F + f] * Q + q];
  }
}

void rvq_decode(int64_t Q, int64_t F, int64_t bins, int64_t n, const int32_t* codes,
                const float* const* codebooks, float* y) {
  (void)bins;
  std::fill(y, y + Q * F, 0.0f);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t f = 0; f < F; ++f) {
      const float* e = codebooks[j] + int64_t(codes[j * F + f]) * Q;
      for (int64_t q = 0; q < Q; ++q) y[q * F + f] += e[q];
    }
}

}  // namespace mimi::cpu
