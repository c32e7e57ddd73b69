// GPU linear without bias: one GEMM, weights as the A operand.
#include "kernels/gpu/ops.h"

namespace mimi::gpu {

void linear(int64_t in, int64_t out, int64_t T, const float* W, const float* x, float* y) {
  gemm(out, T, in, W, in, x, T, y, T, false);
}

}  // namespace mimi::gpu
