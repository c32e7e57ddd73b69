// GPU transposed conv1d: one thread per output (co, o) gathers the inputs that reach it
// (t*stride + k = o), so no atomics; the right trim is just the output length.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"

namespace mimi::gpu {
namespace {

__global__ void convtr_kernel(ConvTranspose1dShape s, int64_t T_out, const float* x, const float* w,
                              const float* bias, float* y) {
  const int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, co = blockIdx.y;
  if (o >= T_out) return;
  const int64_t cin_g = s.in_channels / s.groups, cout_g = s.out_channels / s.groups;
  const int64_t g = co / cout_g, col = co % cout_g;
  float acc = bias ? bias[co] : 0.0f;
  for (int64_t k = o % s.stride; k < s.kernel; k += s.stride) {
    const int64_t t = (o - k) / s.stride;
    if (o < k || t >= s.length_in) continue;
    for (int64_t ci = g * cin_g; ci < (g + 1) * cin_g; ++ci)
      acc += x[ci * s.length_in + t] * w[(ci * cout_g + col) * s.kernel + k];
  }
  y[co * T_out + o] = acc;
}

}  // namespace

void conv_transpose1d(const ConvTranspose1dShape& s, const float* x, const float* w, const float* bias, float* y) {
  const int64_t T_out = s.length_out();
  if (T_out <= 0) return;
  MIMI_LAUNCH(convtr_kernel, dim3(blocks_for(T_out), unsigned(s.out_channels)), kThreads, 0, 0, s, T_out, x, w, bias, y);
  check_launch("conv_transpose1d");
}

}  // namespace mimi::gpu
