// GPU LayerNorm over channels. A block owns 32 consecutive time steps and all channels: its 256
// threads are 32 columns x 8 channel lanes, so every global access reads or writes 32
// consecutive floats of one channel row (coalesced; the row-per-block layout read a column of
// [C, T] with a stride of T). Per column: the mean, then the variance of the deviations, each
// summed per lane over channels lane, lane + 8, ... and the 8 lane sums added in lane order:
// a column's result depends on its own values only (column-invariant, like every op a batched
// plan runs on several streams' columns at once).
//
// layer_norm_linear (a fused op) runs the same statistics into a [2, T] workspace and lets the
// GEMM's operand loader normalize as it reads (gemm_tile.h NormB, the formula of epilogue.h), so
// the normalized [C, T] is never written: bitwise layer_norm then linear (or linear_gelu).
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"
// after vendor.h
#include "kernels/gpu/epilogue.h"
#include "kernels/gpu/gemm_tile.h"

namespace mimi::gpu {
namespace {

constexpr int kCols = 32, kLanes = kThreads / kCols;  // 32 time steps x 8 channel lanes

// The mean and 1/std of column t (every thread of the column gets them); part: shared [8][32].
__device__ void column_stats(int64_t C, int64_t T, const float* x, float eps, int64_t t, int col, int lane,
                             float (*part)[kCols], float& mean, float& rstd) {
  const bool active = t < T;  // the last block's columns past T only join the barriers
  // the lanes' partial sums of this column, added in lane order (the same for every thread)
  auto column_sum = [&](float v) {
    part[lane][col] = v;
    __syncthreads();
    float s = 0.0f;
    for (int l = 0; l < kLanes; ++l) s += part[l][col];
    __syncthreads();  // part is reused by the next sum
    return s;
  };
  float s = 0.0f;
  if (active)
    for (int64_t c = lane; c < C; c += kLanes) s += x[c * T + t];
  mean = column_sum(s) / float(C);
  float v = 0.0f;
  if (active)
    for (int64_t c = lane; c < C; c += kLanes) {
      const float d = x[c * T + t] - mean;
      v = fmaf(d, d, v);
    }
  rstd = rsqrtf(column_sum(v) / float(C) + eps);
}

__global__ void MIMI_BOUNDS(kThreads) layer_norm_kernel(int64_t C, int64_t T, const float* x, const float* gamma, const float* beta,
                                  float eps, float* y) {
  __shared__ float part[kLanes][kCols];
  const int col = int(threadIdx.x) % kCols, lane = int(threadIdx.x) / kCols;
  const int64_t t = int64_t(blockIdx.x) * kCols + col;
  float mean, rstd;
  column_stats(C, T, x, eps, t, col, lane, part, mean, rstd);
  if (t < T)
    for (int64_t c = lane; c < C; c += kLanes) y[c * T + t] = layer_norm_value(x[c * T + t], mean, rstd, gamma[c], beta[c]);
}

// stats [2, T]: row 0 the means, row 1 the 1/std
__global__ void MIMI_BOUNDS(kThreads) layer_norm_stats_kernel(int64_t C, int64_t T, const float* x, float eps, float* stats) {
  __shared__ float part[kLanes][kCols];
  const int col = int(threadIdx.x) % kCols, lane = int(threadIdx.x) / kCols;
  const int64_t t = int64_t(blockIdx.x) * kCols + col;
  float mean, rstd;
  column_stats(C, T, x, eps, t, col, lane, part, mean, rstd);
  if (t < T && lane == 0) stats[t] = mean, stats[T + t] = rstd;
}

// B[k, t] = the normalized x[k, t], computed as the GEMM loads it
struct NormB {
  static constexpr bool vec = false;
  const float* x;
  int64_t T;
  const float* stats;  // [2, T]
  const float* gamma;
  const float* beta;
  __device__ __forceinline__ float at(int64_t k, int64_t t) const {
    return layer_norm_value(x[k * T + t], stats[t], stats[T + t], gamma[k], beta[k]);
  }
  __device__ __forceinline__ void at4(int64_t, int64_t, float*) const {}
};

}  // namespace

void layer_norm(int64_t C, int64_t T, const float* x, const float* gamma, const float* beta, float eps, float* y) {
  if (T <= 0) return;
  MIMI_LAUNCH(layer_norm_kernel, unsigned((T + kCols - 1) / kCols), kThreads, 0, current_stream(), C, T, x, gamma, beta,
              eps, y);
  check_launch("layer_norm");
}

void layer_norm_linear(int64_t in, int64_t out, int64_t T, const float* W, const float* x, const float* gamma,
                       const float* beta, float eps, bool gelu, float* stats, float* y) {
  if (T <= 0 || out <= 0) return;
  MIMI_LAUNCH(layer_norm_stats_kernel, unsigned((T + kCols - 1) / kCols), kThreads, 0, current_stream(), in, T, x, eps,
              stats);
  check_launch("layer_norm_linear (stats)");
  const NormB b{x, T, stats, gamma, beta};
  if (gelu) tile::gemm_with(out, T, in, W, in, b, tile::GeluC{y, T});
  else tile::gemm_with(out, T, in, W, in, b, tile::MatrixC{y, T, nullptr, false});
  check_launch("layer_norm_linear");
}

}  // namespace mimi::gpu
