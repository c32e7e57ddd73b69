// CPU conv1d as GEMM: y_g[Cout_g, t-tile] = W_g[Cout_g, Cin_g*K] * col[Cin_g*K, t-tile].
// The im2col buffer is built per time tile (bounded memory, cache-sized), tiles run in parallel.
// 1x1 convolutions skip im2col and multiply the input directly.
#include <algorithm>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/threads.h"
#include "kernels/ops.h"

namespace mimi::cpu {
namespace {

constexpr int64_t kTile = 256;  // output time steps per im2col tile

void fill_bias(int64_t rows, int64_t cols, int64_t ld, const float* bias, float* y) {
  for (int64_t r = 0; r < rows; ++r) std::fill(y + r * ld, y + r * ld + cols, bias ? bias[r] : 0.0f);
}

}  // namespace

void conv1d(const Conv1dShape& s, const float* x, const float* w, const float* bias, float* y) {
  const int64_t cin_g = s.in_channels / s.groups, cout_g = s.out_channels / s.groups;
  const int64_t T_out = s.length_out(), P = s.pad_left(), K = s.kernel, Tin = s.length_in;
  if (T_out <= 0) return;
  const int64_t rows = cin_g * K;  // GEMM inner dimension

  if (K == 1 && s.stride == 1 && P == 0) {  // pointwise: the input already is the B operand
    for (int64_t g = 0; g < s.groups; ++g) {
      float* yg = y + g * cout_g * T_out;
      fill_bias(cout_g, T_out, T_out, bias ? bias + g * cout_g : nullptr, yg);
      gemm(cout_g, T_out, cin_g, w + g * cout_g * cin_g, cin_g, x + g * cin_g * Tin, Tin, yg,
           T_out, true);
    }
    return;
  }

  const int64_t tiles = (T_out + kTile - 1) / kTile;
  parallel_for(tiles * s.groups, 1, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> col;  // [Cin_g*K, kTile]
    col.resize(size_t(rows * kTile));
    for (int64_t job = b; job < e; ++job) {
      const int64_t g = job / tiles, t0 = (job % tiles) * kTile;
      const int64_t n = std::min(kTile, T_out - t0);
      for (int64_t ci = 0; ci < cin_g; ++ci) {
        const float* xr = x + (g * cin_g + ci) * Tin;
        const float pad_value = s.pad == PadMode::Replicate ? xr[0] : 0.0f;
        for (int64_t k = 0; k < K; ++k) {
          float* dst = col.data() + (ci * K + k) * n;
          const int64_t first = t0 * s.stride + k * s.dilation - P;  // input index of column 0
          for (int64_t j = 0; j < n; ++j) {
            const int64_t idx = first + j * s.stride;
            dst[j] = idx >= 0 ? xr[idx] : pad_value;
          }
        }
      }
      float* yg = y + g * cout_g * T_out + t0;
      fill_bias(cout_g, n, T_out, bias ? bias + g * cout_g : nullptr, yg);
      gemm_serial(cout_g, n, rows, w + g * cout_g * rows, rows, col.data(), n, yg, T_out, true);
    }
  });
}

}  // namespace mimi::cpu
