// CPU transposed conv1d with the causal right trim.
//   groups == 1: Z[(co,k), t] = sum_ci W^T[(co,k), ci] x[ci, t] (one GEMM per time tile),
//                then overlap-add y[co, t*stride + k] += Z[(co,k), t].
//   otherwise  : direct loops per group (Mimi's only grouped case is depthwise, 1 in/out
//                channel per group, where there is nothing to multiply as a matrix).
#include <algorithm>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/threads.h"
#include "kernels/ops.h"

namespace mimi::cpu {
namespace {
constexpr int64_t kTile = 512;  // input time steps per GEMM tile
}

void conv_transpose1d(const ConvTranspose1dShape& s, const float* x, const float* w,
                      const float* bias, float* y) {
  const int64_t cin_g = s.in_channels / s.groups, cout_g = s.out_channels / s.groups;
  const int64_t K = s.kernel, S = s.stride, Tin = s.length_in, T_out = s.length_out();
  if (T_out <= 0) return;
  for (int64_t co = 0; co < s.out_channels; ++co)
    std::fill(y + co * T_out, y + (co + 1) * T_out, bias ? bias[co] : 0.0f);

  if (s.groups != 1) {
    parallel_for(s.out_channels, 8, [&](int64_t c0, int64_t c1) {
      for (int64_t co = c0; co < c1; ++co) {
        const int64_t g = co / cout_g, col = co % cout_g;
        float* yr = y + co * T_out;
        for (int64_t ci = g * cin_g; ci < (g + 1) * cin_g; ++ci) {
          const float* wk = w + (ci * cout_g + col) * K;
          const float* xr = x + ci * Tin;
          for (int64_t t = 0; t < Tin; ++t)
            for (int64_t k = 0; k < K; ++k) {
              const int64_t o = t * S + k;
              if (o < T_out) yr[o] += xr[t] * wk[k];
            }
        }
      }
    });
    return;
  }

  // W [Cin, Cout*K] is the transposed A operand of Z = W^T x.
  const int64_t M = s.out_channels * K;

  thread_local std::vector<float> z;  // [Cout*K, tile], grow-only
  for (int64_t t0 = 0; t0 < Tin; t0 += kTile) {
    const int64_t n = std::min(kTile, Tin - t0);
    if (z.size() < size_t(M * n)) z.resize(size_t(M * n));
    float* zp = z.data();  // (thread_local: name it here, workers have their own)
    gemm_ta(M, n, s.in_channels, w, M, x + t0, Tin, zp, n, false);
    parallel_for(s.out_channels, 8, [&](int64_t c0, int64_t c1) {
      for (int64_t co = c0; co < c1; ++co) {
        float* yr = y + co * T_out;
        for (int64_t k = 0; k < K; ++k) {
          const float* zr = zp + (co * K + k) * n;
          for (int64_t t = 0; t < n; ++t) {
            const int64_t o = (t0 + t) * S + k;
            if (o < T_out) yr[o] += zr[t];
          }
        }
      }
    });
  }
}

}  // namespace mimi::cpu
