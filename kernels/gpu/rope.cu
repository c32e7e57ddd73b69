// GPU RoPE: one thread per (head, pair, time); angles in float32 as the official code does.
// The frequencies exp(i * coef) are computed on the host with the same std::exp as the reference
// and CPU kernels and passed by value (a kernel argument: nothing to allocate, capture-safe):
// device expf may differ by an ulp, and at angle ~260 rad one ulp of the frequency moves the
// angle by ~3e-5. The product freq * position is exact float math on both sides.
//
// rope_append (codec/device.h FusedOps): the same rotation for every segment of a batched step,
// with the keys and values written straight into each slot's key/value ring, one launch for all
// slots (the plans' per-slot copies, two RoPE launches and the window's shift, per layer, gone).
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

Freqs freqs_for(int64_t hd, float max_period) {
  if (hd / 2 > kMaxHalf) throw Error(ErrorKind::Internal, "rope: head_dim over " + std::to_string(2 * kMaxHalf));
  const float coef = float(-std::log(double(max_period)) * 2.0 / double(hd));
  Freqs freqs{};
  for (int64_t i = 0; i < hd / 2; ++i) freqs.f[i] = std::exp(float(i) * coef);  // as kernels/ref/rope.cpp
  return freqs;
}

// The pair (a, b) at `position` rotated by pair i's angle: one definition for both kernels, so
// rope_append gives rope's bits (explicit fmaf: no compiler contracts the two differently).
__device__ __forceinline__ void rotate(const Freqs& freqs, int64_t i, int64_t position, float& a, float& b) {
  const float angle = freqs.f[i] * float(position);
  float s, c;
  sincosf(angle, &s, &c);
  const float x = a, y = b;
  a = fmaf(x, c, -(y * s));
  b = fmaf(x, s, y * c);
}

__device__ __forceinline__ void pair_rows(int64_t h, int64_t hd, int64_t i, bool interleaved, int64_t& r0, int64_t& r1) {
  const int64_t half = hd / 2;
  r0 = h * hd + (interleaved ? 2 * i : i);
  r1 = h * hd + (interleaved ? 2 * i + 1 : i + half);
}

__global__ void MIMI_BOUNDS(kThreads) rope_kernel(int64_t H, int64_t hd, int64_t T, const int32_t* position, Freqs freqs, bool interleaved,
                            float* x) {
  const int64_t half = hd / 2;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= H * half * T) return;
  const int64_t t = idx % T, i = (idx / T) % half, h = idx / (T * half);
  int64_t r0, r1;
  pair_rows(h, hd, i, interleaved, r0, r1);
  float a = x[r0 * T + t], b = x[r1 * T + t];
  rotate(freqs, i, int64_t(*position) + t, a, b);
  x[r0 * T + t] = a;
  x[r1 * T + t] = b;
}

// grid.y = segment; x over (head, pair, column of the segment). q rotated in place in qkv; k
// rotated and v copied into the slot's rings at column (position + t) mod R.
__global__ void MIMI_BOUNDS(kThreads) rope_append_kernel(int64_t H, int64_t hd, int64_t Tt, const WindowSegment* segs,
                                                     Freqs freqs, bool interleaved, float* qkv, float* ring_k,
                                                     float* ring_v, int64_t R) {
  const WindowSegment sg = segs[blockIdx.y];
  const int64_t half = hd / 2, len = sg.length;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= H * half * len) return;
  const int64_t t = idx % len, i = (idx / len) % half, h = idx / (len * half);
  const int64_t D = H * hd, col = sg.offset + t, pos = int64_t(sg.position) + t;
  const int64_t rc = int64_t(uint32_t(pos) % uint32_t(R));  // positions are below 2^31
  int64_t r0, r1;
  pair_rows(h, hd, i, interleaved, r0, r1);
  float* q = qkv;
  const float* k = qkv + D * Tt;
  const float* v = k + D * Tt;
  float a = q[r0 * Tt + col], b = q[r1 * Tt + col];
  rotate(freqs, i, pos, a, b);
  q[r0 * Tt + col] = a;
  q[r1 * Tt + col] = b;
  float* rk = ring_k + int64_t(sg.slot) * D * R;
  float* rv = ring_v + int64_t(sg.slot) * D * R;
  a = k[r0 * Tt + col], b = k[r1 * Tt + col];
  rotate(freqs, i, pos, a, b);
  rk[r0 * R + rc] = a;
  rk[r1 * R + rc] = b;
  rv[r0 * R + rc] = v[r0 * Tt + col];
  rv[r1 * R + rc] = v[r1 * Tt + col];
}

}  // namespace

void rope(int64_t H, int64_t hd, int64_t T, const int32_t* position, float max_period, RopeLayout layout,
          float* x) {
  const int64_t n = H * (hd / 2) * T;
  if (n <= 0) return;
  MIMI_LAUNCH(rope_kernel, blocks_for(n), kThreads, 0, current_stream(), H, hd, T, position, freqs_for(hd, max_period),
              layout == RopeLayout::Interleaved, x);
  check_launch("rope");
}

void rope_append(int64_t H, int64_t hd, int64_t Tt, int64_t nseg, int64_t max_len, const WindowSegment* segs,
                 float max_period, RopeLayout layout, float* qkv, float* ring_k, float* ring_v, int64_t R) {
  const int64_t n = H * (hd / 2) * max_len;
  if (n <= 0 || nseg <= 0) return;
  if (nseg > 65535) throw Error(ErrorKind::Internal, "rope_append: over 65535 segments");
  MIMI_LAUNCH(rope_append_kernel, dim3(blocks_for(n), unsigned(nseg)), kThreads, 0, current_stream(), H, hd, Tt, segs,
              freqs_for(hd, max_period), layout == RopeLayout::Interleaved, qkv, ring_k, ring_v, R);
  check_launch("rope_append");
}

}  // namespace mimi::gpu
