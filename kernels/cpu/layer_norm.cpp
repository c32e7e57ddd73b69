// CPU LayerNorm over channels of a [C, T] signal. The channel loop is outermost so the inner
// loop runs along contiguous time steps (vectorizes); statistics are two-pass in float.
#include <cmath>
#include <vector>

#include "kernels/cpu/threads.h"
#include "kernels/cpu/scratch.h"
#include "kernels/ops.h"

namespace mimi::cpu {

void layer_norm(int64_t C, int64_t T, const float* x, const float* gamma, const float* beta,
                float eps, float* y) {
  parallel_for(T, 64, [&](int64_t t0, int64_t t1) {
    const int64_t n = t1 - t0;
    std::vector<float>& mean = MIMI_THREAD_SCRATCH(std::vector<float>);
    std::vector<float>& rstd = MIMI_THREAD_SCRATCH(std::vector<float>);  // grow-only
    mean.assign(size_t(n), 0.0f);
    rstd.assign(size_t(n), 0.0f);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < n; ++t) mean[t] += x[c * T + t0 + t];
    for (int64_t t = 0; t < n; ++t) mean[t] /= float(C);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < n; ++t) {
        const float d = x[c * T + t0 + t] - mean[t];
        rstd[t] += d * d;
      }
    for (int64_t t = 0; t < n; ++t) rstd[t] = 1.0f / std::sqrt(rstd[t] / float(C) + eps);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < n; ++t)
        y[c * T + t0 + t] = (x[c * T + t0 + t] - mean[t]) * rstd[t] * gamma[c] + beta[c];
  });
}

}  // namespace mimi::cpu
