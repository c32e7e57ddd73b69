// CPU GEMM: ISA dispatch and the threaded driver.
#include "kernels/cpu/isa.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/threads.h"
#include "kernels/cpu/scratch.h"
#include "kernels/ops.h"

namespace mimi::cpu {
namespace {

using GemmFn = void (*)(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                        float*, int64_t, bool);

enum class Isa { Avx512, Avx2, Base };

Isa best_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
  return Isa::Base;
}

// The widest ISA of this CPU, or a narrower one named by MIMI_CPU_ISA (avx512, avx2, baseline):
// how the AVX2 kernels are measured and tested on an AVX-512 machine. One that the CPU lacks, or
// an unknown name, stops the process: it is never silently replaced. (This runs before main, so
// it cannot throw.)
Isa detect_isa() {
  const Isa best = best_isa();
  const char* want = std::getenv("MIMI_CPU_ISA");
  if (!want || !*want) return best;
  const std::string w = want;
  const Isa asked = w == "avx512" ? Isa::Avx512 : w == "avx2" ? Isa::Avx2 : w == "baseline" ? Isa::Base : best;
  const bool known = w == "avx512" || w == "avx2" || w == "baseline";
  if (!known || int(asked) < int(best)) {  // the enum runs from widest to narrowest
    std::fprintf(stderr, "mimi: error: MIMI_CPU_ISA=%s: %s (avx512, avx2 or baseline, up to what this CPU has)\n",
                 want, known ? "this CPU lacks it" : "unknown ISA");
    std::_Exit(2);  // not exit(): mimi's atexit handler reads any exit() it did not make as a library failing (75)
  }
  return asked;
}

const Isa kIsa = detect_isa();

GemmFn pick_gemm() {
  switch (kIsa) {
    case Isa::Avx512: return isa_avx512::gemm_serial;
    case Isa::Avx2: return isa_avx2::gemm_serial;
    default: return isa_base::gemm_serial;
  }
}

// 0 = default_num_threads(). Atomic: an engine made on one thread (a Python codec, with the GIL
// released) sets it while another's kernels read it.
std::atomic<int> g_threads{0};

}  // namespace

const char* gemm_isa() { return kIsa == Isa::Avx512 ? "avx512" : kIsa == Isa::Avx2 ? "avx2" : "baseline"; }

double measure_peak_gflops(int threads, double seconds) {
  auto loop = kIsa == Isa::Avx512 ? isa_avx512::fma_loop : kIsa == Isa::Avx2 ? isa_avx2::fma_loop : isa_base::fma_loop;
  const int vw = kIsa == Isa::Avx512 ? isa_avx512::vector_width() : kIsa == Isa::Avx2 ? isa_avx2::vector_width()
                                                                                    : isa_base::vector_width();
  int64_t iters = 1 << 20;
  double elapsed = 0;
  volatile float sink = 0;
  for (;;) {  // grow until the timed run is long enough
    const auto t0 = std::chrono::steady_clock::now();
    // one chunk per thread (a worker that wakes late would leave its chunk to another, which
    // halves the figure; the run grows to tens of ms, where a wake-up is lost in the noise)
    std::vector<float> out(size_t(std::max(threads, 1)));
    auto one = [&](int64_t t) { out[size_t(t)] = loop(iters); };
    run_parallel(threads, threads, ChunkFn(one));
    for (float v : out) sink = sink + v;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed > seconds / 4 || iters > (int64_t(1) << 34)) break;
    iters *= 4;
  }
  return double(threads) * double(iters) * 12.0 * vw * 2.0 / elapsed / 1e9;
}

void set_num_threads(int n) { g_threads = n < 0 ? 0 : n; }

int num_threads() {
  const int t = g_threads.load(std::memory_order_relaxed);
  return t > 0 ? t : default_num_threads();
}

#define MIMI_DISPATCH(fn)                                                       \
  void fn(int64_t n, const float* x, float* y) {                                \
    static const auto f = kIsa == Isa::Avx512 ? isa_avx512::fn : kIsa == Isa::Avx2 ? isa_avx2::fn : isa_base::fn; \
    f(n, x, y);                                                                 \
  }
void conv_direct_row(int64_t n, int64_t cin, int64_t K, int64_t stride, int64_t dilation, const float* x,
                     int64_t ldx, const float* w, float* y) {
  static const auto f = kIsa == Isa::Avx512 ? isa_avx512::conv_direct_row
                        : kIsa == Isa::Avx2 ? isa_avx2::conv_direct_row
                                            : isa_base::conv_direct_row;
  f(n, cin, K, stride, dilation, x, ldx, w, y);
}

MIMI_DISPATCH(elu_serial)
MIMI_DISPATCH(gelu_serial)
MIMI_DISPATCH(exp_serial)
#undef MIMI_DISPATCH

void rvq_argmin(int64_t n, int64_t bins, const float* rr, const float* dot, int64_t ld, const float* e, int32_t* best) {
  static const auto f = kIsa == Isa::Avx512 ? isa_avx512::rvq_argmin
                        : kIsa == Isa::Avx2 ? isa_avx2::rvq_argmin
                                            : isa_base::rvq_argmin;
  f(n, bins, rr, dot, ld, e, best);
}

void gemm_serial(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  static const GemmFn fn = pick_gemm();
  fn(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

void gemm_serial_ta(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                    int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  static const GemmFn fn = kIsa == Isa::Avx512 ? isa_avx512::gemm_serial_ta
                           : kIsa == Isa::Avx2 ? isa_avx2::gemm_serial_ta
                                               : isa_base::gemm_serial_ta;
  fn(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

void gemm_serial_rows(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* const* brows,
                      float* C, int64_t ldc, bool accumulate) {
  static const auto fn = kIsa == Isa::Avx512 ? isa_avx512::gemm_serial_rows
                         : kIsa == Isa::Avx2 ? isa_avx2::gemm_serial_rows
                                             : isa_base::gemm_serial_rows;
  fn(M, N, K, A, lda, brows, C, ldc, accumulate);
}

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

struct PackedB {
  int64_t (*blocks)(int64_t, int64_t);
  int64_t (*block_floats)(int64_t N);
  void (*pack)(int64_t, int64_t, const float*, int64_t, int64_t, int64_t, float*);
  void (*gemm)(bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, float*, int64_t, bool);
};
const PackedB& packed_b_fns() {
#define MIMI_PACKED_B(ns)                                                                                        \
  PackedB {                                                                                                      \
    .blocks = ns::packed_b_blocks, .block_floats = ns::packed_b_block_floats, .pack = ns::gemm_pack_b,           \
    .gemm = ns::gemm_serial_prepacked                                                                            \
  }
  static const PackedB fns = kIsa == Isa::Avx512 ? MIMI_PACKED_B(isa_avx512)
                             : kIsa == Isa::Avx2 ? MIMI_PACKED_B(isa_avx2)
                                                 : MIMI_PACKED_B(isa_base);
#undef MIMI_PACKED_B
  return fns;
}

// Splits the larger of the two output dimensions across threads; each thread runs the
// serial kernel on its slab. Split over M, the slabs share one packing of B.
template <bool TA>
void gemm_threaded(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                   float* C, int64_t ldc, bool accumulate) {
  auto serial = TA ? gemm_serial_ta : gemm_serial;
  if (!TA && N <= 4 && M >= 16) {  // skinny: A streamed once, rows in parallel (same sums as the GEMM)
    static const GemmFn gemv = kIsa == Isa::Avx512 ? isa_avx512::gemv_rows
                               : kIsa == Isa::Avx2 ? isa_avx2::gemv_rows
                                                   : isa_base::gemv_rows;
    // chunks of whole 16-row blocks (a multiple of every ISA's row block): only the last is ragged
    const int64_t grain = std::max<int64_t>(16, (M / (4 * num_threads()) + 15) / 16 * 16);
    parallel_for(M, grain, [&](int64_t i0, int64_t i1) {
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
    const int64_t grain = std::max<int64_t>(64, (N / (4 * num_threads()) + 63) / 64 * 64);
    parallel_for(N, grain, [&](int64_t j0, int64_t j1) {
      serial(M, j1 - j0, K, A, lda, B + j0, ldb, C + j0, ldc, accumulate);
    });
  } else {
    const int64_t grain = std::max<int64_t>(6, (M / (4 * num_threads()) + 5) / 6 * 6);
    if (N <= 4 || grain >= M) {  // skinny (its own unpacked path), or one slab
      parallel_for(M, grain, [&](int64_t i0, int64_t i1) {
        serial(i1 - i0, N, K, TA ? A + i0 : A + i0 * lda, lda, B, ldb, C + i0 * ldc, ldc, accumulate);
      });
      return;
    }
    // B packed once, shared by the slabs: each slab packing its own copy cost up to a fifth of a
    // transformer GEMM at 2 threads (N = 128 columns, K = 2048: 1 MB packed per 66-row slab).
    const PackedB& pb = packed_b_fns();
    const int64_t blocks = pb.blocks(N, K), block_floats = pb.block_floats(N);
    std::vector<float>& bp_store = MIMI_THREAD_SCRATCH(std::vector<float>);  // grow-only
    if (bp_store.size() < size_t(blocks * block_floats)) bp_store.resize(size_t(blocks * block_floats));
    float* bp = bp_store.data();  // (thread_local: named here, workers have their own)
    parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) { pb.pack(N, K, B, ldb, b0, b1, bp); });
    parallel_for(M, grain, [&](int64_t i0, int64_t i1) {
      pb.gemm(TA, i1 - i0, N, K, TA ? A + i0 : A + i0 * lda, lda, bp, C + i0 * ldc, ldc, accumulate);
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
