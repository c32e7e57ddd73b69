// CPU GEMM internals shared by the CPU kernels (not part of the public op contract).
#pragma once

#include <cstdint>

namespace mimi::cpu {

// Single-threaded C[M,N] = A[M,K] * B[K,N] (+ C if accumulate), row-major with strides.
// Dispatches once, by CPU features, to an AVX-512, AVX2+FMA or baseline micro-kernel.
void gemm_serial(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* C, int64_t ldc, bool accumulate);

// The per-ISA entry points (kernels/cpu/gemm_isa.inc compiled three times).
namespace isa_avx512 {
void gemm_serial(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*,
                 int64_t, bool);
}
namespace isa_avx2 {
void gemm_serial(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*,
                 int64_t, bool);
}
namespace isa_base {
void gemm_serial(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*,
                 int64_t, bool);
}

}  // namespace mimi::cpu
