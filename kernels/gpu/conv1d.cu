// GPU causal conv1d, y[co, t] = bias[co] + sum_(ci,k) w[co, ci, k] * x'[ci, t*stride + k*dilation - P],
// where x' is x, the streaming context or the padding left of it, ELU'd when the shape asks.
//   groups == 1, Cout and T_out >= 32: implicit GEMM. A = w [Cout, Cin*K] as stored, B[(ci,k), t]
//               = x'[ci, ...] read from the signal in place by the tiled GEMM's loader
//               (kernels/gpu/gemm_tile.h): no im2col buffer.
//   groups == 1, T_out < 32 (a streaming step's few outputs): the same implicit GEMM on the
//               split-K kernel (gemm_tile.h gemm_splitk_kernel).
//   otherwise : one thread per output (grouped convs, fewer than 32 output channels).
// All sum over (ci, k) in the GPU's one order (gemm_tile.h: chunks of 32 terms), then add the
// bias, then y: a chunk's outputs do not depend on which kernel computed them.
//
// conv1d_segments (kernels/gpu/ops.h): the same kernels over the columns of several streams side
// by side, the loader finding each column's segment and its slot's context, then one launch that
// moves every segment's context on: a batched step's convolution for every slot at once.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"
// after vendor.h
#include "kernels/gpu/gemm_tile.h"

namespace mimi::gpu {
namespace {

// The conv's input value of row c at position idx (idx < 0: context or padding).
__device__ __forceinline__ float conv_input(const Conv1dShape& s, int64_t P, const float* x, const float* context,
                                            int64_t c, int64_t idx) {
  const float* xr = x + c * s.length_in;
  float v;
  if (idx >= 0) v = xr[idx];
  else if (context) v = context[c * P + P + idx];
  else v = s.pad == PadMode::Replicate ? xr[0] : 0.0f;
  if (s.elu_input && v <= 0.0f) v = expm1f(v);
  return v;
}

// B of the implicit GEMM: row (ci, k), column t.
struct ConvWindowB {
  static constexpr bool vec = false;  // gathered (stride, dilation, padding): no 4-wide loads
  Conv1dShape s;
  int64_t P;
  const float* x;
  const float* context;
  __device__ __forceinline__ float at(int64_t row, int64_t t) const {
    const int64_t c = row / s.kernel, k = row - c * s.kernel;
    return conv_input(s, P, x, context, c, t * s.stride + k * s.dilation - P);
  }
};

// B of the implicit GEMM over nseg segments side by side: column n is output t of segment
// n / T_out, whose inputs are columns [seg * T, (seg + 1) * T) of x (row stride ldx) and whose
// context is its slot's [Cin, P] in `contexts` ([slots, Cin, P]).
struct SegmentWindowB {
  static constexpr bool vec = false;
  Conv1dShape s;  // length_in: one segment's inputs
  int64_t P, T_out, ldx;
  const float* x;
  const float* contexts;
  const WindowSegment* segs;
  __device__ __forceinline__ float at(int64_t row, int64_t n) const {
    const int64_t seg = n / T_out, t = n - seg * T_out;
    const int64_t c = row / s.kernel, k = row - c * s.kernel, idx = t * s.stride + k * s.dilation - P;
    float v = idx >= 0 ? x[c * ldx + seg * s.length_in + idx]
                       : contexts[(int64_t(segs[seg].slot) * s.in_channels + c) * P + P + idx];
    if (s.elu_input && v <= 0.0f) v = expm1f(v);
    return v;
  }
};

// One thread per output (grouped convs, few output channels): the terms in (ci, k) order through
// the loader, so a column's sum is the same whichever loader (one stream, or segments).
template <class BOp>
__global__ void MIMI_BOUNDS(kThreads) conv1d_kernel(Conv1dShape s, int64_t N, BOp b, const float* w, const float* bias,
                                                    float* y, bool accumulate) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, co = blockIdx.y;
  if (t >= N) return;
  const int64_t cin_g = s.in_channels / s.groups, cout_g = s.out_channels / s.groups, g = co / cout_g;
  tile::ChunkedSum acc;
  for (int64_t ci = 0; ci < cin_g; ++ci)
    for (int64_t k = 0; k < s.kernel; ++k) acc.add(w[(co * cin_g + ci) * s.kernel + k], b.at((g * cin_g + ci) * s.kernel + k, t));
  const float v = bias ? acc.value() + bias[co] : acc.value();
  float* out = y + co * N + t;
  *out = accumulate ? *out + v : v;
}

// y [Cout, N] = conv over the loader's N columns, on the kernel for the shape (module comment).
template <class BOp>
void conv_with(const Conv1dShape& s, int64_t N, const BOp& window, const float* w, const float* bias, float* y,
               bool accumulate) {
  const int64_t K = s.in_channels * s.kernel;
  const tile::MatrixC out{y, N, bias, accumulate};
  if (s.groups == 1 && s.out_channels >= tile::kMinSide && N >= tile::kMinSide) {
    if (tile::aligned16(w, K)) tile::launch(s.out_channels, N, K, tile::Matrix<true>{w, K}, window, out);
    else tile::launch(s.out_channels, N, K, tile::Matrix<false>{w, K}, window, out);
  } else if (s.groups == 1 && N < tile::kMinSide) {
    if (tile::aligned16(w, K)) tile::launch_splitk(s.out_channels, N, K, tile::Matrix<true>{w, K}, window, out);
    else tile::launch_splitk(s.out_channels, N, K, tile::Matrix<false>{w, K}, window, out);
  } else {
    MIMI_LAUNCH(conv1d_kernel<BOp>, dim3(blocks_for(N), unsigned(s.out_channels)), kThreads, 0, current_stream(), s, N,
                window, w, bias, y, accumulate);
  }
}

// Each segment's slot context becomes the last P of [context | its T raw inputs]: one thread per
// (segment, channel) row, in place (position j reads j + T, never already written).
__global__ void MIMI_BOUNDS(kThreads) context_advance_kernel(int64_t C, int64_t P, int64_t T, int64_t nseg, int64_t ldx,
                                                             const float* x, const WindowSegment* segs, float* contexts) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= nseg * C) return;
  const int64_t seg = idx / C, c = idx - seg * C;
  float* h = contexts + (int64_t(segs[seg].slot) * C + c) * P;
  const float* xs = x + c * ldx + seg * T;
  for (int64_t j = 0; j < P; ++j) h[j] = j + T < P ? h[j + T] : xs[T - P + j];
}

}  // namespace

void conv1d(const Conv1dShape& s, const float* x, const float* w, const float* bias, float* y, bool accumulate,
            const float* context) {
  const int64_t T_out = s.length_out(), P = s.pad_left();
  if (T_out <= 0) return;
  conv_with(s, T_out, ConvWindowB{s, P, x, P > 0 ? context : nullptr}, w, bias, y, accumulate);
  check_launch("conv1d");
}

void conv1d_segments(const Conv1dShape& s, int64_t nseg, const WindowSegment* segs, const float* x, const float* w,
                     const float* bias, float* y, bool accumulate, float* contexts) {
  const int64_t T_out = s.length_out(), P = s.pad_left(), T = s.length_in, ldx = nseg * T;
  if (nseg <= 0 || T <= 0) return;
  if (T_out > 0) {
    conv_with(s, nseg * T_out, SegmentWindowB{s, P, T_out, ldx, x, contexts, segs}, w, bias, y, accumulate);
    check_launch("conv1d_segments");
  }
  if (P > 0) {
    MIMI_LAUNCH(context_advance_kernel, blocks_for(nseg * s.in_channels), kThreads, 0, current_stream(), s.in_channels, P,
                T, nseg, ldx, x, segs, contexts);
    check_launch("conv1d_segments (contexts)");
  }
}

}  // namespace mimi::gpu
