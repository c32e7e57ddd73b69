// GPU residual vector quantization.
// Encode: per codebook, the dot products of every entry with every residual are one GEMM,
// dot [bins, F] = E [bins, Q] * r [Q, F] (gemm.cu: the tiled kernel, or split-K at few frames,
// all SMs either way; the codebook is read once per GEMM tile instead of once per frame), then
// one block per frame takes |r|^2 and the argmin of d = sqrt(max(0, |r|^2 - 2 dot + |e|^2)): each
// thread scans bins/256, then a tree of (distance, index) minima with ties to the lower index,
// which is the sequential scan's answer in any order; the block updates the frame's residual.
// (One thread per frame scanning all 2048 bins, as at first for F >= 32, was a serial chain of
// dependent loads on a few SMs: 4.3 ms of a 10 s encode's 13.6 on the H200, 2026-12-04.)
// Both sum every dot product (the GEMM) and |r|^2 in the GPU's one order (gemm_tile.h: chunks of
// 32 q) and pick with the same rule, so a frame's codes do not depend on F or on the path:
// batched == alone.
// Decode: one thread per output element sums its codebook entries in codebook order.
// The codebook pointers travel in the kernel arguments (at most 32 books); the residual and the
// dot products live in the caller's workspace: no allocation, no synchronization, capturable.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"
// after vendor.h
#include "kernels/gpu/gemm_tile.h"

namespace mimi::gpu {
namespace {

constexpr int kMaxBooks = 32;
constexpr int kNoBin = 0x7fffffff;   // "none yet"; a frame whose every distance is NaN gets bin 0
struct Books {  // passed by value
  const float* p[kMaxBooks];
};

Books books_arg(const float* const* host, int64_t n) {
  if (n > kMaxBooks) throw Error(ErrorKind::Internal, "rvq: more than 32 codebooks");
  Books b{};
  for (int64_t i = 0; i < n; ++i) b.p[i] = host[i];
  return b;
}

// |r|^2 of frame f of r [Q, F], in the contract's order (every caller sums it the same way)
__device__ __forceinline__ float residual_norm(int64_t Q, int64_t F, const float* r, int64_t f) {
  tile::ChunkedSum rs;
  for (int64_t q = 0; q < Q; ++q) rs.add(r[q * F + f], r[q * F + f]);
  return rs.value();
}

// d of bin b for a frame, and the pick rule: smaller d, ties to the lower index, NaN never wins
__device__ __forceinline__ float distance(float rr, float dot, float ee) { return sqrtf(fmaxf(0.0f, rr - 2.0f * dot + ee)); }
__device__ __forceinline__ bool better(float d, int i, float bd, int bi) { return d < bd || (d == bd && i < bi); }

// One block per frame f, after the GEMM of codebook E: the argmin over dot's column f split over
// the block, the code, and the residual update.
__global__ void MIMI_BOUNDS(kThreads) rvq_pick_block_kernel(int64_t Q, int64_t F, int64_t bins, const float* dot,
                                                           const float* E, const float* ee, float* r, int32_t* codes) {
  __shared__ float best_d[kThreads];
  __shared__ int best_i[kThreads];
  const int64_t f = blockIdx.x;
  const float rr = residual_norm(Q, F, r, f);  // every thread the same value
  float bd = INFINITY;
  int bi = kNoBin;
  for (int64_t b = threadIdx.x; b < bins; b += blockDim.x) {
    const float d = distance(rr, dot[b * F + f], ee[b]);
    if (better(d, int(b), bd, bi)) bd = d, bi = int(b);
  }
  best_d[threadIdx.x] = bd;
  best_i[threadIdx.x] = bi;
  __syncthreads();
  for (unsigned st = blockDim.x / 2; st > 0; st >>= 1) {
    if (threadIdx.x < st && better(best_d[threadIdx.x + st], best_i[threadIdx.x + st], best_d[threadIdx.x], best_i[threadIdx.x]))
      best_d[threadIdx.x] = best_d[threadIdx.x + st], best_i[threadIdx.x] = best_i[threadIdx.x + st];
    __syncthreads();
  }
  const int best = best_i[0] == kNoBin ? 0 : best_i[0];
  if (threadIdx.x == 0) codes[f] = best;
  for (int64_t q = threadIdx.x; q < Q; q += blockDim.x) r[q * F + f] -= E[int64_t(best) * Q + q];
}

__global__ void MIMI_BOUNDS(kThreads) rvq_decode_kernel(int64_t Q, int64_t F, int64_t n, const int32_t* codes, Books books, float* y) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= Q * F) return;
  const int64_t q = idx / F, f = idx % F;
  float acc = 0.0f;
  for (int64_t j = 0; j < n; ++j) acc += books.p[j][int64_t(codes[j * F + f]) * Q + q];
  y[idx] = acc;
}

}  // namespace

void rvq_encode(int64_t Q, int64_t F, int64_t bins, int64_t n, const float* x, const float* const* codebooks,
                const float* const* sq_norms, int32_t* codes, float* work) {
  if (F <= 0 || n <= 0) return;
  float* r = work;         // [Q, F]
  float* dot = r + Q * F;  // [bins, F]
  copy2d(r, F, x, F, F, Q);
  for (int64_t j = 0; j < n; ++j) {
    gemm(bins, F, Q, codebooks[j], Q, r, F, dot, F, false);
    MIMI_LAUNCH(rvq_pick_block_kernel, unsigned(F), kThreads, 0, current_stream(), Q, F, bins, dot, codebooks[j],
                sq_norms[j], r, codes + j * F);
    check_launch("rvq_encode (pick)");
  }
}

void rvq_decode(int64_t Q, int64_t F, int64_t bins, int64_t n, const int32_t* codes, const float* const* codebooks,
                float* y) {
  (void)bins;
  if (Q * F <= 0) return;
  MIMI_LAUNCH(rvq_decode_kernel, blocks_for(Q * F), kThreads, 0, current_stream(), Q, F, n, codes, books_arg(codebooks, n), y);
  check_launch("rvq_decode");
}

}  // namespace mimi::gpu
