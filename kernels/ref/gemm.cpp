// Naive reference: triple loop, double accumulation.
#include "kernels/ops.h"

namespace mimi::ref {

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
          float* C, int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = accumulate ? C[i * ldc + j] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += double(A[i * lda + k]) * double(B[k * ldb + j]);
      C[i * ldc + j] = float(acc);
    }
}

}  // namespace mimi::ref
