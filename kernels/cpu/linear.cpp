// Linear without bias in channel-major layout: one GEMM, weights as the A operand.
#include "kernels/ops.h"

namespace mimi::cpu {

void linear(int64_t in, int64_t out, int64_t T, const float* W, const float* x, float* y) {
  gemm(out, T, in, W, in, x, T, y, T, false);
}

}  // namespace mimi::cpu
