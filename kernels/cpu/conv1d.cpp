// CPU conv1d. Four paths, by shape:
//   pointwise (K = 1, stride 1): one GEMM on the input itself;
//   few channels (Cout <= 4 or Cin*K <= 8, e.g. the first and last SEANet convs): direct
//     loops, vectorized along time;
//   short signals (T_out <= kWhole): one im2col of the whole signal and a threaded GEMM split
//     over output channels, so the weights are streamed once;
//   long signals: per time tile (cache-sized), tiles in parallel; stride-1 tiles clear of the
//     left edge hand the GEMM row pointers into x (it packs from there, no im2col copy), the
//     others im2col.
// Bias is the GEMM's initial value; `accumulate` adds into y instead (residual fusion).
#include <algorithm>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/scratch.h"
#include "kernels/ops.h"

namespace mimi::cpu {
namespace {

constexpr int64_t kTile = 256;   // output steps per im2col tile
constexpr int64_t kWhole = 512;  // up to this many output steps: one whole-signal im2col
constexpr int64_t kDirectChunk = 4096;

void init_rows(int64_t rows, int64_t cols, int64_t ld, const float* bias, float* y, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * ld;
    if (!accumulate) std::fill(row, row + cols, bias ? bias[r] : 0.0f);
    else if (bias)
      for (int64_t c = 0; c < cols; ++c) row[c] += bias[r];
  }
}

// The input left of x[:, 0]: the streaming context, or the padding value.
inline float left_of(const Conv1dShape& s, const float* xr, const float* ctx_row, int64_t idx) {
  if (ctx_row) return ctx_row[s.pad_left() + idx];
  return s.pad == PadMode::Replicate ? xr[0] : 0.0f;
}

// col[(ci*K + k), j] = x[ci, (t0 + j) * stride + k * dilation - P] (context/padding left of 0);
// ctx: [cin_g, P] rows for these channels, or nullptr.
void im2col(const Conv1dShape& s, const float* x, const float* ctx, int64_t cin_g, int64_t t0, int64_t n, float* col) {
  const int64_t K = s.kernel, P = s.pad_left();
  for (int64_t ci = 0; ci < cin_g; ++ci) {
    const float* xr = x + ci * s.length_in;
    const float* cr = ctx ? ctx + ci * P : nullptr;
    for (int64_t k = 0; k < K; ++k) {
      float* dst = col + (ci * K + k) * n;
      const int64_t first = t0 * s.stride + k * s.dilation - P;
      int64_t j = 0;
      for (; j < n && first + j * s.stride < 0; ++j) dst[j] = left_of(s, xr, cr, first + j * s.stride);
      if (s.stride == 1) std::copy(xr + first + j, xr + first + n, dst + j);
      else
        for (; j < n; ++j) dst[j] = xr[first + j * s.stride];
    }
  }
}

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Strided (dilation 1) conv tile without im2col: input position t*S + k - P with k - P = q*S + r
// is phase r of the input at step t + q, so the tile's input is split once into its S phases
// (ph[ci, r, v] = x[ci, (t0 + qmin + v)*S + r], ELU'd here when the conv reads ELU(x)), and im2col
// row (ci, k) is phase r of channel ci from v = q - qmin: a pointer, not a copy.
// ph: [cin_g, S, V] with V = n + qmax - qmin <= n + K; rows: [cin_g*K].
void deinterleave(const Conv1dShape& s, const float* x, const float* ctx, int64_t cin_g, int64_t t0, int64_t n,
                  float* ph, const float** rows) {
  const int64_t S = s.stride, K = s.kernel, P = s.pad_left(), Tin = s.length_in;
  const int64_t qmin = floor_div(-P, S), qmax = floor_div(K - 1 - P, S), V = n + qmax - qmin;
  const int64_t base = (t0 + qmin) * S;  // input position of ph[ci, 0, 0]
  for (int64_t ci = 0; ci < cin_g; ++ci) {
    const float* xr = x + ci * Tin;
    const float* cr = ctx ? ctx + ci * P : nullptr;
    float* pc = ph + ci * S * V;
    // steps v whose S positions all lie in [0, Tin): plain strided reads, no per-element tests
    const int64_t v_lo = std::clamp<int64_t>(floor_div(-base + S - 1, S), 0, V);
    const int64_t v_hi = std::clamp<int64_t>(floor_div(Tin - S - base, S) + 1, v_lo, V);
    const auto edge = [&](int64_t v, int64_t r) {
      // before -P or past the end: positions of phases that no tap reads there
      const int64_t pos = base + v * S + r;
      pc[r * V + v] = pos < -P ? 0.0f : pos < 0 ? left_of(s, xr, cr, pos) : pos < Tin ? xr[pos] : 0.0f;
    };
    // The next channel's row: requested now, it arrives while this row is split.
    if (ci + 1 < cin_g) {
      const int64_t lo = std::max<int64_t>(base, 0);
      prefetch_span(xr + Tin + lo, std::min(base + V * S, Tin) - lo);
    }
    for (int64_t r = 0; r < S; ++r) {
      for (int64_t v = 0; v < v_lo; ++v) edge(v, r);
      const float* src = xr + base + r;
      float* dst = pc + r * V;
      for (int64_t v = v_lo; v < v_hi; ++v) dst[v] = src[v * S];
      for (int64_t v = v_hi; v < V; ++v) edge(v, r);
      if (s.elu_input) elu_serial(V, dst, dst);  // while the row is in L1
    }
    for (int64_t k = 0; k < K; ++k) {
      const int64_t q = floor_div(k - P, S), r = k - P - q * S;
      rows[ci * K + k] = pc + r * V + (q - qmin);
    }
  }
}

// Kernel 2S, stride S (every SEANet downsample): output t = Wlo X[t-1] + Whi X[t], X[u] the S
// input steps of frame u (all channels), Wlo / Whi taps 0..S-1 / S..2S-1. For a pair (t, t+1)
// of outputs, t even, Karatsuba's trick takes three products instead of four:
//   m2 = (Wlo + Whi) X[t],  y[t] = m2 + Wlo (X[t-1] - X[t]),  y[t+1] = m2 + Whi (X[t+1] - X[t]),
// 3/4 of the conv's multiply-adds. The pairs start at each call's first output, so a stream cut
// into chunks of an even number of outputs (every Mimi stage this path runs on) sums like the
// whole signal. Rounding: the differences are exact for equal-sign neighbours within 2x and
// carry one rounding otherwise; the sums stay within the GEMM's own error bound (tested
// against the reference in tests/test_kernels.cpp).
struct PairWeights {
  std::vector<float> lo, hi, sum;  // [Cout, Cin*S] each: (ci, r) -> tap r, S + r, their sum
};
void pair_weights(const Conv1dShape& s, const float* w, PairWeights& pw) {
  const int64_t S = s.stride, Cin = s.in_channels, Cout = s.out_channels, R = Cin * S;
  for (auto* v : {&pw.lo, &pw.hi, &pw.sum}) v->resize(size_t(Cout * R));
  parallel_for(Cout, 8, [&](int64_t c0, int64_t c1) {
    for (int64_t co = c0; co < c1; ++co)
      for (int64_t ci = 0; ci < Cin; ++ci)
        for (int64_t r = 0; r < S; ++r) {
          const float a = w[(co * Cin + ci) * 2 * S + r], b = w[(co * Cin + ci) * 2 * S + S + r];
          const size_t i = size_t(co * R + ci * S + r);
          pw.lo[i] = a;
          pw.hi[i] = b;
          pw.sum[i] = a + b;
        }
  });
}

// Adds one tile of n outputs from t0 (t0 even) into y (rows ldy apart, bias already there),
// given the deinterleaved phases ph [Cin, S, V = n + 1] (ph[ci, r, v] = input step
// (t0 - 1 + v)*S + r, in frame t0 - 1 + v). scratch: grow-only.
void pair_tile(const Conv1dShape& s, const PairWeights& pw, const float* ph, int64_t n, float* y, int64_t ldy,
               std::vector<float>& scratch, std::vector<const float*>& rows) {
  const int64_t S = s.stride, Cin = s.in_channels, Cout = s.out_channels, R = Cin * S, V = n + 1;
  const int64_t np = n / 2;  // pairs; an odd last output is summed directly below
  scratch.resize(size_t(std::max(3 * R * np + 2 * Cout * np, 2 * R)));
  float* e = scratch.data();  // [R, np] X[t]      (t = t0 + 2u)
  float* d1 = e + R * np;     // [R, np] X[t-1] - X[t]
  float* d3 = d1 + R * np;    // [R, np] X[t+1] - X[t]
  float* ye = d3 + R * np;    // [Cout, np] y[t]
  float* yo = ye + Cout * np; // [Cout, np] y[t+1]
  if (np > 0) {
    rows.resize(size_t(R));
    for (int64_t row = 0; row < R; ++row) rows[size_t(row)] = ph + row * V + 1;  // X[t0] of row (ci, r)
    pair_operands(R, np, rows.data(), e, d1, d3);
    gemm_pairs(Cout, np, R, pw.sum.data(), R, pw.lo.data(), R, pw.hi.data(), R, e, d1, d3, ye, yo);
    for (int64_t co = 0; co < Cout; ++co) {
      float* yr = y + co * ldy;
      const float *a = ye + co * np, *c = yo + co * np;
      for (int64_t u = 0; u < np; ++u) {
        yr[2 * u] += a[u];
        yr[2 * u + 1] += c[u];
      }
    }
  }
  if (n % 2) {  // the last output alone: Wlo X[t-1] + Whi X[t]
    const int64_t t = n - 1;
    float* col = e;  // [2R]: rows (ci, r) of X[t-1], then of X[t]
    for (int64_t row = 0; row < R; ++row) {
      col[row] = ph[row * V + t];
      col[R + row] = ph[row * V + t + 1];
    }
    for (int64_t co = 0; co < Cout; ++co) {
      const float *lo = pw.lo.data() + co * R, *hi = pw.hi.data() + co * R;
      float acc = 0.0f;
      for (int64_t row = 0; row < R; ++row) acc += lo[row] * col[row] + hi[row] * col[R + row];
      y[co * ldy + t] += acc;
    }
  }
}

void direct(const Conv1dShape& s, const float* x, const float* w, const float* bias, float* y, bool accumulate,
            const float* ctx) {
  const int64_t T_out = s.length_out(), P = s.pad_left(), K = s.kernel, Cin = s.in_channels;
  // Outputs per window: the window, Cin rows of about chunk*stride floats, stays within half
  // the L2 (the conv rereads it K times per output block). parallel_for hands one thread the
  // whole range, so the range is walked chunk by chunk here.
  const int64_t chunk =
      even_tile(T_out, std::clamp<int64_t>(65536 / (Cin * s.stride) / 64 * 64, 256, kDirectChunk), 64);
  parallel_for(T_out, chunk, [&](int64_t begin, int64_t end) {
    for (int64_t t0 = begin; t0 < end; t0 += chunk) {
      const int64_t n = std::min(chunk, end - t0);
      // this chunk's input window with its padding materialized: [Cin, span + (n-1)*stride]
      const int64_t L = (n - 1) * s.stride + s.span();
      std::vector<float>& win = MIMI_THREAD_SCRATCH(std::vector<float>);
      win.resize(static_cast<size_t>(Cin * L));
      for (int64_t ci = 0; ci < Cin; ++ci) {
        const float* xr = x + ci * s.length_in;
        const float* cr = ctx ? ctx + ci * P : nullptr;
        const int64_t first = t0 * s.stride - P;
        float* wr = win.data() + ci * L;
        int64_t j = 0;
        for (; j < L && first + j < 0; ++j) wr[j] = left_of(s, xr, cr, first + j);  // at most P values
        if (!s.elu_input) {
          std::copy(xr + first + j, xr + first + L, wr + j);
          continue;
        }
        elu_serial(j, wr, wr);
        elu_serial(L - j, xr + first + j, wr + j);  // straight from x: no copy pass first
      }
      for (int64_t co = 0; co < s.out_channels; ++co) {
        float* yr = y + co * T_out + t0;
        init_rows(1, n, 0, bias ? bias + co : nullptr, yr, accumulate);
        conv_direct_row(n, Cin, K, s.stride, s.dilation, win.data(), L, w + co * Cin * K, yr);
      }
    }
  });
}

}  // namespace

void conv1d(const Conv1dShape& s, const float* x, const float* w, const float* bias, float* y, bool accumulate,
            const float* context) {
  const int64_t cin_g = s.in_channels / s.groups, cout_g = s.out_channels / s.groups;
  const int64_t T_out = s.length_out(), P = s.pad_left(), K = s.kernel, Tin = s.length_in;
  if (T_out <= 0) return;
  const int64_t rows = cin_g * K;  // GEMM inner dimension
  const float* ctx = P > 0 ? context : nullptr;

  const bool direct_path = s.groups == 1 && (cout_g <= 4 || rows <= 8);
  const bool phase_path = T_out > kWhole && s.stride > 1 && s.dilation == 1;
  if (s.elu_input && !direct_path && !phase_path) {
    // The paths that do not fuse it: ELU once into a copy (im2col would repeat it K times),
    // then the plain conv.
    std::vector<float>& xe = MIMI_THREAD_SCRATCH(std::vector<float>);
    std::vector<float>& ce = MIMI_THREAD_SCRATCH(std::vector<float>);  // grow-only
    if (xe.size() < size_t(s.in_channels * Tin)) xe.resize(size_t(s.in_channels * Tin));
    if (ctx && ce.size() < size_t(s.in_channels * P)) ce.resize(size_t(s.in_channels * P));
    float *xp = xe.data(), *cp = ce.data();  // (thread_local: name them here)
    elu(s.in_channels * Tin, x, xp);
    if (ctx) elu(s.in_channels * P, ctx, cp);
    Conv1dShape plain = s;
    plain.elu_input = false;
    conv1d(plain, xp, w, bias, y, accumulate, ctx ? cp : nullptr);
    return;
  }

  // pointwise: the input already is the B operand (not with ELU on it: the direct path fuses it,
  // and every other path took the ELU copy above)
  if (K == 1 && s.stride == 1 && P == 0 && !s.elu_input) {
    for (int64_t g = 0; g < s.groups; ++g) {
      float* yg = y + g * cout_g * T_out;
      init_rows(cout_g, T_out, T_out, bias ? bias + g * cout_g : nullptr, yg, accumulate);
      gemm(cout_g, T_out, cin_g, w + g * cout_g * cin_g, cin_g, x + g * cin_g * Tin, Tin, yg, T_out, true);
    }
    return;
  }
  if (direct_path) {
    direct(s, x, w, bias, y, accumulate, P > 0 ? context : nullptr);
    return;
  }
  if (T_out <= kWhole) {
    std::vector<float>& col = MIMI_THREAD_SCRATCH(std::vector<float>);  // [Cin_g*K, T_out], grow-only
    if (col.size() < size_t(rows * T_out)) col.resize(size_t(rows * T_out));
    float* colp = col.data();  // (thread_local: name it here, workers have their own)
    for (int64_t g = 0; g < s.groups; ++g) {
      parallel_for(cin_g, 16, [&](int64_t c0, int64_t c1) {
        im2col(s, x + (g * cin_g + c0) * Tin, ctx ? ctx + (g * cin_g + c0) * P : nullptr, c1 - c0, 0, T_out,
               colp + c0 * K * T_out);
      });
      float* yg = y + g * cout_g * T_out;
      init_rows(cout_g, T_out, T_out, bias ? bias + g * cout_g : nullptr, yg, accumulate);
      gemm(cout_g, T_out, rows, w + g * cout_g * rows, rows, colp, T_out, yg, T_out, true);
    }
    return;
  }
  // tiles of an even number of steps (a Karatsuba pair never straddles two), as many as a
  // multiple of the threads where T_out allows
  const int64_t tile = even_tile(T_out, kTile, 16), tiles = (T_out + tile - 1) / tile;
  const bool pairs = phase_path && s.groups == 1 && K == 2 * s.stride;  // see PairWeights
  PairWeights& pw = MIMI_THREAD_SCRATCH(PairWeights);
  if (pairs) pair_weights(s, w, pw);
  const PairWeights& pwr = pw;  // (thread_local: name it here, workers have their own)
  parallel_for(tiles * s.groups, 1, [&](int64_t b, int64_t e) {
    std::vector<float>& pair_scratch = MIMI_THREAD_SCRATCH(std::vector<float>);
    std::vector<const float*>& pair_rows = MIMI_THREAD_SCRATCH(std::vector<const float*>);
    std::vector<float>& col = MIMI_THREAD_SCRATCH(std::vector<float>);  // [Cin_g*K, kTile], or the phases [Cin_g, S, V]
    std::vector<const float*>& brows = MIMI_THREAD_SCRATCH(std::vector<const float*>);  // [Cin_g*K]: im2col rows read in place
    col.resize(static_cast<size_t>(phase_path ? cin_g * s.stride * (kTile + K) : rows * kTile));
    brows.resize(static_cast<size_t>(rows));
    for (int64_t job = b; job < e; ++job) {
      const int64_t g = job / tiles, t0 = (job % tiles) * tile;
      const int64_t n = std::min(tile, T_out - t0);
      float* yg = y + g * cout_g * T_out + t0;
      init_rows(cout_g, n, T_out, bias ? bias + g * cout_g : nullptr, yg, accumulate);
      const float* wg = w + g * cout_g * rows;
      if (s.stride == 1 && t0 >= P) {  // im2col row (ci, k) is x[ci] from t0 + k*d - P: no copy
        for (int64_t ci = 0; ci < cin_g; ++ci)
          for (int64_t k = 0; k < K; ++k) brows[size_t(ci * K + k)] = x + (g * cin_g + ci) * Tin + t0 + k * s.dilation - P;
        gemm_serial_rows(cout_g, n, rows, wg, rows, brows.data(), yg, T_out, true);
        continue;
      }
      if (phase_path) {
        deinterleave(s, x + g * cin_g * Tin, ctx ? ctx + g * cin_g * P : nullptr, cin_g, t0, n, col.data(),
                     brows.data());
        if (pairs) pair_tile(s, pwr, col.data(), n, yg, T_out, pair_scratch, pair_rows);
        else gemm_serial_rows(cout_g, n, rows, wg, rows, brows.data(), yg, T_out, true);
        continue;
      }
      im2col(s, x + g * cin_g * Tin, ctx ? ctx + g * cin_g * P : nullptr, cin_g, t0, n, col.data());
      gemm_serial(cout_g, n, rows, wg, rows, col.data(), n, yg, T_out, true);
    }
  });
}

}  // namespace mimi::cpu
