// Naive reference: the definition of a causal, padded, strided, dilated, grouped conv1d.
#include <cmath>

#include "kernels/ops.h"

namespace mimi::ref {

void conv1d(const Conv1dShape& s, const float* x, const float* w, const float* bias, float* y,
            bool accumulate, const float* context) {
  const int64_t cin_g = s.in_channels / s.groups, cout_g = s.out_channels / s.groups;
  const int64_t T_out = s.length_out(), P = s.pad_left();
  for (int64_t co = 0; co < s.out_channels; ++co) {
    const int64_t g = co / cout_g;
    for (int64_t t = 0; t < T_out; ++t) {
      double acc = bias ? bias[co] : 0.0;
      for (int64_t ci = 0; ci < cin_g; ++ci) {
        const float* xrow = x + (g * cin_g + ci) * s.length_in;
        for (int64_t k = 0; k < s.kernel; ++k) {
          int64_t idx = t * s.stride + k * s.dilation - P;  // position in the unpadded input
          float xv;
          if (idx >= 0) xv = xrow[idx];
          else if (context) xv = context[(g * cin_g + ci) * P + P + idx];
          else xv = s.pad == PadMode::Replicate ? xrow[0] : 0.0f;
          if (s.elu_input && xv <= 0.0f) xv = std::expm1(xv);
          acc += double(w[(co * cin_g + ci) * s.kernel + k]) * double(xv);
        }
      }
      y[co * T_out + t] = accumulate ? y[co * T_out + t] + float(acc) : float(acc);
    }
  }
}

}  // namespace mimi::ref
