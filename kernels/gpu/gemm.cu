// GPU GEMM: 16x16 shared-memory tiles, one output per thread. The portable path (HIP has no
// BLAS in Debian): correct first; the tiling is the place to speed up.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"

namespace mimi::gpu {
namespace {

constexpr int kTile = 16;

__global__ void gemm_kernel(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
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
    for (int k = 0; k < kTile; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[row * ldc + col] = accumulate ? C[row * ldc + col] + acc : acc;
}

}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
          int64_t ldc, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  const dim3 block(kTile, kTile), grid(unsigned((N + kTile - 1) / kTile), unsigned((M + kTile - 1) / kTile));
  MIMI_LAUNCH(gemm_kernel, grid, block, 0, 0, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
  check_launch("gemm");
}

}  // namespace mimi::gpu
