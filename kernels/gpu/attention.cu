// GPU sliding-window attention: one block per (head, query). The block's threads score the
// keys of the window (at most `context`, kept in dynamic shared memory), reduce max and sum
// through shared memory, then each thread owns output features. No T x T matrix anywhere.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"

#include <algorithm>

namespace mimi::gpu {
namespace {

__global__ void attention_kernel(int64_t H, int64_t Tq, int64_t Tk, int64_t hd, int64_t q_start, int64_t k_start,
                                 int64_t context, float scale, const float* q, const float* k, const float* v,
                                 float* out) {
  MIMI_DYNAMIC_SHARED(float, sh);  // [window] scores, then [blockDim] reduction scratch
  const int64_t h = blockIdx.y, i = blockIdx.x;
  const int64_t qpos = q_start + i;
  const int64_t j_lo = max(int64_t(0), qpos - context + 1 - k_start), j_hi = min(Tk, qpos - k_start + 1);
  const int64_t n = j_hi > j_lo ? j_hi - j_lo : 0;
  float* score = sh;
  float* red = sh + max(n, int64_t(1));
  float local_max = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float s = 0.0f;
    for (int64_t d = 0; d < hd; ++d) s += q[(h * hd + d) * Tq + i] * k[(h * hd + d) * Tk + j_lo + j];
    s *= scale;
    score[j] = s;
    local_max = fmaxf(local_max, s);
  }
  red[threadIdx.x] = local_max;
  __syncthreads();
  for (unsigned st = blockDim.x / 2; st > 0; st >>= 1) {
    if (threadIdx.x < st) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + st]);
    __syncthreads();
  }
  const float mx = red[0];
  __syncthreads();
  float local_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    score[j] = expf(score[j] - mx);
    local_sum += score[j];
  }
  red[threadIdx.x] = local_sum;
  __syncthreads();
  for (unsigned st = blockDim.x / 2; st > 0; st >>= 1) {
    if (threadIdx.x < st) red[threadIdx.x] += red[threadIdx.x + st];
    __syncthreads();
  }
  const float inv = n > 0 ? 1.0f / red[0] : 0.0f;
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j) acc += score[j] * v[(h * hd + d) * Tk + j_lo + j];
    out[(h * hd + d) * Tq + i] = acc * inv;
  }
}

}  // namespace

void attention(int64_t H, int64_t Tq, int64_t Tk, int64_t hd, int64_t q_start, int64_t k_start, int64_t context,
               float scale, const float* q, const float* k, const float* v, float* out) {
  if (H <= 0 || Tq <= 0) return;
  const int64_t window = std::max<int64_t>(1, std::min(Tk, context));
  const size_t shared = size_t(window + kThreads) * sizeof(float);
  MIMI_LAUNCH(attention_kernel, dim3(unsigned(Tq), unsigned(H)), kThreads, shared, 0, H, Tq, Tk, hd, q_start, k_start,
              context, scale, q, k, v, out);
  check_launch("attention");
}

}  // namespace mimi::gpu
