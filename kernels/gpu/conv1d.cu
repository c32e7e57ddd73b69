// GPU causal conv1d: one thread per output (co, t), the left context/padding read in place.
#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"

namespace mimi::gpu {
namespace {

__global__ void conv1d_kernel(Conv1dShape s, int64_t T_out, int64_t P, const float* x, const float* w,
                              const float* bias, float* y, bool accumulate, const float* context) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, co = blockIdx.y;
  if (t >= T_out) return;
  const int64_t cin_g = s.in_channels / s.groups, cout_g = s.out_channels / s.groups, g = co / cout_g;
  float acc = bias ? bias[co] : 0.0f;
  for (int64_t ci = 0; ci < cin_g; ++ci) {
    const int64_t c = g * cin_g + ci;
    const float* xr = x + c * s.length_in;
    for (int64_t k = 0; k < s.kernel; ++k) {
      const int64_t idx = t * s.stride + k * s.dilation - P;
      float v;
      if (idx >= 0) v = xr[idx];
      else if (context) v = context[c * P + P + idx];
      else v = s.pad == PadMode::Replicate ? xr[0] : 0.0f;
      if (s.elu_input && v <= 0.0f) v = expm1f(v);
      acc += w[(co * cin_g + ci) * s.kernel + k] * v;
    }
  }
  float* out = y + co * T_out + t;
  *out = accumulate ? *out + acc : acc;
}

}  // namespace

void conv1d(const Conv1dShape& s, const float* x, const float* w, const float* bias, float* y, bool accumulate,
            const float* context) {
  const int64_t T_out = s.length_out();
  if (T_out <= 0) return;
  MIMI_LAUNCH(conv1d_kernel, dim3(blocks_for(T_out), unsigned(s.out_channels)), kThreads, 0, 0, s, T_out, s.pad_left(), x,
              w, bias, y, accumulate, s.pad_left() > 0 ? context : nullptr);
  check_launch("conv1d");
}

}  // namespace mimi::gpu
