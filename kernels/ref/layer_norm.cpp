// Naive reference LayerNorm over the channel axis, double precision statistics.
#include <cmath>

#include "kernels/ops.h"

namespace mimi::ref {

void layer_norm(int64_t C, int64_t T, const float* x, const float* gamma, const float* beta,
                float eps, float* y) {
  for (int64_t t = 0; t < T; ++t) {
    double mean = 0.0;
    for (int64_t c = 0; c < C; ++c) mean += x[c * T + t];
    mean /= double(C);
    double var = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      double d = x[c * T + t] - mean;
      var += d * d;
    }
    var /= double(C);
    const double inv = 1.0 / std::sqrt(var + double(eps));
    for (int64_t c = 0; c < C; ++c)
      y[c * T + t] = float((x[c * T + t] - mean) * inv * gamma[c] + beta[c]);
  }
}

}  // namespace mimi::ref
