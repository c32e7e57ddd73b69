// Naive reference: scatter every input sample through the kernel, then trim the right end.
#include <cstddef>
#include <vector>

#include "kernels/ops.h"

namespace mimi::ref {

void conv_transpose1d(const ConvTranspose1dShape& s, const float* x, const float* w,
                      const float* bias, float* y) {
  const int64_t cin_g = s.in_channels / s.groups, cout_g = s.out_channels / s.groups;
  const int64_t full_len = (s.length_in - 1) * s.stride + s.kernel;
  const int64_t T_out = s.length_out();
  std::vector<double> full(std::size_t(s.out_channels * full_len), 0.0);  // [Cout, full_len]
  for (int64_t ci = 0; ci < s.in_channels; ++ci) {
    const int64_t g = ci / cin_g;
    for (int64_t col = 0; col < cout_g; ++col) {
      const int64_t co = g * cout_g + col;
      for (int64_t t = 0; t < s.length_in; ++t)
        for (int64_t k = 0; k < s.kernel; ++k)
          full[co * full_len + t * s.stride + k] +=
              double(x[ci * s.length_in + t]) * double(w[(ci * cout_g + col) * s.kernel + k]);
    }
  }
  for (int64_t co = 0; co < s.out_channels; ++co)
    for (int64_t t = 0; t < T_out; ++t)
      y[co * T_out + t] = float(full[co * full_len + t] + (bias ? bias[co] : 0.0));
}

}  // namespace mimi::ref
