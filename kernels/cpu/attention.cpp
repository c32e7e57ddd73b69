// CPU sliding-window attention. Each head's q, k, v are first transposed to token-major
// [T, hd] (contiguous dot products); then every query touches only the keys of its window
// (at most `context`), with scores in a per-thread buffer of that size.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/threads.h"
#include "kernels/ops.h"

namespace mimi::cpu {
namespace {

// src [H*hd, T] -> dst [H, T, hd]
void to_token_major(int64_t H, int64_t T, int64_t hd, const float* src, float* dst) {
  parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t d = 0; d < hd; ++d)
        for (int64_t t = 0; t < T; ++t) dst[(h * T + t) * hd + d] = src[(h * hd + d) * T + t];
  });
}

}  // namespace

void attention(int64_t H, int64_t Tq, int64_t Tk, int64_t hd, int64_t q_start, int64_t k_start,
               int64_t context, float scale, const float* q, const float* k, const float* v,
               float* out) {
  std::vector<float> qt(static_cast<size_t>(H * Tq * hd)), kt(size_t(H * Tk * hd)), vt(size_t(H * Tk * hd));
  to_token_major(H, Tq, hd, q, qt.data());
  to_token_major(H, Tk, hd, k, kt.data());
  to_token_major(H, Tk, hd, v, vt.data());
  parallel_for(H * Tq, 16, [&](int64_t b, int64_t e) {
    std::vector<float> score(static_cast<size_t>(std::min(Tk, context)) + 1), acc(static_cast<size_t>(hd));
    for (int64_t job = b; job < e; ++job) {
      const int64_t h = job / Tq, i = job % Tq;
      const int64_t qpos = q_start + i;
      // keys j with 0 <= qpos - (k_start + j) < context
      const int64_t j_lo = std::max<int64_t>(0, qpos - context + 1 - k_start);
      const int64_t j_hi = std::min<int64_t>(Tk, qpos - k_start + 1);  // exclusive
      std::fill(acc.begin(), acc.end(), 0.0f);
      if (j_hi > j_lo) {
        const float* qi = qt.data() + (h * Tq + i) * hd;
        float mx = -INFINITY;
        for (int64_t j = j_lo; j < j_hi; ++j) {
          const float* kj = kt.data() + (h * Tk + j) * hd;
          float s = 0.0f;
          for (int64_t d = 0; d < hd; ++d) s += qi[d] * kj[d];
          s *= scale;
          score[j - j_lo] = s;
          mx = std::max(mx, s);
        }
        float denom = 0.0f;
        for (int64_t j = j_lo; j < j_hi; ++j) {
          const float p = std::exp(score[j - j_lo] - mx);
          score[j - j_lo] = p;
          denom += p;
        }
        const float inv = 1.0f / denom;
        for (int64_t j = j_lo; j < j_hi; ++j) {
          const float p = score[j - j_lo] * inv;
          const float* vj = vt.data() + (h * Tk + j) * hd;
          for (int64_t d = 0; d < hd; ++d) acc[d] += p * vj[d];
        }
      }
      for (int64_t d = 0; d < hd; ++d) out[(h * hd + d) * Tq + i] = acc[d];
    }
  });
}

}  // namespace mimi::cpu
