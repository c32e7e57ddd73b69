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
//
// conv_transpose1d_segments (kernels/gpu/ops.h): the same kernels over the columns of several
// streams side by side (each segment's inputs only), then one launch that adds each segment's
// carried overlap and computes its next one: a batched step's transposed conv for every slot.
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

// Segments: column t of segment seg is column seg * T_in + t of B; its inputs are columns
// [seg * T_in, (seg + 1) * T_in) of x (row stride nseg * T_in), zero outside them.
struct SegmentShiftedInputB {
  static constexpr bool vec = false;
  const float* x;
  int64_t cin, T_in, ldx;
  __device__ __forceinline__ float at(int64_t row, int64_t c) const {
    const int64_t j = row / cin, ci = row - j * cin, seg = c / T_in, i = c - seg * T_in - j;
    return i >= 0 && i < T_in ? x[ci * ldx + seg * T_in + i] : 0.0f;
  }
};

// C[(r, co), t] -> y[co, t*S + r] (+ bias[co]); phases past the output's end are dropped.
// Segments (T_in > 0): column c is column t of segment c / T_in, whose outputs are columns
// [seg * T_out, (seg + 1) * T_out) of y (row stride ldy).
struct PhaseInterleaveC {
  float* y;
  const float* bias;
  int64_t cout, S, T_out, T_in = 0, ldy = 0;
  __device__ __forceinline__ void store(int64_t row, int64_t c, float sum) const {
    const int64_t r = row / cout, co = row - r * cout;
    const int64_t seg = T_in > 0 ? c / T_in : 0, o = (c - seg * T_in) * S + r;
    if (o < T_out) y[co * (T_in > 0 ? ldy : T_out) + seg * T_out + o] = bias ? sum + bias[co] : sum;
  }
};

// Output o of one stream's transform (o < its untrimmed length) as the stacked GEMM sums it:
// terms (j, ci) in order, a tap past K or an input outside [0, T_in) a zero term. `in` reads the
// stream's input column (ci, t).
template <class In>
__device__ __forceinline__ float convtr_output(const ConvTranspose1dShape& s, int64_t m, const float* w, int64_t co,
                                               int64_t o, const In& in) {
  const int64_t cin_g = s.in_channels / s.groups, cout_g = s.out_channels / s.groups;
  const int64_t g = co / cout_g, col = co % cout_g, r = o % s.stride, t0 = o / s.stride;
  tile::ChunkedSum acc;
  for (int64_t j = 0; j < m; ++j) {
    const int64_t k = r + j * s.stride, t = t0 - j;
    const bool inside = k < s.kernel && t >= 0 && t < s.length_in;
    for (int64_t ci = g * cin_g; ci < (g + 1) * cin_g; ++ci) {
      const float wv = k < s.kernel ? w[(ci * cout_g + col) * s.kernel + k] : 0.0f;
      acc.add(wv, inside ? in(ci, t) : 0.0f);
    }
  }
  return acc.value();
}

// One stream's (or segment's) inputs: x [Cin, ...] with row stride ld, from column `first`.
struct Columns {
  const float* x;
  int64_t ld, first;
  __device__ __forceinline__ float operator()(int64_t ci, int64_t t) const { return x[ci * ld + first + t]; }
};

// One thread per output of nseg segments of T_out outputs each (nseg 1: one stream).
__global__ void MIMI_BOUNDS(kThreads) convtr_kernel(ConvTranspose1dShape s, int64_t T_out, int64_t nseg, int64_t m,
                                                    const float* x, const float* w, const float* bias, float* y) {
  const int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, co = blockIdx.y;
  if (n >= nseg * T_out) return;
  const int64_t seg = n / T_out, o = n - seg * T_out;
  const float v = convtr_output(s, m, w, co, o, Columns{x, nseg * s.length_in, seg * s.length_in});
  y[co * nseg * T_out + n] = bias ? v + bias[co] : v;
}

// Per (output channel, segment): the carried overlap of its slot added to the segment's first
// outputs, then the next overlap: the untrimmed outputs T_out .. T_out + O - 1 of the segment
// (bias-free), plus what is left of the old one past T_out (a segment shorter than the overlap).
// In place, in order: position j reads old j + T_out, never already written.
__global__ void MIMI_BOUNDS(kThreads) convtr_carry_kernel(ConvTranspose1dShape s, int64_t nseg, int64_t m,
                                                          const WindowSegment* segs, const float* x, const float* w,
                                                          float* y, float* carries) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, C = s.out_channels;
  if (idx >= nseg * C) return;
  // segments fastest: a warp's lanes share co, so a weight read is one broadcast (co fastest put
  // the lanes 64 B apart, a sector each, over megabytes of weights)
  const int64_t co = idx / nseg, seg = idx - co * nseg;
  const int64_t O = s.kernel - s.stride, T_out = s.length_in * s.stride;  // (overlap() is host code)
  float* carry = carries + (int64_t(segs[seg].slot) * C + co) * O;
  float* yr = y + co * nseg * T_out + seg * T_out;
  for (int64_t j = 0; j < O && j < T_out; ++j) yr[j] = yr[j] + carry[j];
  const Columns in{x, nseg * s.length_in, seg * s.length_in};
  for (int64_t j = 0; j < O; ++j) {
    const float tail = convtr_output(s, m, w, co, T_out + j, in);
    carry[j] = j + T_out < O ? tail + carry[j + T_out] : tail;
  }
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
    MIMI_LAUNCH(convtr_kernel, dim3(blocks_for(T_out), unsigned(s.out_channels)), kThreads, 0, current_stream(), s, T_out,
                int64_t(1), m, x, w, bias, y);
  }
  check_launch("conv_transpose1d");
}

void conv_transpose1d_segments(const ConvTranspose1dShape& s, int64_t nseg, const WindowSegment* segs, const float* x,
                               const float* w, const float* bias, float* y, float* carries) {
  const int64_t T = s.length_in, S = s.stride, m = taps_per_phase(s), T_out = T * S;
  if (nseg <= 0 || T <= 0) return;
  ConvTranspose1dShape t = s;
  t.trimmed = true;
  const int64_t rows = S * s.out_channels, cols = nseg * T;
  const PhaseWeightsA a{w, s.in_channels, s.out_channels, s.kernel, S};
  const SegmentShiftedInputB b{x, s.in_channels, T, nseg * T};
  const PhaseInterleaveC c{y, bias, s.out_channels, S, T_out, T, nseg * T_out};
  if (s.groups == 1 && rows >= tile::kMinSide && cols >= tile::kMinSide) {
    tile::launch(rows, cols, m * s.in_channels, a, b, c);
  } else if (s.groups == 1 && cols < tile::kMinSide) {
    tile::launch_splitk(rows, cols, m * s.in_channels, a, b, c);
  } else {
    MIMI_LAUNCH(convtr_kernel, dim3(blocks_for(nseg * T_out), unsigned(s.out_channels)), kThreads, 0, current_stream(), t,
                T_out, nseg, m, x, w, bias, y);
  }
  check_launch("conv_transpose1d_segments");
  if (t.overlap() > 0) {
    MIMI_LAUNCH(convtr_carry_kernel, blocks_for(nseg * s.out_channels), kThreads, 0, current_stream(), t, nseg, m, segs, x,
                w, y, carries);
    check_launch("conv_transpose1d_segments (overlaps)");
  }
}

}  // namespace mimi::gpu
