// CPU activations, split across threads in cache-sized chunks.
#include <cmath>

#include "kernels/cpu/threads.h"
#include "kernels/ops.h"

namespace mimi::cpu {

void elu(int64_t n, const float* x, float* y) {
  parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = x[i] > 0.0f ? x[i] : std::expm1(x[i]);
  });
}

void gelu_erf(int64_t n, const float* x, float* y) {
  parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * float(M_SQRT1_2)));
  });
}

}  // namespace mimi::cpu
