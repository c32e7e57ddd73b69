// GPU sliding-window attention (kernels/ops.h), and its windowed form over every slot's key/value
// ring (attention_window, kernels/gpu/ops.h). No Tq x Tk matrix anywhere.
//   head_dim 64 (Mimi): one block per (head, 64 queries), one thread per query holding its q and
//               its output row in registers. The window's keys and values pass through shared
//               memory in tiles of 32 keys (each loaded once per block, coalesced, read by all
//               threads as broadcasts), with an online softmax: each key of the query's window, in
//               order, is one update (the running sum and output rescaled when the max grows).
//               So a query's output depends only on its window, not on the other queries or
//               keys of the call: bitwise the same streaming (2 queries against the cached
//               window) and offline (test).
//   otherwise : one block per (head, query), scores in dynamic shared memory, block reductions.
// Both kernels are written once over a Source (and with explicit fmaf: no compiler contracts the
// two instantiations differently): where a block's queries, keys and output are.
// Plain: one stream's q [H*hd, Tq] against k, v [H*hd, Tk]. Ring: segment blockIdx.z of a
// batched step, its queries in columns of q [H*hd, Tt] and its slot's keys in a ring (the key of
// absolute position p in column p mod R). A query's keys are visited in the same order from
// the same values either way, so attention_window gives attention()'s bits.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"

#include <algorithm>
#include <string>

namespace mimi::gpu {
namespace {

// Key positions are relative to k's first column (k_start is folded into the query positions).
struct Plain {
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  float* out = nullptr;
  int64_t Tq = 0, Tk = 0, q_start = 0;  // q_start: query 0's position minus key 0's
  __device__ __forceinline__ bool open() { return true; }
  __device__ __forceinline__ int64_t queries() const { return Tq; }
  __device__ __forceinline__ int64_t first_query() const { return q_start; }
  __device__ __forceinline__ int64_t keys_end() const { return Tk; }  // keys [0, Tk)
  __device__ __forceinline__ float qv(int64_t row, int64_t i) const { return q[row * Tq + i]; }
  __device__ __forceinline__ float key(int64_t row, int64_t j) const { return k[row * Tk + j]; }
  __device__ __forceinline__ float value(int64_t row, int64_t j) const { return v[row * Tk + j]; }
  __device__ __forceinline__ void store(int64_t row, int64_t i, float x) const { out[row * Tq + i] = x; }
};

// Absolute positions; every key up to the segment's last query has been appended (rope_append).
struct Ring {
  const WindowSegment* segs = nullptr;
  const float *q = nullptr, *rk = nullptr, *rv = nullptr;
  float* out = nullptr;
  int64_t D = 0, Tt = 0, R = 1;
  int64_t off = 0, len = 0, pos = 0;
  const float *k = nullptr, *v = nullptr;
  __device__ __forceinline__ bool open() {  // this block's segment
    const WindowSegment s = segs[blockIdx.z];
    off = s.offset, len = s.length, pos = s.position;
    k = rk + int64_t(s.slot) * D * R;
    v = rv + int64_t(s.slot) * D * R;
    return true;
  }
  __device__ __forceinline__ int64_t queries() const { return len; }
  __device__ __forceinline__ int64_t first_query() const { return pos; }
  __device__ __forceinline__ int64_t keys_end() const { return pos + len; }
  __device__ __forceinline__ float qv(int64_t row, int64_t i) const { return q[row * Tt + off + i]; }
  // positions are below 2^31 (codec/plan_flight.cpp): a 32-bit remainder
  __device__ __forceinline__ int64_t col(int64_t j) const { return int64_t(uint32_t(j) % uint32_t(R)); }
  __device__ __forceinline__ float key(int64_t row, int64_t j) const { return k[row * R + col(j)]; }
  __device__ __forceinline__ float value(int64_t row, int64_t j) const { return v[row * R + col(j)]; }
  __device__ __forceinline__ void store(int64_t row, int64_t i, float x) const { out[row * Tt + off + i] = x; }
};

template <class Source>
__global__ void MIMI_BOUNDS(kThreads) attention_kernel(Source src, int64_t hd, int64_t context, float scale) {
  MIMI_DYNAMIC_SHARED(float, sh);  // [window] scores, then [blockDim] reduction scratch
  src.open();
  const int64_t h = blockIdx.y, i = blockIdx.x;
  if (i >= src.queries()) return;  // the whole block: a segment shorter than the grid
  const int64_t qpos = src.first_query() + i;
  const int64_t j_lo = max(int64_t(0), qpos - context + 1), j_hi = min(src.keys_end(), qpos + 1);
  const int64_t n = j_hi > j_lo ? j_hi - j_lo : 0;
  float* score = sh;
  float* red = sh + max(n, int64_t(1));
  float local_max = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float s = 0.0f;
    for (int64_t d = 0; d < hd; ++d) s = fmaf(src.qv(h * hd + d, i), src.key(h * hd + d, j_lo + j), s);
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
    for (int64_t j = 0; j < n; ++j) acc = fmaf(score[j], src.value(h * hd + d, j_lo + j), acc);
    src.store(h * hd + d, i, acc * inv);
  }
}

constexpr int kQueries = 64;  // per block, one thread each
constexpr int kKeys = 32;     // per shared-memory tile

template <int HD, class Source>
__global__ void MIMI_BOUNDS(kQueries) attention_tiled_kernel(Source src, int64_t context, float scale) {
  __shared__ float Ks[kKeys][HD + 1];  // [key][d], padded: the loads write a column of keys without bank conflicts
  __shared__ float Vs[kKeys][HD + 1];
  src.open();
  const int64_t Tq = src.queries(), q0 = src.first_query(), kend = src.keys_end();
  const int64_t h = blockIdx.y, i0 = int64_t(blockIdx.x) * kQueries, i = i0 + threadIdx.x;
  if (i0 >= Tq) return;  // the whole block: a segment shorter than the grid
  const bool active = i < Tq;
  // this query's keys [lo, hi), and the block's union [blo, bhi)
  const int64_t qpos = q0 + i, i_last = min(i0 + kQueries, Tq) - 1;
  const int64_t lo = active ? max(int64_t(0), qpos - context + 1) : 0;
  const int64_t hi = active ? min(kend, qpos + 1) : 0;
  const int64_t blo = max(int64_t(0), q0 + i0 - context + 1);
  const int64_t bhi = min(kend, q0 + i_last + 1);
  float qv[HD], o[HD];
  for (int d = 0; d < HD; ++d) qv[d] = active ? src.qv(h * HD + d, i) : 0.0f, o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j0 = blo; j0 < bhi; j0 += kKeys) {
    for (int e = int(threadIdx.x); e < kKeys * HD; e += int(blockDim.x)) {
      const int kk = e % kKeys, d = e / kKeys;  // consecutive threads, consecutive keys
      const int64_t j = j0 + kk;
      const bool in = j >= blo && j < bhi;
      Ks[kk][d] = in ? src.key(h * HD + d, j) : 0.0f;
      Vs[kk][d] = in ? src.value(h * HD + d, j) : 0.0f;
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
    for (int d = 0; d < HD; ++d) src.store(h * HD + d, i, o[d] * inv);
  }
}

// grid.z: segments (1 for the plain form); x over queries, y over heads.
template <class Source>
void launch(const Source& src, int64_t H, int64_t max_queries, int64_t groups, int64_t hd, int64_t window,
            int64_t context, float scale, const char* what) {
  if (hd == 64) {
    const dim3 grid(unsigned((max_queries + kQueries - 1) / kQueries), unsigned(H), unsigned(groups));
    MIMI_LAUNCH((attention_tiled_kernel<64, Source>), grid, kQueries, 0, current_stream(), src, context, scale);
  } else {
    const size_t shared = size_t(std::max<int64_t>(1, window) + kThreads) * sizeof(float);
    MIMI_LAUNCH(attention_kernel<Source>, dim3(unsigned(max_queries), unsigned(H), unsigned(groups)), kThreads, shared,
                current_stream(), src, hd, context, scale);
  }
  check_launch(what);
}

}  // namespace

void attention(int64_t H, int64_t Tq, int64_t Tk, int64_t hd, int64_t q_start, int64_t k_start, int64_t context,
               float scale, const float* q, const float* k, const float* v, float* out) {
  if (H <= 0 || Tq <= 0) return;
  Plain src;  // (no designated initializers: the CUDA and HIP builds are C++17)
  src.q = q, src.k = k, src.v = v, src.out = out;
  src.Tq = Tq, src.Tk = Tk, src.q_start = q_start - k_start;
  launch(src, H, Tq, 1, hd, std::min(Tk, context), context, scale, "attention");
}

void attention_window(int64_t H, int64_t hd, int64_t Tt, int64_t nseg, int64_t max_len, const WindowSegment* segs,
                      int64_t context, float scale, const float* q, const float* ring_k, const float* ring_v,
                      int64_t R, float* out) {
  if (H <= 0 || nseg <= 0 || max_len <= 0) return;
  if (nseg > 65535) throw Error(ErrorKind::Internal, "attention_window: over 65535 segments");
  if (max_len > R - context + 1)  // a window's cached keys and the new ones would share columns
    throw Error(ErrorKind::Internal, "attention_window: a ring of " + std::to_string(R) + " columns for " +
                                         std::to_string(max_len) + " steps and a window of " + std::to_string(context));
  Ring src;
  src.segs = segs, src.q = q, src.rk = ring_k, src.rv = ring_v, src.out = out;
  src.D = H * hd, src.Tt = Tt, src.R = R;
  launch(src, H, max_len, nseg, hd, context, context, scale, "attention_window");
}

}  // namespace mimi::gpu
