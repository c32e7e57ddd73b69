// GPU residual adds and bias.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"
// after vendor.h
#include "kernels/gpu/epilogue.h"

namespace mimi::gpu {
namespace {

__global__ void MIMI_BOUNDS(kThreads) add_kernel(int64_t n, const float* x, float* y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void MIMI_BOUNDS(kThreads) bias_kernel(int64_t C, int64_t T, const float* bias, float* y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < C * T) y[i] += bias[i / T];
}

__global__ void MIMI_BOUNDS(kThreads) scale_kernel(int64_t C, int64_t T, const float* scale, const float* x, float* y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < C * T) y[i] = scale_add_value(y[i], scale[i / T], x[i]);
}

}  // namespace

void add_inplace(int64_t n, const float* x, float* y) {
  if (n <= 0) return;
  MIMI_LAUNCH(add_kernel, blocks_for(n), kThreads, 0, current_stream(), n, x, y);
  check_launch("add_inplace");
}

void bias_add(int64_t C, int64_t T, const float* bias, float* y) {
  if (C * T <= 0) return;
  MIMI_LAUNCH(bias_kernel, blocks_for(C * T), kThreads, 0, current_stream(), C, T, bias, y);
  check_launch("bias_add");
}

void layer_scale_add(int64_t C, int64_t T, const float* scale, const float* x, float* y) {
  if (C * T <= 0) return;
  MIMI_LAUNCH(scale_kernel, blocks_for(C * T), kThreads, 0, current_stream(), C, T, scale, x, y);
  check_launch("layer_scale_add");
}

}  // namespace mimi::gpu
