// Naive reference: the residual block composed from the reference ops.
#include <cstddef>
#include <vector>

#include "kernels/ops.h"

namespace mimi::ref {

void resblock(const ResBlockShape& s, const float* w1, const float* b1, const float* w2, const float* b2,
              const float* context, float* x) {
  const int64_t C = s.channels, H = s.hidden, T = s.length, P = s.context();
  std::vector<float> xe(x, x + C * T), ce(static_cast<std::size_t>(C * P), 0.0f), h(static_cast<std::size_t>(H * T));
  elu(C * T, xe.data(), xe.data());
  if (context) elu(C * P, context, ce.data());
  conv1d(Conv1dShape{C, H, s.kernel, 1, s.dilation, 1, T, PadMode::Zero}, xe.data(), w1, b1, h.data(), false,
         ce.data());
  elu(H * T, h.data(), h.data());
  conv1d(Conv1dShape{H, C, 1, 1, 1, 1, T, PadMode::Zero}, h.data(), w2, b2, x, true, nullptr);
}

}  // namespace mimi::ref
