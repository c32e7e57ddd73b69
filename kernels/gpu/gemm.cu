// GPU GEMM, C[M,N] = A[M,K] * B[K,N] (+ C), row-major with strides (kernels/ops.h).
//   M, N >= 32: the register-tiled kernel of kernels/gpu/gemm_tile.h (64 x 64 block tiles, 4 x 4
//               outputs per thread, double-buffered shared memory), float4 loads on 16-byte
//               aligned rows.
//   N < 32    : split K (a streaming step's GEMMs have N = 1..8): a warp per row, its lanes over
//               the chunks of 32 k, the chunk sums added in order (gemm_splitk_kernel).
//   otherwise : (M < 32) 16 x 16 tiles, one output per thread. All three in gemm_tile.h.
// All sum every output in the GPU backend's one order (gemm_tile.h: chunks of 32 consecutive k,
// each from 0 with fmaf, the chunk sums added in order) and add C last: an output's value depends
// only on its row of A and column of B, never on N, on its position in the tile grid or on the
// kernel chosen. So a stream's columns come out the same whatever batch they share a GEMM with
// (issue 14: batched == single on the GPU too).
// linear_gelu and linear_scale_add are the same GEMM with a fused epilogue (gemm_tile.h GeluC,
// ScaleAddC): the formulas of the stand-alone kernels (epilogue.h), so the same bits in one pass.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"
// after vendor.h
#include "kernels/gpu/gemm_tile.h"

namespace mimi::gpu {
namespace {

// C = A * B through the store `c` (plain, or a fused epilogue): B's rows read 4 at a time where
// they are 16-byte aligned.
template <class COp>
void gemm_into(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, COp c,
               const char* what) {
  if (tile::aligned16(B, ldb)) tile::gemm_with(M, N, K, A, lda, tile::Matrix<true>{B, ldb}, c);
  else tile::gemm_with(M, N, K, A, lda, tile::Matrix<false>{B, ldb}, c);
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
