// Naive reference residual vector quantization (distances in double, argmin ties to lowest).
#include <cmath>
#include <vector>

#include "kernels/ops.h"

namespace mimi::ref {

void rvq_encode(int64_t Q, int64_t F, int64_t bins, int64_t n, const float* x,
                const float* const* codebooks, const float* const* sq_norms, int32_t* codes, float* work) {
  (void)sq_norms;  // the reference recomputes |e|^2 itself
  (void)work;      // and keeps its own residual
  std::vector<float> r(static_cast<size_t>(Q));
  for (int64_t f = 0; f < F; ++f) {
    for (int64_t q = 0; q < Q; ++q) r[q] = x[q * F + f];
    for (int64_t j = 0; j < n; ++j) {
      const float* E = codebooks[j];
      int32_t best = 0;
      double best_d = 0.0;
      for (int64_t b = 0; b < bins; ++b) {
        double rr = 0.0, re = 0.0, ee = 0.0;
        for (int64_t q = 0; q < Q; ++q) {
          rr += double(r[q]) * r[q];
          re += double(r[q]) * E[b * Q + q];
          ee += double(E[b * Q + q]) * E[b * Q + q];
        }
        const double d = std::sqrt(std::max(0.0, rr - 2.0 * re + ee));
        if (b == 0 || d < best_d) {
          best_d = d;
          best = int32_t(b);
        }
      }
      codes[j * F + f] = best;
      for (int64_t q = 0; q < Q; ++q) r[q] -= E[best * Q + q];
    }
  }
}

void rvq_decode(int64_t Q, int64_t F, int64_t bins, int64_t n, const int32_t* codes,
                const float* const* codebooks, float* y) {
  (void)bins;
  for (int64_t q = 0; q < Q; ++q)
    for (int64_t f = 0; f < F; ++f) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n; ++j) acc += codebooks[j][codes[j * F + f] * Q + q];
      y[q * F + f] = acc;
    }
}

}  // namespace mimi::ref
