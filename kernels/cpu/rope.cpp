// CPU RoPE: the angle table (float32, as the official code computes it) is built once per
// call and shared by all heads.
#include <cmath>
#include <vector>

#include "kernels/cpu/threads.h"
#include "kernels/cpu/scratch.h"
#include "kernels/ops.h"

namespace mimi::cpu {

void rope(int64_t H, int64_t hd, int64_t T, const int32_t* position, float max_period, RopeLayout layout,
          float* x) {
  const int64_t offset = *position;
  const int64_t half = hd / 2;
  const float coef = float(-std::log(double(max_period)) * 2.0 / double(hd));
  std::vector<float>& cos_t = MIMI_THREAD_SCRATCH(std::vector<float>);
  std::vector<float>& sin_t = MIMI_THREAD_SCRATCH(std::vector<float>);  // [hd/2, T], grow-only
  if (cos_t.size() < size_t(half * T)) cos_t.resize(size_t(half * T)), sin_t.resize(size_t(half * T));
  float* cosp = cos_t.data();  // (thread_local: name them here, workers have their own)
  float* sinp = sin_t.data();
  for (int64_t i = 0; i < half; ++i) {
    const float freq = std::exp(float(i) * coef);
    for (int64_t t = 0; t < T; ++t) {
      const float angle = freq * float(offset + t);
      cosp[i * T + t] = std::cos(angle);
      sinp[i * T + t] = std::sin(angle);
    }
  }
  parallel_for(H * half, 8, [&](int64_t b, int64_t e) {
    for (int64_t job = b; job < e; ++job) {
      const int64_t h = job / half, i = job % half;
      const int64_t r0 = h * hd + (layout == RopeLayout::Interleaved ? 2 * i : i);
      const int64_t r1 = h * hd + (layout == RopeLayout::Interleaved ? 2 * i + 1 : i + half);
      float* a = x + r0 * T;
      float* c = x + r1 * T;
      const float* ct = cosp + i * T;
      const float* st = sinp + i * T;
      for (int64_t t = 0; t < T; ++t) {
        const float u = a[t], v = c[t];
        a[t] = u * ct[t] - v * st[t];
        c[t] = u * st[t] + v * ct[t];
      }
    }
  });
}

}  // namespace mimi::cpu
