// CPU transposed conv1d with the causal right trim.
//   groups == 1, long inputs: polyphase. Output phase r (o = t*stride + r) only meets taps
//                k = r + j*stride: y[co, t*S + r] = sum_(j,ci) W[ci, co, r + jS] x[ci, t - j],
//                one GEMM per time tile for all phases stacked (the shifted-input matrix is
//                packed once), each output written once (no overlap-add pass). The per-call
//                weight repack is Cin*Cout*K floats, negligible against 2*Cin*Cout*K*T flops
//                once T is long.
//   groups == 1, short inputs: Z[(co,k), t] = sum_ci W^T[(co,k), ci] x[ci, t] (one GEMM per
//                time tile), then overlap-add y[co, t*stride + k] += Z[(co,k), t].
//   otherwise  : direct loops per group (Mimi's only grouped case is depthwise, 1 in/out
//                channel per group, where there is nothing to multiply as a matrix).
#include <algorithm>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/scratch.h"
#include "kernels/ops.h"

namespace mimi::cpu {
namespace {
constexpr int64_t kTile = 512;       // input time steps per GEMM tile
constexpr int64_t kPolyMin = 1024;   // input steps from which the polyphase path pays
constexpr int64_t kPolyTile = 256;   // output steps per phase per tile

// One polyphase tile of n input steps from t0 (even) by output-step pairs (see polyphase's
// `pairs`): A [S*Cout, 2*Cin] the stacked phases, psum [S*Cout, Cin] their two halves summed.
void pair_tile(const ConvTranspose1dShape& s, const float* A, const float* psum, const float* x, int64_t t0,
               int64_t n, int64_t T_out, const float* bias, float* y) {
  const int64_t S = s.stride, Cin = s.in_channels, Cout = s.out_channels, Tin = s.length_in, M = S * Cout;
  const int64_t np = n / 2;
  std::vector<float>& buf = MIMI_THREAD_SCRATCH(std::vector<float>);
  std::vector<float>& edge = MIMI_THREAD_SCRATCH(std::vector<float>);  // grow-only
  std::vector<const float*>& rows = MIMI_THREAD_SCRATCH(std::vector<const float*>);
  buf.resize(size_t(3 * Cin * np + 2 * M * np + M));
  float* e = buf.data();       // [Cin, np] x[t]           (t = t0 + 2u)
  float* d1 = e + Cin * np;    // [Cin, np] x[t-1] - x[t]
  float* d3 = d1 + Cin * np;   // [Cin, np] x[t+1] - x[t]
  float* ze = d3 + Cin * np;   // [M, np] Z[t]
  float* zo = ze + M * np;     // [M, np] Z[t+1]
  float* last = zo + M * np;   // [M] Z of an odd tile's last step
  const auto xat = [&](const float* xr, int64_t t) { return t >= 0 && t < Tin ? xr[t] : 0.0f; };
  if (np > 0) {
    // rows of x read in place where steps t0 - 1 .. t0 + 2*np are all inside, else copied with
    // their zeros (edge [Cin, 2*np + 1], from step t0 - 1)
    const bool inside = t0 >= 1 && t0 + 2 * np <= Tin;
    if (!inside) edge.resize(size_t(Cin * (2 * np + 1)));
    rows.resize(size_t(Cin));
    for (int64_t ci = 0; ci < Cin; ++ci) {
      const float* xr = x + ci * Tin;
      if (inside) {
        rows[size_t(ci)] = xr + t0;
        continue;
      }
      float* dst = edge.data() + ci * (2 * np + 1);
      for (int64_t i = 0; i < 2 * np + 1; ++i) dst[i] = xat(xr, t0 - 1 + i);
      rows[size_t(ci)] = dst + 1;
    }
    pair_operands(Cin, np, rows.data(), e, d1, d3);
    gemm_pairs(M, np, Cin, psum, Cin, A + Cin, 2 * Cin, A, 2 * Cin, e, d1, d3, ze, zo);  // P1 then P0
  }
  if (n % 2) {  // the last step alone: P0 x[t] + P1 x[t-1]
    const int64_t t = t0 + n - 1;
    for (int64_t rc = 0; rc < M; ++rc) {
      const float *p0 = A + rc * 2 * Cin, *p1 = p0 + Cin;
      float acc = 0.0f;
      for (int64_t ci = 0; ci < Cin; ++ci) acc += p0[ci] * xat(x + ci * Tin, t) + p1[ci] * xat(x + ci * Tin, t - 1);
      last[rc] = acc;
    }
  }
  // interleave the phases into y with the bias, as polyphase's GEMM path does
  for (int64_t co = 0; co < Cout; ++co) {
    float* yr = y + co * T_out + t0 * S;
    const float b = bias ? bias[co] : 0.0f;
    for (int64_t tt = 0; tt < n; ++tt) {
      const bool odd_last = tt == n - 1 && n % 2;
      const float* src = tt % 2 ? zo : ze;
      for (int64_t r = 0; r < S && (t0 + tt) * S + r < T_out; ++r)
        yr[tt * S + r] = (odd_last ? last[r * Cout + co] : src[(r * Cout + co) * np + tt / 2]) + b;
    }
  }
}

void polyphase(const ConvTranspose1dShape& s, const float* x, const float* w, const float* bias, float* y) {
  const int64_t K = s.kernel, S = s.stride, Cin = s.in_channels, Cout = s.out_channels, Tin = s.length_in;
  const int64_t T_out = s.length_out(), m = (K + S - 1) / S;  // taps per phase, at most
  // All phases stacked into one A [S*Cout, m*Cin]: A[(r, co), (j, ci)] = W[ci, co, r + j*S], zero
  // where r + j*S >= K (none for Mimi, whose K = 2S). One GEMM per tile then packs the shared
  // shifted-input matrix once for all S phases instead of once per phase.
  std::vector<float>& A_store = MIMI_THREAD_SCRATCH(std::vector<float>);  // grow-only
  if (A_store.size() < size_t(S * Cout * m * Cin)) A_store.resize(size_t(S * Cout * m * Cin));
  float* A = A_store.data();  // (thread_local: name it here, workers have their own)
  // Repacked by 16 x 16 blocks of (co, ci): each ci's 16 * K taps are one contiguous run of w,
  // each (r, co, j) row of A gets a 16-float run. (Read in A's order instead, each value was a
  // cache miss, consecutive ci being Cout*K floats apart in w: 13% of the 512 -> 256
  // conv-transpose's time.)
  constexpr int64_t kB = 16;
  const int64_t taps = S * m;
  parallel_for((Cout + kB - 1) / kB, 1, [&](int64_t b, int64_t e) {  // up to 1.5M floats (512 -> 256, K 12)
    std::vector<float> tile(size_t(kB * taps * kB));  // [co - co0][tap r + j*S][ci - ci0], zero past K
    for (int64_t co0 = b * kB; co0 < std::min(Cout, e * kB); co0 += kB) {
      const int64_t nco = std::min(kB, Cout - co0);
      for (int64_t ci0 = 0; ci0 < Cin; ci0 += kB) {
        const int64_t nci = std::min(kB, Cin - ci0);
        std::fill(tile.begin(), tile.end(), 0.0f);
        for (int64_t c = 0; c < nci; ++c) {
          const float* src = w + ((ci0 + c) * Cout + co0) * K;  // [nco][K], contiguous
          for (int64_t o = 0; o < nco; ++o)
            for (int64_t k = 0; k < K; ++k) tile[size_t((o * taps + k) * kB + c)] = src[o * K + k];
        }
        for (int64_t o = 0; o < nco; ++o)
          for (int64_t r = 0; r < S; ++r)
            for (int64_t j = 0; j < m; ++j)
              std::copy_n(tile.data() + (o * taps + r + j * S) * kB, nci,
                          A + ((r * Cout + co0 + o) * m + j) * Cin + ci0);
      }
    }
  });
  // Two taps per phase (Mimi's K = 2S): Z[t] = P0 x[t] + P1 x[t-1], P_j = A's columns (j, .). A
  // pair (t, t+1) of output steps, t even from the tile's start, takes three products instead of
  // four (Karatsuba, as conv1d's output pairs): m2 = (P0 + P1) x[t], Z[t] = m2 + P1 (x[t-1] -
  // x[t]), Z[t+1] = m2 + P0 (x[t+1] - x[t]). Psum [S*Cout, Cin] = P0 + P1.
  const bool pairs = m == 2;
  std::vector<float>& psum_store = MIMI_THREAD_SCRATCH(std::vector<float>);  // grow-only
  if (pairs) {
    if (psum_store.size() < size_t(S * Cout * Cin)) psum_store.resize(size_t(S * Cout * Cin));
    float* ps = psum_store.data();
    parallel_for(S * Cout, 64, [&](int64_t b, int64_t e) {
      for (int64_t rc = b; rc < e; ++rc)
        for (int64_t ci = 0; ci < Cin; ++ci) ps[rc * Cin + ci] = A[rc * 2 * Cin + ci] + A[rc * 2 * Cin + Cin + ci];
    });
  }
  const float* psum = psum_store.data();
  const int64_t cols = (T_out + S - 1) / S;  // phase-0 columns; other phases have as many or one less
  const int64_t tile = even_tile(cols, kPolyTile, 16), tiles = (cols + tile - 1) / tile;  // even steps (pairs)
  parallel_for(tiles, 1, [&](int64_t b, int64_t e) {
    std::vector<float>& B = MIMI_THREAD_SCRATCH(std::vector<float>);
    std::vector<float>& out = MIMI_THREAD_SCRATCH(std::vector<float>);
    std::vector<const float*>& rows = MIMI_THREAD_SCRATCH(std::vector<const float*>);  // B row (j, ci)
    for (int64_t i = b; i < e; ++i) {
      const int64_t t0 = i * tile, n = std::min(tile, cols - t0);
      if (pairs) {
        pair_tile(s, A, psum, x, t0, n, T_out, bias, y);
        continue;
      }
      // B[(j, ci), tt] = x[ci, t0 + tt - j], zero outside [0, Tin): rows of x read in place
      // where the tile is inside, copied with their zeros at the edges
      const bool inside = t0 >= m - 1 && t0 + n <= Tin;
      if (!inside) B.resize(size_t(m * Cin * n));
      rows.resize(size_t(m * Cin));
      for (int64_t j = 0; j < m; ++j)
        for (int64_t ci = 0; ci < Cin; ++ci) {
          const float* xr = x + ci * Tin;
          if (inside) {
            rows[size_t(j * Cin + ci)] = xr + t0 - j;
            continue;
          }
          float* dst = B.data() + (j * Cin + ci) * n;
          rows[size_t(j * Cin + ci)] = dst;
          // columns tt with 0 <= t0 + tt - j < Tin are a plain copy; zeros either side
          const int64_t lo = std::clamp<int64_t>(j - t0, 0, n), hi = std::clamp<int64_t>(Tin + j - t0, lo, n);
          std::fill(dst, dst + lo, 0.0f);
          std::copy(xr + t0 + lo - j, xr + t0 + hi - j, dst + lo);
          std::fill(dst + hi, dst + n, 0.0f);
        }
      out.resize(size_t(S * Cout * n));  // [(r, co), tt]
      gemm_serial_rows(S * Cout, n, m * Cin, A, m * Cin, rows.data(), out.data(), n, false);
      // interleave the phases into y, adding the bias: y's row written in order (strided
      // stores, one phase at a time, cost about a sixth of the GEMM)
      const int64_t whole = std::min(n, T_out / S - t0);  // steps where every phase has its column
      for (int64_t co = 0; co < Cout; ++co) {
        float* yr = y + co * T_out + t0 * S;
        const float* o = out.data() + co * n;  // phase r at o + r * Cout * n
        const float b = bias ? bias[co] : 0.0f;
        for (int64_t tt = 0; tt < whole; ++tt)
          for (int64_t r = 0; r < S; ++r) yr[tt * S + r] = o[r * Cout * n + tt] + b;
        for (int64_t tt = std::max<int64_t>(whole, 0); tt < n; ++tt)
          for (int64_t r = 0; r < S && (t0 + tt) * S + r < T_out; ++r) yr[tt * S + r] = o[r * Cout * n + tt] + b;
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

  std::vector<float>& z = MIMI_THREAD_SCRATCH(std::vector<float>);  // [Cout*K, tile], grow-only
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
