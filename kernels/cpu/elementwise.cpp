// CPU residual adds.
#include "kernels/cpu/threads.h"
#include "kernels/ops.h"

namespace mimi::cpu {

void add_inplace(int64_t n, const float* x, float* y) {
  parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] += x[i];
  });
}

void bias_add(int64_t C, int64_t T, const float* bias, float* y) {
  parallel_for(C, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t t = 0; t < T; ++t) y[c * T + t] += bias[c];
  });
}

void layer_scale_add(int64_t C, int64_t T, const float* scale, const float* x, float* y) {
  parallel_for(C, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float s = scale[c];
      for (int64_t t = 0; t < T; ++t) y[c * T + t] += s * x[c * T + t];
    }
  });
}

}  // namespace mimi::cpu
