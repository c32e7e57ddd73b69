// CPU transposed conv1d with the causal right trim.
//   groups == 1, long inputs: polyphase. Output phase r (o = t*stride + r) only meets taps
//                k = r + j*stride: y[co, t*S + r] = sum_(j,ci) W[ci, co, r + jS] x[ci, t - j],
//                one GEMM per phase and time tile on a shared shifted-input matrix, each output
//                written once (no overlap-add pass). The per-call weight repack is Cin*Cout*K
//                floats, negligible against 2*Cin*Cout*K*T flops once T is long.
//   groups == 1, short inputs: Z[(co,k), t] = sum_ci W^T[(co,k), ci] x[ci, t] (one GEMM per
//                time tile), then overlap-add y[co, t*stride + k] += Z[(co,k), t].
//   otherwise  : direct loops per group (Mimi's only grouped case is depthwise, 1 in/out
//                channel per group, where there is nothing to multiply as a matrix).
#include <algorithm>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/threads.h"
#include "kernels/ops.h"

namespace mimi::cpu {
namespace {
constexpr int64_t kTile = 512;       // input time steps per GEMM tile
constexpr int64_t kPolyMin = 1024;   // input steps from which the polyphase path pays
constexpr int64_t kPolyTile = 256;   // output steps per phase per tile

void polyphase(const ConvTranspose1dShape& s, const float* x, const float* w, const float* bias, float* y) {
  const int64_t K = s.kernel, S = s.stride, Cin = s.in_channels, Cout = s.out_channels, Tin = s.length_in;
  const int64_t T_out = s.length_out(), m = (K + S - 1) / S;  // taps per phase, at most
  // A_r [Cout, m_r * Cin]: A_r[co, j*Cin + ci] = W[ci, co, r + j*S]
  std::vector<std::vector<float>> A(static_cast<size_t>(S));
  std::vector<int64_t> taps(static_cast<size_t>(S));
  for (int64_t r = 0; r < S; ++r) {
    const int64_t mr = r < K ? (K - r + S - 1) / S : 0;
    taps[size_t(r)] = mr;
    A[size_t(r)].resize(size_t(Cout * mr * Cin));
    for (int64_t co = 0; co < Cout; ++co)
      for (int64_t j = 0; j < mr; ++j)
        for (int64_t ci = 0; ci < Cin; ++ci)
          A[size_t(r)][size_t(co * mr * Cin + j * Cin + ci)] = w[(ci * Cout + co) * K + r + j * S];
  }
  const int64_t cols = (T_out + S - 1) / S;  // phase-0 columns; other phases have as many or one less
  const int64_t tiles = (cols + kPolyTile - 1) / kPolyTile;
  parallel_for(tiles, 1, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> B, out;
    for (int64_t i = b; i < e; ++i) {
      const int64_t t0 = i * kPolyTile, n = std::min(kPolyTile, cols - t0);
      B.resize(size_t(m * Cin * n));  // B[(j, ci), tt] = x[ci, t0 + tt - j], zero outside [0, Tin)
      for (int64_t j = 0; j < m; ++j)
        for (int64_t ci = 0; ci < Cin; ++ci) {
          float* dst = B.data() + (j * Cin + ci) * n;
          const float* xr = x + ci * Tin;
          for (int64_t tt = 0; tt < n; ++tt) {
            const int64_t t = t0 + tt - j;
            dst[tt] = t >= 0 && t < Tin ? xr[t] : 0.0f;
          }
        }
      out.resize(size_t(Cout * n));
      for (int64_t r = 0; r < S; ++r) {
        const int64_t mr = taps[size_t(r)];
        const int64_t nr = std::min(n, (T_out - r + S - 1) / S - t0);  // columns of this phase
        if (nr <= 0) continue;
        for (int64_t co = 0; co < Cout; ++co) std::fill_n(out.data() + co * n, nr, bias ? bias[co] : 0.0f);
        if (mr > 0) gemm_serial(Cout, nr, mr * Cin, A[size_t(r)].data(), mr * Cin, B.data(), n, out.data(), n, true);
        for (int64_t co = 0; co < Cout; ++co) {
          float* yr = y + co * T_out + t0 * S + r;
          const float* o = out.data() + co * n;
          for (int64_t tt = 0; tt < nr; ++tt) yr[tt * S] = o[tt];
        }
      }
    }
  });
}

}  // namespace

void conv_transpose1d(const ConvTranspose1dShape& s, const float* x, const float* w,
                      const float* bias, float* y) {
  const int64_t cin_g = s.in_channels / s.groups, cout_g = s.out_channels / s.groups;
  const int64_t K = s.kernel, S = s.stride, Tin = s.length_in, T_out = s.length_out();
  if (T_out <= 0) return;
  if (s.groups == 1 && Tin >= kPolyMin) {
    polyphase(s, x, w, bias, y);
    return;
  }
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
