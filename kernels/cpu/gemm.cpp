// CPU GEMM: the single-threaded entry points (the chosen ISA's kernels, isa.cpp) and the
// threaded driver.
#include "kernels/cpu/isa.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "kernels/cpu/threads.h"
#include "kernels/cpu/scratch.h"
#include "kernels/ops.h"

namespace mimi::cpu {
namespace {

// 0 = default_num_threads(). Atomic: an engine made on one thread (a Python codec, with the GIL
// released) sets it while another's kernels read it.
std::atomic<int> g_threads{0};

}  // namespace

void set_num_threads(int n) { g_threads = n < 0 ? 0 : n; }

int num_threads() {
  const int t = g_threads.load(std::memory_order_relaxed);
  return t > 0 ? t : default_num_threads();
}

// Single-threaded entry points: the chosen kernel set's functions (isa.cpp), looked up once.
#define MIMI_DISPATCH(fn, params, args) \
  void fn params {                      \
    static const auto f = isa().fn;     \
    f args;                             \
  }
MIMI_DISPATCH(conv_direct_row,
              (int64_t n, int64_t cin, int64_t K, int64_t stride, int64_t dilation, const float* x, int64_t ldx,
               const float* w, float* y),
              (n, cin, K, stride, dilation, x, ldx, w, y))
MIMI_DISPATCH(elu_serial, (int64_t n, const float* x, float* y), (n, x, y))
MIMI_DISPATCH(gelu_serial, (int64_t n, const float* x, float* y), (n, x, y))
MIMI_DISPATCH(exp_serial, (int64_t n, const float* x, float* y), (n, x, y))
MIMI_DISPATCH(rvq_argmin,
              (int64_t n, int64_t bins, const float* rr, const float* dot, int64_t ld, const float* e, int32_t* best),
              (n, bins, rr, dot, ld, e, best))
MIMI_DISPATCH(gemm_serial,
              (int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
               int64_t ldc, bool accumulate),
              (M, N, K, A, lda, B, ldb, C, ldc, accumulate))
MIMI_DISPATCH(gemm_serial_ta,
              (int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
               int64_t ldc, bool accumulate),
              (M, N, K, A, lda, B, ldb, C, ldc, accumulate))
MIMI_DISPATCH(gemm_serial_rows,
              (int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* const* brows, float* C,
               int64_t ldc, bool accumulate),
              (M, N, K, A, lda, brows, C, ldc, accumulate))
#undef MIMI_DISPATCH

void pair_operands(int64_t R, int64_t np, const float* const* rows, float* e, float* d1, float* d3) {
  for (int64_t r = 0; r < R; ++r) {
    const float* p = rows[r];
    if (r + 1 < R) prefetch_span(rows[r + 1] - 1, 2 * np + 2);  // read in place from a long signal
    float *er = e + r * np, *a = d1 + r * np, *c = d3 + r * np;
    for (int64_t u = 0; u < np; ++u) {
      const float xt = p[2 * u];
      er[u] = xt;
      a[u] = p[2 * u - 1] - xt;
      c[u] = p[2 * u + 1] - xt;
    }
  }
}

void gemm_pairs(int64_t M, int64_t np, int64_t K, const float* wsum, int64_t lds, const float* wp, int64_t ldp,
                const float* wn, int64_t ldn, const float* e, const float* d1, const float* d3, float* ze, float* zo) {
  gemm_serial(M, np, K, wsum, lds, e, np, ze, np, false);
  std::copy(ze, ze + M * np, zo);
  gemm_serial(M, np, K, wp, ldp, d1, np, ze, np, true);
  gemm_serial(M, np, K, wn, ldn, d3, np, zo, np, true);
}

namespace {

// Splits the larger of the two output dimensions across threads; each thread runs the
// serial kernel on its slab. Split over M, the slabs share one packing of B.
template <bool TA>
void gemm_threaded(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                   float* C, int64_t ldc, bool accumulate) {
  auto serial = TA ? gemm_serial_ta : gemm_serial;
  if (!TA && N <= 4 && M >= 16) {  // skinny: A streamed once, rows in parallel (same sums as the GEMM)
    static const GemmFn gemv = isa().gemv_rows;
    // chunks of whole 16-row blocks (a multiple of every ISA's row block): only the last is ragged
    parallel_for_even(M, 16, 4, [&](int64_t i0, int64_t i1) {
      gemv(i1 - i0, N, K, A + i0 * lda, lda, B, ldb, C + i0 * ldc, ldc, accumulate);
    });
    return;
  }
  const int64_t flops = 2 * M * N * K;
  if (num_threads() <= 1 || flops < (1 << 20)) {
    serial(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
    return;
  }
  if (N >= M) {
    parallel_for_even(N, 64, 4, [&](int64_t j0, int64_t j1) {
      serial(M, j1 - j0, K, A, lda, B + j0, ldb, C + j0, ldc, accumulate);
    });
  } else {
    // slabs that tile well: a slab of 66 rows at MR 8 (a multiple of AVX2's 6) ran two 5-row
    // tiles each, and the last of 8 slabs was short (1.1x on a 512-row transformer GEMM). With
    // balanced tiles (AVX-512's MR 12) a multiple of 8: 512 rows are 8 slabs of 64, where slabs
    // of whole 12-row tiles (72) gave one thread 288 rows and the other 224.
    const int64_t mr = isa().split_rows;
    if (N <= 4 || M <= mr) {  // skinny (its own unpacked path), or one slab
      parallel_for_even(M, mr, 4, [&](int64_t i0, int64_t i1) {
        serial(i1 - i0, N, K, TA ? A + i0 : A + i0 * lda, lda, B, ldb, C + i0 * ldc, ldc, accumulate);
      });
      return;
    }
    // B packed once, shared by the slabs: each slab packing its own copy cost up to a fifth of a
    // transformer GEMM at 2 threads (N = 128 columns, K = 2048: 1 MB packed per 66-row slab).
    const IsaKernels& pb = isa();
    const int64_t blocks = pb.packed_b_blocks(N, K), block_floats = pb.packed_b_block_floats(N);
    std::vector<float>& bp_store = MIMI_THREAD_SCRATCH(std::vector<float>);  // grow-only
    if (bp_store.size() < size_t(blocks * block_floats)) bp_store.resize(size_t(blocks * block_floats));
    float* bp = bp_store.data();  // (thread_local: named here, workers have their own)
    parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) { pb.gemm_pack_b(N, K, B, ldb, b0, b1, bp); });
    parallel_for_even(M, mr, 4, [&](int64_t i0, int64_t i1) {
      pb.gemm_serial_prepacked(TA, i1 - i0, N, K, TA ? A + i0 : A + i0 * lda, lda, bp, C + i0 * ldc, ldc, accumulate);
    });
  }
}

}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
          float* C, int64_t ldc, bool accumulate) {
  gemm_threaded<false>(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

void gemm_ta(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
             float* C, int64_t ldc, bool accumulate) {
  gemm_threaded<true>(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

}  // namespace mimi::cpu
