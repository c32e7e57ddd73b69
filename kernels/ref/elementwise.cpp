// Naive reference residual adds.
#include "kernels/ops.h"

namespace mimi::ref {

void add_inplace(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void bias_add(int64_t C, int64_t T, const float* bias, float* y) {
  for (int64_t c = 0; c < C; ++c)
    for (int64_t t = 0; t < T; ++t) y[c * T + t] += bias[c];
}

void layer_scale_add(int64_t C, int64_t T, const float* scale, const float* x, float* y) {
  for (int64_t c = 0; c < C; ++c)
    for (int64_t t = 0; t < T; ++t) y[c * T + t] += scale[c] * x[c * T + t];
}

}  // namespace mimi::ref
