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

__global__ void MIMI_BOUNDS(kThreads) conv1d_kernel(Conv1dShape s, int64_t T_out, int64_t P, const float* x, const float* w,
                              const float* bias, float* y, bool accumulate, const float* context) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, co = blockIdx.y;
  if (t >= T_out) return;
  const int64_t cin_g = s.in_channels / s.groups, cout_g = s.out_channels / s.groups, g = co / cout_g;
  tile::ChunkedSum acc;
  for (int64_t ci = 0; ci < cin_g; ++ci)
    for (int64_t k = 0; k < s.kernel; ++k)
      acc.add(w[(co * cin_g + ci) * s.kernel + k],
              conv_input(s, P, x, context, g * cin_g + ci, t * s.stride + k * s.dilation - P));
  const float v = bias ? acc.value() + bias[co] : acc.value();
  float* out = y + co * T_out + t;
  *out = accumulate ? *out + v : v;
}

}  // namespace

void conv1d(const Conv1dShape& s, const float* x, const float* w, const float* bias, float* y, bool accumulate,
            const float* context) {
  const int64_t T_out = s.length_out(), P = s.pad_left();
  if (T_out <= 0) return;
  const float* ctx = P > 0 ? context : nullptr;
  const int64_t K = s.in_channels * s.kernel;
  const tile::MatrixC out{y, T_out, bias, accumulate};
  const ConvWindowB window{s, P, x, ctx};
  if (s.groups == 1 && s.out_channels >= tile::kMinSide && T_out >= tile::kMinSide) {
    if (tile::aligned16(w, K)) tile::launch(s.out_channels, T_out, K, tile::Matrix<true>{w, K}, window, out);
    else tile::launch(s.out_channels, T_out, K, tile::Matrix<false>{w, K}, window, out);
  } else if (s.groups == 1 && T_out < tile::kMinSide) {
    if (tile::aligned16(w, K)) tile::launch_splitk(s.out_channels, T_out, K, tile::Matrix<true>{w, K}, window, out);
    else tile::launch_splitk(s.out_channels, T_out, K, tile::Matrix<false>{w, K}, window, out);
  } else {
    MIMI_LAUNCH(conv1d_kernel, dim3(blocks_for(T_out), unsigned(s.out_channels)), kThreads, 0, current_stream(), s, T_out, P, x, w,
                bias, y, accumulate, ctx);
  }
  check_launch("conv1d");
}

}  // namespace mimi::gpu
