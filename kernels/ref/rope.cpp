// Naive reference RoPE. Angles are computed in float32 exactly as the official
// moshi apply_rope does (freqs = exp(i * (-ln(max_period) * 2 / hd)), ts = *position + t).
#include <cmath>

#include "kernels/ops.h"

namespace mimi::ref {

void rope(int64_t H, int64_t hd, int64_t T, const int32_t* position, float max_period, RopeLayout layout,
          float* x) {
  const int64_t offset = *position;
  const float coef = float(-std::log(double(max_period)) * 2.0 / double(hd));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < hd / 2; ++i) {
      const float freq = std::exp(float(i) * coef);
      const int64_t r0 = h * hd + (layout == RopeLayout::Interleaved ? 2 * i : i);
      const int64_t r1 = h * hd + (layout == RopeLayout::Interleaved ? 2 * i + 1 : i + hd / 2);
      for (int64_t t = 0; t < T; ++t) {
        const float angle = freq * float(offset + t);
        const float c = std::cos(angle), s = std::sin(angle);
        const float a = x[r0 * T + t], b = x[r1 * T + t];
        x[r0 * T + t] = a * c - b * s;
        x[r1 * T + t] = a * s + b * c;
      }
    }
}

}  // namespace mimi::ref
