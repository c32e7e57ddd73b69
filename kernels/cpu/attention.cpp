// CPU sliding-window attention, blocked over queries. For a block of up to kBlock queries of
// one head, the keys any of them can see form one window [j_lo, j_hi) (at most context +
// kBlock - 1 keys); on it:
//   S^T [nk, nq] = K_win^T Q_blk     (GEMM; the channel-major layout is already K^T and Q)
//   mask outside 0 <= i - j < context, softmax down each column (vectorized across queries)
//   O_blk [hd, nq] = V_win P         (GEMM, written straight into the channel-major output)
// Scores never exceed (context + kBlock) x kBlock floats per thread.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/scratch.h"
#include "kernels/ops.h"

namespace mimi::cpu {
namespace {
constexpr int64_t kBlock = 64;
}

void attention(int64_t H, int64_t Tq, int64_t Tk, int64_t hd, int64_t q_start, int64_t k_start,
               int64_t context, float scale, const float* q, const float* k, const float* v,
               float* out) {
  const int64_t blocks = (Tq + kBlock - 1) / kBlock;
  parallel_for(H * blocks, 1, [&](int64_t b, int64_t e) {
    std::vector<float>& st = MIMI_THREAD_SCRATCH(std::vector<float>);
    std::vector<float>& mx = MIMI_THREAD_SCRATCH(std::vector<float>);
    std::vector<float>& sum = MIMI_THREAD_SCRATCH(std::vector<float>);  // grow-only scratch: no allocation in steady state
    mx.resize(kBlock);
    sum.resize(kBlock);
    for (int64_t job = b; job < e; ++job) {
      const int64_t h = job / blocks, i0 = (job % blocks) * kBlock, nq = std::min(kBlock, Tq - i0);
      float* o = out + h * hd * Tq + i0;  // [hd, nq] with row stride Tq
      const int64_t first = q_start + i0, last = q_start + i0 + nq - 1;  // absolute query steps
      const int64_t j_lo = std::max<int64_t>(0, first - context + 1 - k_start);
      const int64_t j_hi = std::min<int64_t>(Tk, last - k_start + 1);
      if (j_hi <= j_lo) {
        for (int64_t d = 0; d < hd; ++d) std::fill(o + d * Tq, o + d * Tq + nq, 0.0f);
        continue;
      }
      const int64_t nk = j_hi - j_lo;
      st.resize(size_t(nk * nq));
      gemm_serial_ta(nk, nq, hd, k + h * hd * Tk + j_lo, Tk, q + h * hd * Tq + i0, Tq, st.data(), nq, false);
      // Softmax down each column (query), rows = keys. Key j is seen by the queries i with
      // 0 <= first + i - kpos < context: one contiguous range per row, so each pass below is a
      // plain loop over i.
      const auto seen_by = [&](int64_t j) {  // [lo, hi): the queries that see key j of the window
        const int64_t kpos = k_start + j_lo + j;
        const int64_t lo = std::clamp<int64_t>(kpos - first, 0, nq);
        return std::pair<int64_t, int64_t>{lo, std::clamp<int64_t>(kpos - first + context, lo, nq)};
      };
      std::fill(mx.begin(), mx.end(), -INFINITY);
      for (int64_t j = 0; j < nk; ++j) {
        float* row = st.data() + j * nq;
        const auto [lo, hi] = seen_by(j);
        std::fill(row, row + lo, -INFINITY);
        for (int64_t i = lo; i < hi; ++i) row[i] *= scale;
        std::fill(row + hi, row + nq, -INFINITY);
        float* m = mx.data();
        for (int64_t i = lo; i < hi; ++i) m[i] = m[i] < row[i] ? row[i] : m[i];
      }
      for (int64_t i = 0; i < nq; ++i)
        if (mx[size_t(i)] == -INFINITY) mx[size_t(i)] = 0.0f;  // sees no key: all weights 0
      std::fill(sum.begin(), sum.end(), 0.0f);
      float* sm = sum.data();
      const float* m = mx.data();
      for (int64_t j = 0; j < nk; ++j) {  // exp(-inf) = 0 outside the row's range: not computed
        float* row = st.data() + j * nq;
        const auto [lo, hi] = seen_by(j);
        std::fill(row, row + lo, 0.0f);
        for (int64_t i = lo; i < hi; ++i) row[i] -= m[i];
        exp_serial(hi - lo, row + lo, row + lo);
        std::fill(row + hi, row + nq, 0.0f);
        for (int64_t i = lo; i < hi; ++i) sm[i] += row[i];
      }
      for (int64_t i = 0; i < nq; ++i) sm[i] = sm[i] > 0.0f ? 1.0f / sm[i] : 0.0f;
      for (int64_t j = 0; j < nk; ++j) {
        float* row = st.data() + j * nq;
        for (int64_t i = 0; i < nq; ++i) row[i] *= sm[i];
      }
      gemm_serial(hd, nq, nk, v + h * hd * Tk + j_lo, Tk, st.data(), nq, o, Tq, false);
    }
  });
}

}  // namespace mimi::cpu
