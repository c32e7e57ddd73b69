// Naive reference activations.
#include <cmath>

#include "kernels/ops.h"

namespace mimi::ref {

void elu(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : std::expm1(x[i]);
}

void gelu_erf(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    y[i] = float(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
  }
}

}  // namespace mimi::ref
