// Naive reference sliding-window attention: every (query, key) pair tested against the window.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops.h"

namespace mimi::ref {

void attention(int64_t H, int64_t Tq, int64_t Tk, int64_t hd, int64_t q_start, int64_t k_start,
               int64_t context, float scale, const float* q, const float* k, const float* v,
               float* out) {
  std::vector<double> score(static_cast<size_t>(Tk));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < Tq; ++i) {
            double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < Tk; ++j) {
        const int64_t dist = (q_start + i) - (k_start + j);
        if (dist < 0 || dist >= context) {
          score[j] = -std::numeric_limits<double>::infinity();
          continue;
        }
        double s = 0.0;
        for (int64_t d = 0; d < hd; ++d)
          s += double(q[(h * hd + d) * Tq + i]) * double(k[(h * hd + d) * Tk + j]);
        score[j] = s * scale;
        if (score[j] > mx) mx = score[j];
      }
      for (int64_t d = 0; d < hd; ++d) out[(h * hd + d) * Tq + i] = 0.0f;
      if (mx == -std::numeric_limits<double>::infinity()) continue;  // sees no key
      double denom = 0.0;
      for (int64_t j = 0; j < Tk; ++j) denom += std::exp(score[j] - mx);
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0.0;
        for (int64_t j = 0; j < Tk; ++j)
          acc += std::exp(score[j] - mx) / denom * double(v[(h * hd + d) * Tk + j]);
        out[(h * hd + d) * Tq + i] = float(acc);
      }
    }
}

}  // namespace mimi::ref
