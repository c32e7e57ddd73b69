// GPU RoPE: one thread per (head, pair, time); angles in float32 as the official code does.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"

#include <cmath>

namespace mimi::gpu {
namespace {

__global__ void rope_kernel(int64_t H, int64_t hd, int64_t T, const int32_t* position, float coef, bool interleaved,
                            float* x) {
  const int64_t half = hd / 2;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= H * half * T) return;
  const int64_t t = idx % T, i = (idx / T) % half, h = idx / (T * half);
  const float freq = expf(float(i) * coef);
  const float angle = freq * float(int64_t(*position) + t);
  float s, c;
  sincosf(angle, &s, &c);
  const int64_t r0 = h * hd + (interleaved ? 2 * i : i), r1 = h * hd + (interleaved ? 2 * i + 1 : i + half);
  const float a = x[r0 * T + t], b = x[r1 * T + t];
  x[r0 * T + t] = a * c - b * s;
  x[r1 * T + t] = a * s + b * c;
}

}  // namespace

void rope(int64_t H, int64_t hd, int64_t T, const int32_t* position, float max_period, RopeLayout layout,
          float* x) {
  const int64_t n = H * (hd / 2) * T;
  if (n <= 0) return;
  const float coef = float(-std::log(double(max_period)) * 2.0 / double(hd));
  MIMI_LAUNCH(rope_kernel, blocks_for(n), kThreads, 0, current_stream(), H, hd, T, position, coef, layout == RopeLayout::Interleaved, x);
  check_launch("rope");
}

}  // namespace mimi::gpu
