// GPU GEMM, C[M,N] = A[M,K] * B[K,N] (+ C), row-major with strides (kernels/ops.h).
//   M, N >= 32: register-tiled. A block of 256 threads owns a 64 x 64 tile of C, each thread a
//               4 x 4 sub-tile held in registers (16 FMAs per 8 shared-memory reads instead of
//               1 per 2). K advances 16 at a time through two shared-memory buffers: the next
//               step's global loads are issued before this step's FMAs and stored after them,
//               so their latency hides behind the arithmetic, with one barrier per step. Loads
//               are float4 when rows are 16-byte aligned (lda, ldb multiples of 4, aligned bases).
//   otherwise : 16 x 16 tiles, one output per thread (a streaming step's GEMMs have N = 1..8:
//               a 64-wide tile would leave most of its threads idle).
// Both kernels sum every output over k = 0..K-1 in order, one fmaf per term, starting from 0, and
// add C last: an output's value depends only on its row of A and column of B, never on N, on its
// position in the tile grid or on the kernel chosen. So a stream's columns come out the same
// whatever batch they share a GEMM with (issue 14: batched == single on the GPU too).
#include <cstdint>
#include <cstring>

#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"

namespace mimi::gpu {
namespace {

// ---- small outputs: one output per thread ----

constexpr int kTile = 16;

__global__ void gemm_small_kernel(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                                  int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  __shared__ float As[kTile][kTile];
  __shared__ float Bs[kTile][kTile];
  const int64_t row = int64_t(blockIdx.y) * kTile + threadIdx.y, col = int64_t(blockIdx.x) * kTile + threadIdx.x;
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += kTile) {
    const int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = row < M && ka < K ? A[row * lda + ka] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = kb < K && col < N ? B[kb * ldb + col] : 0.0f;
    __syncthreads();
    const int kn = K - k0 < kTile ? int(K - k0) : kTile;  // no padding terms: the sum is exactly K terms
    for (int k = 0; k < kn; ++k) acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
    __syncthreads();
  }
  if (row < M && col < N) C[row * ldc + col] = accumulate ? C[row * ldc + col] + acc : acc;
}

// ---- large outputs: register tiles, double-buffered shared memory ----

constexpr int kBM = 64, kBN = 64, kBK = 16;  // block tile of C, and K per step
constexpr int kTM = 4, kTN = 4;              // per-thread tile of C
constexpr int kTiledThreads = (kBM / kTM) * (kBN / kTN);
static_assert(kTiledThreads == 256 && kBM * kBK == 4 * kTiledThreads && kBK * kBN == 4 * kTiledThreads,
              "each thread loads one group of 4 floats of A and of B per step");

// 4 consecutive floats from global memory; p is 16-byte aligned (the caller checked)
__device__ __forceinline__ void load4(const float* p, float v[4]) {
#if defined(MIMI_GPU_EMULATE)
  std::memcpy(v, p, 4 * sizeof(float));
#else
  const float4 q = *reinterpret_cast<const float4*>(p);
  v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
#endif
}

// This thread's share of step k0: A[m0 + a_row, k0 + a_col .. +3] and B[k0 + b_row, n0 + b_col .. +3],
// zeros outside the matrices.
template <bool kVec>
__device__ __forceinline__ void fetch_step(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                           const float* B, int64_t ldb, int64_t m0, int64_t n0, int64_t k0,
                                           int a_row, int a_col, int b_row, int b_col, float a[4], float b[4]) {
  const int64_t ar = m0 + a_row, ak = k0 + a_col;
  if (kVec && ar < M && ak + 3 < K) {
    load4(A + ar * lda + ak, a);
  } else {
    for (int i = 0; i < 4; ++i) a[i] = ar < M && ak + i < K ? A[ar * lda + ak + i] : 0.0f;
  }
  const int64_t bk = k0 + b_row, bc = n0 + b_col;
  if (kVec && bk < K && bc + 3 < N) {
    load4(B + bk * ldb + bc, b);
  } else {
    for (int j = 0; j < 4; ++j) b[j] = bk < K && bc + j < N ? B[bk * ldb + bc + j] : 0.0f;
  }
}

template <bool kVec>
__global__ void gemm_tiled_kernel(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                                  int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  __shared__ float As[2][kBK][kBM];  // [buffer][k][m]: A's step transposed, so a thread's 4 rows are adjacent
  __shared__ float Bs[2][kBK][kBN];  // [buffer][k][n]
  const int tid = int(threadIdx.x);
  const int64_t m0 = int64_t(blockIdx.y) * kBM, n0 = int64_t(blockIdx.x) * kBN;
  // loading: 64 rows x 4 groups of A, 16 rows x 16 groups of B (consecutive threads, consecutive addresses)
  const int a_row = tid / (kBK / 4), a_col = (tid % (kBK / 4)) * 4;
  const int b_row = tid / (kBN / 4), b_col = (tid % (kBN / 4)) * 4;
  // computing: rows m0 + ty*4 .. +3, columns n0 + tx*4 .. +3
  const int ty = tid / (kBN / kTN), tx = tid % (kBN / kTN);

  float acc[kTM][kTN];
  for (int i = 0; i < kTM; ++i)
    for (int j = 0; j < kTN; ++j) acc[i][j] = 0.0f;
  float a_next[4], b_next[4];
  const int64_t steps = (K + kBK - 1) / kBK;
  if (steps > 0) {
    fetch_step<kVec>(M, N, K, A, lda, B, ldb, m0, n0, 0, a_row, a_col, b_row, b_col, a_next, b_next);
    for (int i = 0; i < 4; ++i) As[0][a_col + i][a_row] = a_next[i], Bs[0][b_row][b_col + i] = b_next[i];
  }
  __syncthreads();
  for (int64_t s = 0; s < steps; ++s) {
    const int cur = int(s & 1);
    const int64_t k0 = s * kBK;
    if (s + 1 < steps)  // in flight during the FMAs below
      fetch_step<kVec>(M, N, K, A, lda, B, ldb, m0, n0, k0 + kBK, a_row, a_col, b_row, b_col, a_next, b_next);
    const int kn = K - k0 < kBK ? int(K - k0) : kBK;  // no padding terms (see the header)
    for (int k = 0; k < kn; ++k) {
      float a[kTM], b[kTN];
      for (int i = 0; i < kTM; ++i) a[i] = As[cur][k][ty * kTM + i];
      for (int j = 0; j < kTN; ++j) b[j] = Bs[cur][k][tx * kTN + j];
      for (int i = 0; i < kTM; ++i)
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    // The other buffer was last read in step s - 1, which every thread finished before the
    // barrier that ended it: writing it now races with no reader.
    if (s + 1 < steps)
      for (int i = 0; i < 4; ++i) As[1 - cur][a_col + i][a_row] = a_next[i], Bs[1 - cur][b_row][b_col + i] = b_next[i];
    __syncthreads();
  }
  for (int i = 0; i < kTM; ++i) {
    const int64_t row = m0 + ty * kTM + i;
    if (row >= M) break;
    for (int j = 0; j < kTN; ++j) {
      const int64_t col = n0 + tx * kTN + j;
      if (col >= N) break;
      float* c = C + row * ldc + col;
      *c = accumulate ? *c + acc[i][j] : acc[i][j];
    }
  }
}

bool aligned16(const float* p, int64_t ld) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % 4 == 0;
}

}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
          int64_t ldc, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (M >= 32 && N >= 32) {
    const dim3 grid(unsigned((N + kBN - 1) / kBN), unsigned((M + kBM - 1) / kBM));
    if (aligned16(A, lda) && aligned16(B, ldb))
      MIMI_LAUNCH(gemm_tiled_kernel<true>, grid, kTiledThreads, 0, 0, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
    else
      MIMI_LAUNCH(gemm_tiled_kernel<false>, grid, kTiledThreads, 0, 0, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
  } else {
    const dim3 block(kTile, kTile), grid(unsigned((N + kTile - 1) / kTile), unsigned((M + kTile - 1) / kTile));
    MIMI_LAUNCH(gemm_small_kernel, grid, block, 0, 0, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
  }
  check_launch("gemm");
}

}  // namespace mimi::gpu
