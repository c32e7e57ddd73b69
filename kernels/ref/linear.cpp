// Naive reference: y[o, t] = sum_i W[o, i] x[i, t], double accumulation.
#include "kernels/ops.h"

namespace mimi::ref {

void linear(int64_t in, int64_t out, int64_t T, const float* W, const float* x, float* y) {
  for (int64_t o = 0; o < out; ++o)
    for (int64_t t = 0; t < T; ++t) {
      double acc = 0.0;
      for (int64_t i = 0; i < in; ++i) acc += double(W[o * in + i]) * double(x[i * T + t]);
      y[o * T + t] = float(acc);
    }
}

}  // namespace mimi::ref
