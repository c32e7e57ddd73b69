// GPU activations.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"
// after vendor.h
#include "kernels/gpu/epilogue.h"

namespace mimi::gpu {
namespace {

__global__ void MIMI_BOUNDS(kThreads) elu_kernel(int64_t n, const float* x, float* y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.0f ? x[i] : expm1f(x[i]);
}

__global__ void MIMI_BOUNDS(kThreads) gelu_kernel(int64_t n, const float* x, float* y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = gelu_erf_value(x[i]);
}

}  // namespace

void elu(int64_t n, const float* x, float* y) {
  if (n <= 0) return;
  MIMI_LAUNCH(elu_kernel, blocks_for(n), kThreads, 0, current_stream(), n, x, y);
  check_launch("elu");
}

void gelu_erf(int64_t n, const float* x, float* y) {
  if (n <= 0) return;
  MIMI_LAUNCH(gelu_kernel, blocks_for(n), kThreads, 0, current_stream(), n, x, y);
  check_launch("gelu_erf");
}

}  // namespace mimi::gpu
