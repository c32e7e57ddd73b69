// GPU LayerNorm over channels: one block per time step, shared-memory reductions that work for
// any power-of-two block size (no warp-size assumption).
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"

namespace mimi::gpu {
namespace {

__device__ float block_sum(float v, float* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const float r = sh[0];
  __syncthreads();
  return r;
}

__global__ void layer_norm_kernel(int64_t C, int64_t T, const float* x, const float* gamma, const float* beta,
                                  float eps, float* y) {
  __shared__ float sh[kThreads];
  const int64_t t = blockIdx.x;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += x[c * T + t];
  const float mean = block_sum(s, sh) / float(C);
  float v = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = x[c * T + t] - mean;
    v += d * d;
  }
  const float rstd = rsqrtf(block_sum(v, sh) / float(C) + eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) y[c * T + t] = (x[c * T + t] - mean) * rstd * gamma[c] + beta[c];
}

}  // namespace

void layer_norm(int64_t C, int64_t T, const float* x, const float* gamma, const float* beta, float eps, float* y) {
  if (T <= 0) return;
  MIMI_LAUNCH(layer_norm_kernel, unsigned(T), kThreads, 0, current_stream(), C, T, x, gamma, beta, eps, y);
  check_launch("layer_norm");
}

}  // namespace mimi::gpu
