// CPU kernel internals shared by the CPU kernels (not part of the public op contract): the GEMM
// entry points and the per-ISA micro-kernel and elementwise tables.
#pragma once

#include <cstdint>

namespace mimi::cpu {

// Single-threaded C[M,N] = A[M,K] * B[K,N] (+ C if accumulate), row-major with strides.
// Dispatches once, by CPU features, to an AVX-512, AVX2+FMA or baseline micro-kernel.
void gemm_serial(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* C, int64_t ldc, bool accumulate);

// The same with A stored transposed: A(i, k) = A[k*lda + i] (A is K x M in memory).
void gemm_serial_ta(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                    int64_t ldb, float* C, int64_t ldc, bool accumulate);
// The same with B given by row pointers: B[k, 0:N] = brows[k][0:N]. A conv's B operand (im2col)
// is rows of its input window at shifted offsets, so this packs straight from the window.
void gemm_serial_rows(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* const* brows,
                      float* C, int64_t ldc, bool accumulate);
// Threaded versions (split over the larger output dimension).
void gemm_ta(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
             float* C, int64_t ldc, bool accumulate);

// Karatsuba output pairs of a two-tap product Z[t] = Wp X[t-1] + Wn X[t] (conv1d's strided
// downsamples, conv_transpose1d's polyphase upsamples): for t even, with m2 = (Wp + Wn) X[t],
//   Z[t] = m2 + Wp (X[t-1] - X[t]),   Z[t+1] = m2 + Wn (X[t+1] - X[t]),
// three products instead of four. pair_operands builds the B operands from R rows, row r's
// X[t] at rows[r][2u] (its neighbours at 2u - 1 and 2u + 1 readable): e = X[t], d1 = X[t-1] -
// X[t], d3 = X[t+1] - X[t], each [R, np]. gemm_pairs then gives ze = Z[t], zo = Z[t+1], [M, np]
// each (single-threaded; wsum = Wp + Wn).
void pair_operands(int64_t R, int64_t np, const float* const* rows, float* e, float* d1, float* d3);
void gemm_pairs(int64_t M, int64_t np, int64_t K, const float* wsum, int64_t lds, const float* wp, int64_t ldp,
                const float* wn, int64_t ldn, const float* e, const float* d1, const float* d3, float* ze, float* zo);

// y[0:n] += sum_(ci,k) w[ci*K + k] * x[ci*ldx + j*stride + k*dilation] (unpadded input).
void conv_direct_row(int64_t n, int64_t cin, int64_t K, int64_t stride, int64_t dilation, const float* x,
                     int64_t ldx, const float* w, float* y);

// Vectorized elementwise math, single-threaded, dispatched like the GEMM.
void elu_serial(int64_t n, const float* x, float* y);
void gelu_serial(int64_t n, const float* x, float* y);
void exp_serial(int64_t n, const float* x, float* y);
// rvq_encode's nearest entry for n columns: best[f] = argmin over b < bins of
// d = sqrt(max(0, rr[f] - 2 dot[b*ld + f] + e[b])), ties to the lowest b. The same bits as the
// scalar expression (2 dot is exact, so a fused multiply-add rounds alike; sqrt is exact in
// every ISA).
void rvq_argmin(int64_t n, int64_t bins, const float* rr, const float* dot, int64_t ld, const float* e, int32_t* best);

// Asks for n floats from p into the cache, one request per 64-byte line: a row segment of a long
// signal that the next step reads, short enough that the hardware prefetcher would catch its
// stream only part way.
inline void prefetch_span(const float* p, int64_t n) {
  for (int64_t j = 0; j < n; j += 16) __builtin_prefetch(p + j);
}

// Measured float32 FMA peak of this machine with `threads` threads (GFLOP/s), using the
// widest vector unit the GEMM dispatch picks. Takes about `seconds`.
double measure_peak_gflops(int threads, double seconds = 0.3);
// The name of the kernel set in use ("avx512", "avx2", "baseline", "neon"): IsaKernels::name.
const char* gemm_isa();

// One instruction set's kernels (kernels/cpu/gemm_isa.inc and elementwise_isa.inc compiled once
// per ISA, each file with its own -m flags from CMake). gemv_rows is the skinny (N <= 4)
// product behind gemm(): same arguments as gemm_serial and the same sums, bit for bit, so that
// a column never depends on N (ops.h, column invariance). The packed_b / gemm_pack_b /
// gemm_serial_prepacked trio lets threads share one packing of B (gemm.cpp).
using GemmFn = void (*)(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t,
                        bool);
using MapFn = void (*)(int64_t, const float*, float*);
struct IsaKernels {
  const char* name;  // as MIMI_CPU_ISA names it
  int vector_width;  // floats per vector register
  int split_rows;    // the threaded GEMM's row slabs go by multiples of it: the micro-kernel's
                     // rows (MR), or 8 where its row tiles are balanced (any multiple of 8 rows
                     // then tiles at 8..MR rows)
  GemmFn gemm_serial, gemm_serial_ta, gemv_rows;
  void (*gemm_serial_rows)(int64_t, int64_t, int64_t, const float*, int64_t, const float* const*, float*, int64_t,
                           bool);
  void (*conv_direct_row)(int64_t, int64_t, int64_t, int64_t, int64_t, const float*, int64_t, const float*, float*);
  MapFn elu_serial, gelu_serial, exp_serial;
  void (*rvq_argmin)(int64_t, int64_t, const float*, const float*, int64_t, const float*, int32_t*);
  int64_t (*packed_b_blocks)(int64_t N, int64_t K);
  int64_t (*packed_b_block_floats)(int64_t N);
  void (*gemm_pack_b)(int64_t, int64_t, const float*, int64_t, int64_t, int64_t, float*);
  void (*gemm_serial_prepacked)(bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, float*, int64_t,
                                bool);
  float (*fma_loop)(int64_t iters);  // iters x 12 independent vector FMAs (the peak measurement)
};

// Every kernel set this build has, widest first, with whether this CPU can run it
// (kernels/cpu/isa.cpp). x86-64: avx512, avx2, baseline; aarch64: neon.
struct IsaChoice {
  const IsaKernels* kernels;
  bool runs_here;
};
int isa_choices(const IsaChoice** list);
// The set in use: the widest this CPU runs, or the one MIMI_CPU_ISA names.
const IsaKernels& isa();

#if defined(__x86_64__) || defined(__i386__)
#define MIMI_ISA_NAMESPACES(X) X(isa_avx512) X(isa_avx2) X(isa_base)
#elif defined(__aarch64__)
#define MIMI_ISA_NAMESPACES(X) X(isa_neon)
#else
#define MIMI_ISA_NAMESPACES(X) X(isa_base)
#endif
#define MIMI_ISA_DECLARE(ns) \
  namespace ns {             \
  extern const IsaKernels kernels; \
  }
MIMI_ISA_NAMESPACES(MIMI_ISA_DECLARE)
#undef MIMI_ISA_DECLARE

}  // namespace mimi::cpu
