// GPU GEMM, C[M,N] = A[M,K] * B[K,N] (+ C), row-major with strides (kernels/ops.h).
//   M, N >= 32: the register-tiled kernel of kernels/gpu/gemm_tile.h (64 x 64 block tiles, 4 x 4
//               outputs per thread, double-buffered shared memory), float4 loads on 16-byte
//               aligned rows.
//   otherwise : 16 x 16 tiles, one output per thread (a streaming step's GEMMs have N = 1..8:
//               a 64-wide tile would leave most of its threads idle).
// Both kernels sum every output over k = 0..K-1 in order, one fmaf per term, starting from 0, and
// add C last: an output's value depends only on its row of A and column of B, never on N, on its
// position in the tile grid or on the kernel chosen. So a stream's columns come out the same
// whatever batch they share a GEMM with (issue 14: batched == single on the GPU too).
// linear_gelu and linear_scale_add are the same GEMM with a fused epilogue (gemm_tile.h GeluC,
// ScaleAddC): the formulas of the stand-alone kernels (epilogue.h), so the same bits in one pass.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"
// after vendor.h
#include "kernels/gpu/gemm_tile.h"

namespace mimi::gpu {
namespace {

// ---- small outputs: one output per thread ----

constexpr int kTile = 16;

template <class COp>
__global__ void gemm_small_kernel(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                                  int64_t ldb, COp c) {
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
  if (row < M && col < N) c.store(row, col, acc);
}

// C[M,N] = A * B through the store `c` (plain, or a fused epilogue), on the kernel for the size.
template <class COp>
void gemm_into(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, COp c,
               const char* what) {
  if (M <= 0 || N <= 0) return;
  if (M >= tile::kMinSide && N >= tile::kMinSide) {
    const bool vec_a = tile::aligned16(A, lda), vec_b = tile::aligned16(B, ldb);
    if (vec_a && vec_b) tile::launch(M, N, K, tile::Matrix<true>{A, lda}, tile::Matrix<true>{B, ldb}, c);
    else if (vec_a) tile::launch(M, N, K, tile::Matrix<true>{A, lda}, tile::Matrix<false>{B, ldb}, c);
    else if (vec_b) tile::launch(M, N, K, tile::Matrix<false>{A, lda}, tile::Matrix<true>{B, ldb}, c);
    else tile::launch(M, N, K, tile::Matrix<false>{A, lda}, tile::Matrix<false>{B, ldb}, c);
  } else {
    const dim3 block(kTile, kTile), grid(unsigned((N + kTile - 1) / kTile), unsigned((M + kTile - 1) / kTile));
    const auto small = &gemm_small_kernel<COp>;  // a template-id cannot pass through the launch macro
    MIMI_LAUNCH(small, grid, block, 0, current_stream(), M, N, K, A, lda, B, ldb, c);
  }
  check_launch(what);
}

}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
          int64_t ldc, bool accumulate) {
  gemm_into(M, N, K, A, lda, B, ldb, tile::MatrixC{C, ldc, nullptr, accumulate}, "gemm");
}

void linear_gelu(int64_t in, int64_t out, int64_t T, const float* W, const float* x, float* y) {
  gemm_into(out, T, in, W, in, x, T, tile::GeluC{y, T}, "linear_gelu");
}

void linear_scale_add(int64_t in, int64_t out, int64_t T, const float* W, const float* x, const float* scale,
                      float* y) {
  gemm_into(out, T, in, W, in, x, T, tile::ScaleAddC{y, T, scale}, "linear_scale_add");
}

}  // namespace mimi::gpu
