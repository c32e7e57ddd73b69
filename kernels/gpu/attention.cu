// GPU sliding-window attention (kernels/ops.h). No Tq x Tk matrix anywhere.
//   head_dim 64 (Mimi): one block per (head, 64 queries), one thread per query holding its q and
//               its output row in registers. The window's keys and values pass through shared
//               memory in tiles of 32 keys (each loaded once per block, coalesced, read by all
//               threads as broadcasts), with an online softmax: each key of the query's window, in
//               order, is one update (the running sum and output rescaled when the max grows).
//               So a query's output depends only on its window, not on the other queries or
//               keys of the call: bitwise the same streaming (2 queries against the cached
//               window) and offline (test).
//   otherwise : one block per (head, query), scores in dynamic shared memory, block reductions.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"

#include <algorithm>

namespace mimi::gpu {
namespace {

__global__ void MIMI_BOUNDS(kThreads) attention_kernel(int64_t H, int64_t Tq, int64_t Tk, int64_t hd, int64_t q_start, int64_t k_start,
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

constexpr int kQueries = 64;  // per block, one thread each
constexpr int kKeys = 32;     // per shared-memory tile

template <int HD>
__global__ void MIMI_BOUNDS(kQueries) attention_tiled_kernel(int64_t Tq, int64_t Tk, int64_t q_start, int64_t k_start, int64_t context,
                                       float scale, const float* q, const float* k, const float* v, float* out) {
  __shared__ float Ks[kKeys][HD + 1];  // [key][d], padded: the loads write a column of keys without bank conflicts
  __shared__ float Vs[kKeys][HD + 1];
  const int64_t h = blockIdx.y, i0 = int64_t(blockIdx.x) * kQueries, i = i0 + threadIdx.x;
  const bool active = i < Tq;
  // this query's keys [lo, hi) as indices into k, and the block's union [blo, bhi)
  const int64_t qpos = q_start + i, i_last = min(i0 + kQueries, Tq) - 1;
  const int64_t lo = active ? max(int64_t(0), qpos - context + 1 - k_start) : 0;
  const int64_t hi = active ? min(Tk, qpos - k_start + 1) : 0;
  const int64_t blo = max(int64_t(0), q_start + i0 - context + 1 - k_start);
  const int64_t bhi = min(Tk, q_start + i_last - k_start + 1);
  float qv[HD], o[HD];
  for (int d = 0; d < HD; ++d) qv[d] = active ? q[(h * HD + d) * Tq + i] : 0.0f, o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j0 = blo; j0 < bhi; j0 += kKeys) {
    for (int e = int(threadIdx.x); e < kKeys * HD; e += int(blockDim.x)) {
      const int kk = e % kKeys, d = e / kKeys;  // consecutive threads, consecutive keys
      const int64_t j = j0 + kk;
      const bool in = j >= blo && j < bhi;
      Ks[kk][d] = in ? k[(h * HD + d) * Tk + j] : 0.0f;
      Vs[kk][d] = in ? v[(h * HD + d) * Tk + j] : 0.0f;
    }
    __syncthreads();
    const int64_t ka = max(lo, j0) - j0, kb = min(hi, j0 + kKeys) - j0;  // this query's keys in the tile
    for (int kk = 0; kk < kKeys; ++kk) {
      if (kk < ka || kk >= kb) continue;  // a key outside this query's window adds no term at all
      float acc = 0.0f;
      for (int d = 0; d < HD; ++d) acc = fmaf(qv[d], Ks[kk][d], acc);
      const float sc = acc * scale;
      if (sc > m) {  // a new running max: rescale what was summed so far (the first key: by 0)
        const float corr = expf(m - sc);
        l *= corr;
        for (int d = 0; d < HD; ++d) o[d] *= corr;
        m = sc;
      }
      const float p = expf(sc - m);
      l += p;
      for (int d = 0; d < HD; ++d) o[d] = fmaf(p, Vs[kk][d], o[d]);
    }
    __syncthreads();
  }
  if (active) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < HD; ++d) out[(h * HD + d) * Tq + i] = o[d] * inv;
  }
}

}  // namespace

void attention(int64_t H, int64_t Tq, int64_t Tk, int64_t hd, int64_t q_start, int64_t k_start, int64_t context,
               float scale, const float* q, const float* k, const float* v, float* out) {
  if (H <= 0 || Tq <= 0) return;
  if (hd == 64) {
    const dim3 grid(unsigned((Tq + kQueries - 1) / kQueries), unsigned(H));
    MIMI_LAUNCH(attention_tiled_kernel<64>, grid, kQueries, 0, current_stream(), Tq, Tk, q_start, k_start, context, scale, q, k, v,
                out);
    check_launch("attention");
    return;
  }
  const int64_t window = std::max<int64_t>(1, std::min(Tk, context));
  const size_t shared = size_t(window + kThreads) * sizeof(float);
  MIMI_LAUNCH(attention_kernel, dim3(unsigned(Tq), unsigned(H)), kThreads, shared, current_stream(), H, Tq, Tk, hd, q_start, k_start,
              context, scale, q, k, v, out);
  check_launch("attention");
}

}  // namespace mimi::gpu
