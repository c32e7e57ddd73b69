// CPU activations: libmvec vector math (AVX-512/AVX2/SSE by CPU), split across threads.
#include <cmath>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/threads.h"
#include "kernels/ops.h"

namespace mimi::cpu {

void elu(int64_t n, const float* x, float* y) {
  parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
    elu_serial(e - b, x + b, y + b);
  });
}

void gelu_erf(int64_t n, const float* x, float* y) {
  parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
    gelu_serial(e - b, x + b, y + b);
  });
}

}  // namespace mimi::cpu
