// GPU RoPE: one thread per (head, pair, time); angles in float32 as the official code does.
// The frequencies exp(i * coef) are computed on the host with the same std::exp as the reference
// and CPU kernels and passed by value (a kernel argument: nothing to allocate, capture-safe):
// device expf may differ by an ulp, and at angle ~260 rad one ulp of the frequency moves the
// angle by ~3e-5. The product freq * position is exact float math on both sides.
#include "kernels/error.h"
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"

#include <cmath>

namespace mimi::gpu {
namespace {

constexpr int64_t kMaxHalf = 256;  // head_dim <= 512 (Mimi: 64); 1 KiB of kernel arguments
struct Freqs {
  float f[kMaxHalf];
};

__global__ void MIMI_BOUNDS(kThreads) rope_kernel(int64_t H, int64_t hd, int64_t T, const int32_t* position, Freqs freqs, bool interleaved,
                            float* x) {
  const int64_t half = hd / 2;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= H * half * T) return;
  const int64_t t = idx % T, i = (idx / T) % half, h = idx / (T * half);
  const float angle = freqs.f[i] * float(int64_t(*position) + t);
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
  if (hd / 2 > kMaxHalf) throw Error(ErrorKind::Internal, "rope: head_dim over " + std::to_string(2 * kMaxHalf));
  const float coef = float(-std::log(double(max_period)) * 2.0 / double(hd));
  Freqs freqs{};
  for (int64_t i = 0; i < hd / 2; ++i) freqs.f[i] = std::exp(float(i) * coef);  // as kernels/ref/rope.cpp
  MIMI_LAUNCH(rope_kernel, blocks_for(n), kThreads, 0, current_stream(), H, hd, T, position, freqs,
              layout == RopeLayout::Interleaved, x);
  check_launch("rope");
}

}  // namespace mimi::gpu
