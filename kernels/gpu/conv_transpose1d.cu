// GPU transposed conv1d with the causal right trim (kernels/ops.h). Output o = t*S + r (phase r)
// only meets the taps k = r + j*S: y[co, t*S + r] = bias[co] + sum_(j, ci) w[ci, co, r + j*S] * x[ci, t - j].
//   groups == 1, large: every phase's GEMM stacked into one, on the register-tiled kernel
//               (kernels/gpu/gemm_tile.h): rows (r, co), columns t, K = (j, ci) with j < ceil(K/S).
//               A is read from w as stored, B from x in place (zero outside [0, T_in)), and the
//               store interleaves the phases into y: no copies, no overlap-add, no atomics.
//   groups == 1, fewer than 32 columns (a streaming step's few outputs): the same stacked GEMM
//               on the split-K kernel (gemm_tile.h gemm_splitk_kernel).
//   otherwise : one thread per output (co, o) gathers the same terms (grouped convs such as the
//               depthwise upsampling, fewer than 32 stacked rows).
// All sum over (j, ci) in the GPU's one order (gemm_tile.h: chunks of 32 terms; a tap past K or an
// input outside [0, T_in) is a term with a zero factor), then add the bias: a chunk's outputs do
// not depend on which kernel computed them.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"
// after vendor.h
#include "kernels/gpu/gemm_tile.h"

namespace mimi::gpu {
namespace {

int64_t taps_per_phase(const ConvTranspose1dShape& s) { return (s.kernel + s.stride - 1) / s.stride; }

// A[(r, co), (j, ci)] = w[ci, co, r + j*S], 0 where r + j*S >= K.
struct PhaseWeightsA {
  static constexpr bool vec = false;  // strided gather: no 4-wide loads
  const float* w;
  int64_t cin, cout, K, S;
  __device__ __forceinline__ float at(int64_t row, int64_t col) const {
    const int64_t r = row / cout, co = row - r * cout, j = col / cin, ci = col - j * cin, k = r + j * S;
    return k < K ? w[(ci * cout + co) * K + k] : 0.0f;
  }
};

// B[(j, ci), t] = x[ci, t - j], 0 outside [0, T_in).
struct ShiftedInputB {
  static constexpr bool vec = false;  // rows shifted by j, so not 16-byte aligned: no 4-wide loads
  const float* x;
  int64_t cin, T_in;
  __device__ __forceinline__ float at(int64_t row, int64_t t) const {
    const int64_t j = row / cin, ci = row - j * cin, i = t - j;
    return i >= 0 && i < T_in ? x[ci * T_in + i] : 0.0f;
  }
};

// C[(r, co), t] -> y[co, t*S + r] (+ bias[co]); phases past the output's end are dropped.
struct PhaseInterleaveC {
  float* y;
  const float* bias;
  int64_t cout, S, T_out;
  __device__ __forceinline__ void store(int64_t row, int64_t t, float sum) const {
    const int64_t r = row / cout, co = row - r * cout, o = t * S + r;
    if (o < T_out) y[co * T_out + o] = bias ? sum + bias[co] : sum;
  }
};

__global__ void MIMI_BOUNDS(kThreads) convtr_kernel(ConvTranspose1dShape s, int64_t T_out, int64_t m, const float* x, const float* w,
                              const float* bias, float* y) {
  const int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, co = blockIdx.y;
  if (o >= T_out) return;
  const int64_t cin_g = s.in_channels / s.groups, cout_g = s.out_channels / s.groups;
  const int64_t g = co / cout_g, col = co % cout_g, r = o % s.stride, t0 = o / s.stride;
  tile::ChunkedSum acc;
  for (int64_t j = 0; j < m; ++j) {
    const int64_t k = r + j * s.stride, t = t0 - j;
    const bool inside = k < s.kernel && t >= 0 && t < s.length_in;
    for (int64_t ci = g * cin_g; ci < (g + 1) * cin_g; ++ci) {
      const float wv = k < s.kernel ? w[(ci * cout_g + col) * s.kernel + k] : 0.0f;
      acc.add(wv, inside ? x[ci * s.length_in + t] : 0.0f);
    }
  }
  y[co * T_out + o] = bias ? acc.value() + bias[co] : acc.value();
}

}  // namespace

void conv_transpose1d(const ConvTranspose1dShape& s, const float* x, const float* w, const float* bias, float* y) {
  const int64_t T_out = s.length_out(), S = s.stride, m = taps_per_phase(s);
  if (T_out <= 0) return;
  const int64_t rows = S * s.out_channels, cols = (T_out + S - 1) / S;  // phase 0 has the most columns
  const PhaseWeightsA a{w, s.in_channels, s.out_channels, s.kernel, S};
  const ShiftedInputB b{x, s.in_channels, s.length_in};
  const PhaseInterleaveC c{y, bias, s.out_channels, S, T_out};
  if (s.groups == 1 && rows >= tile::kMinSide && cols >= tile::kMinSide) {
    tile::launch(rows, cols, m * s.in_channels, a, b, c);
  } else if (s.groups == 1 && cols < tile::kMinSide) {
    tile::launch_splitk(rows, cols, m * s.in_channels, a, b, c);
  } else {
    MIMI_LAUNCH(convtr_kernel, dim3(blocks_for(T_out), unsigned(s.out_channels)), kThreads, 0, current_stream(), s, T_out, m, x, w,
                bias, y);
  }
  check_launch("conv_transpose1d");
}

}  // namespace mimi::gpu
