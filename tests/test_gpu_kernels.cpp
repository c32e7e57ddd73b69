// Every GPU kernel against the naive CPU reference, over the same kind of shape sweeps as the
// CPU tests (degenerate sizes included). Without a device the whole test reports itself as
// skipped (exit code 77, which ctest shows as "Skipped").
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/gpu/ops.h"
#include "kernels/ops.h"


using namespace mimi;

namespace {

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float uniform(float lo, float hi) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return lo + (hi - lo) * float(s >> 40) / 16777216.0f;
  }
};

std::vector<float> random_vec(size_t n, Rng& r, float lo = -1, float hi = 1) {
  std::vector<float> v(n);
  for (auto& x : v) x = r.uniform(lo, hi);
  return v;
}

struct Dev {  // a device copy of a host vector
  float* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<float>& h) : n(h.size()) {
    p = gpu::alloc(n);
    if (n) gpu::upload(p, h.data(), n);
  }
  explicit Dev(size_t count) : n(count) { p = gpu::alloc(n); }
  ~Dev() { gpu::release(p); }
  std::vector<float> host() const {
    std::vector<float> h(n);
    gpu::synchronize();
    if (n) gpu::download(h.data(), p, n);
    return h;
  }
};

void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double rel, double abs = 1e-6) {
  REQUIRE(got.size() == ref.size());
  double mx = 0, worst = 0;
  for (float x : ref) mx = std::max(mx, double(std::fabs(x)));
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    if (!(d <= worst)) worst = d;
  }
  INFO("worst |gpu-ref| = " << worst << ", tolerance " << rel * mx + abs);
  CHECK(worst <= rel * mx + abs);
}

// Columns [from, from + n) of a row-major [rows, T] matrix.
std::vector<float> columns(const std::vector<float>& x, int64_t rows, int64_t T, int64_t from, int64_t n) {
  std::vector<float> y(size_t(rows * n));
  for (int64_t r = 0; r < rows; ++r) std::copy_n(x.begin() + r * T + from, n, y.begin() + r * n);
  return y;
}

// How many entries of part [rows, n] are not bitwise equal to columns [from, from + n) of whole [rows, T].
int64_t count_differ(const std::vector<float>& part, const std::vector<float>& whole, int64_t rows, int64_t T,
                     int64_t from, int64_t n) {
  int64_t differ = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) differ += part[size_t(r * n + j)] != whole[size_t(r * T + from + j)];
  return differ;
}

}  // namespace

TEST_CASE("gpu gemm") {
  Rng r(1);
  // M or N < 32 take the one-output-per-thread kernel, the rest the register-tiled one: whole
  // 64 x 64 tiles, ragged edges, K below, at and across the 16-wide step, a streaming step's N
  struct Case { int64_t M, N, K; };
  for (const Case& c : {Case{1, 1, 1}, Case{7, 33, 5}, Case{300, 2, 64}, Case{31, 200, 40}, Case{64, 250, 512},
                        Case{97, 257, 129}, Case{64, 64, 16}, Case{128, 192, 48}, Case{65, 65, 17}, Case{33, 1000, 3},
                        Case{200, 40, 1}, Case{32, 32, 0}}) {
    const auto [M, N, K] = c;
    // dense, and with padded row strides that are not multiples of 4 (the scalar-load variant)
    for (const int64_t pad : {int64_t(0), int64_t(3)}) {
      const int64_t lda = K + pad, ldb = N + pad, ldc = N + pad;
      auto A = random_vec(size_t(M * lda), r), B = random_vec(size_t(std::max<int64_t>(K, 1) * ldb), r);
      auto C = random_vec(size_t(M * ldc), r);
      for (bool acc : {false, true}) {
        INFO("M " << M << " N " << N << " K " << K << " pad " << pad << " accumulate " << acc);
        auto ref_c = C;
        ref::gemm(M, N, K, A.data(), lda, B.data(), ldb, ref_c.data(), ldc, acc);
        Dev a(A), b(B), dc(C);
        gpu::gemm(M, N, K, a.p, lda, b.p, ldb, dc.p, ldc, acc);
        expect_close(dc.host(), ref_c, 1e-5);
      }
    }
  }
}

TEST_CASE("gpu gemm: a column's value does not depend on N or on the kernel") {
  // The batched plans put several streams' columns side by side in one GEMM; each stream's
  // columns must come out bitwise as in a GEMM of its own (issue 14: batched == single).
  Rng r(11);
  const int64_t M = 150, K = 300, N = 100;
  auto A = random_vec(size_t(M * K), r), B = random_vec(size_t(K * N), r);
  Dev a(A), b(B), wide(size_t(M * N));
  gpu::gemm(M, N, K, a.p, K, b.p, N, wide.p, N, false);  // tiled kernel
  const auto all = wide.host();
  for (const int64_t n : {int64_t(1), int64_t(2), int64_t(31), int64_t(40)}) {  // small and tiled kernels
    for (const int64_t first : {int64_t(0), N - n}) {
      Dev bn(columns(B, K, N, first, n)), narrow(size_t(M * n));
      gpu::gemm(M, n, K, a.p, K, bn.p, n, narrow.p, n, false);
      INFO("n " << n << " first column " << first);
      CHECK(count_differ(narrow.host(), all, M, N, first, n) == 0);
    }
  }
}

TEST_CASE("gpu gemm sums in the GPU backend's one order, whatever the kernel") {
  // kernels/gpu/gemm_tile.h: chunks of 32 consecutive k, each summed with fmaf from 0 in k order,
  // the chunk sums added in chunk order from 0. The host computes that order here with the same
  // fmaf; every kernel (tiled, split-K, 16 x 16) must give exactly those bits, so none can drift
  // from the contract the equality tests (batched == alone, streaming == offline) rely on.
  auto chunked = [](const float* a, const float* b, int64_t ldb, int64_t K) {
    float total = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += 32) {
      float part = 0.0f;
      for (int64_t k = k0; k < std::min(K, k0 + 32); ++k) part = std::fma(a[k], b[k * ldb], part);
      total += part;
    }
    return total;
  };
  Rng r(13);
  struct Case { int64_t M, N, K; };
  for (const Case& c : {Case{1, 1, 1}, Case{9, 3, 31}, Case{40, 1, 32}, Case{17, 5, 33}, Case{40, 40, 100},
                        Case{3, 40, 65}, Case{40, 8, 1100}, Case{64, 64, 2048}, Case{33, 31, 0}}) {
    const auto [M, N, K] = c;
    auto A = random_vec(size_t(M * std::max<int64_t>(K, 1)), r), B = random_vec(size_t(std::max<int64_t>(K, 1) * N), r);
    Dev a(A), b(B), dc(size_t(M * N));
    gpu::gemm(M, N, K, a.p, K, b.p, N, dc.p, N, false);
    const auto got = dc.host();
    int64_t differ = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) differ += got[size_t(i * N + j)] != chunked(&A[size_t(i * K)], &B[size_t(j)], N, K);
    INFO("M " << M << " N " << N << " K " << K);
    CHECK(differ == 0);
  }
}

TEST_CASE("gpu fused linear epilogues: bitwise the unfused ops") {
  // linear_gelu == linear then gelu_erf; linear_scale_add == linear then layer_scale_add; on the
  // small kernel (T < 32), the tiled one, and unaligned rows (in = 30: no float4 loads)
  Rng r(12);
  for (auto [in, out, T] : {std::array<int64_t, 3>{1, 1, 1}, {16, 24, 3}, {64, 96, 40}, {30, 70, 33}, {128, 64, 128}}) {
    INFO("in " << in << " out " << out << " T " << T);
    auto W = random_vec(size_t(out * in), r), x = random_vec(size_t(in * T), r, -3, 3);
    auto scale = random_vec(size_t(out), r), y0 = random_vec(size_t(out * T), r);
    Dev w(W), dx(x), ds(scale);
    Dev plain(size_t(out * T)), fused(size_t(out * T));
    gpu::linear(in, out, T, w.p, dx.p, plain.p);
    gpu::gelu_erf(out * T, plain.p, plain.p);
    gpu::linear_gelu(in, out, T, w.p, dx.p, fused.p);
    const auto gp = plain.host(), gf = fused.host();
    CHECK(std::memcmp(gp.data(), gf.data(), gp.size() * sizeof(float)) == 0);
    Dev h(size_t(out * T)), ya(y0), yb(y0);
    gpu::linear(in, out, T, w.p, dx.p, h.p);
    gpu::layer_scale_add(out, T, ds.p, h.p, ya.p);
    gpu::linear_scale_add(in, out, T, w.p, dx.p, ds.p, yb.p);
    const auto sa = ya.host(), sb = yb.host();
    CHECK(std::memcmp(sa.data(), sb.data(), sa.size() * sizeof(float)) == 0);
    // and against the reference ops
    std::vector<float> ref_h(size_t(out * T)), ref_y = y0;
    ref::linear(in, out, T, W.data(), x.data(), ref_h.data());
    ref::layer_scale_add(out, T, scale.data(), ref_h.data(), ref_y.data());
    expect_close(sb, ref_y, 1e-5, 1e-5);
    ref::gelu_erf(out * T, ref_h.data(), ref_h.data());
    expect_close(gf, ref_h, 1e-5, 1e-5);
    // layer_norm_linear == layer_norm then linear (or linear_gelu); in = the normalized channels
    auto gamma = random_vec(size_t(in), r), beta = random_vec(size_t(in), r);
    Dev dgam(gamma), dbet(beta), normed(size_t(in * T)), stats(size_t(2 * T));
    gpu::layer_norm(in, T, dx.p, dgam.p, dbet.p, 1e-5f, normed.p);
    for (bool gelu : {false, true}) {
      Dev unfused(size_t(out * T)), fused_ln(size_t(out * T));
      if (gelu) gpu::linear_gelu(in, out, T, w.p, normed.p, unfused.p);
      else gpu::linear(in, out, T, w.p, normed.p, unfused.p);
      gpu::layer_norm_linear(in, out, T, w.p, dx.p, dgam.p, dbet.p, 1e-5f, gelu, stats.p, fused_ln.p);
      const auto u = unfused.host(), f = fused_ln.host();
      CHECK_MESSAGE(std::memcmp(u.data(), f.data(), u.size() * sizeof(float)) == 0, "layer_norm_linear gelu " << gelu);
    }
  }
}

TEST_CASE("gpu conv1d and conv_transpose1d") {
  Rng r(2);
  struct Case { int64_t cin, cout, k, stride, dil, groups, T; PadMode pad; };
  for (const Case& c : {Case{1, 1, 1, 1, 1, 1, 1, PadMode::Zero}, Case{1, 4, 7, 1, 1, 1, 5, PadMode::Zero},
                        Case{4, 8, 8, 4, 1, 1, 37, PadMode::Zero}, Case{6, 6, 3, 1, 2, 6, 30, PadMode::Zero},
                        Case{8, 8, 4, 2, 1, 1, 9, PadMode::Replicate}, Case{3, 5, 3, 1, 1, 1, 17, PadMode::Zero},
                        // more than one block of outputs per channel (kThreads = 256), odd tails
                        Case{2, 3, 3, 1, 1, 1, 300, PadMode::Replicate}, Case{2, 3, 4, 2, 3, 1, 517, PadMode::Zero},
                        // input shorter than the kernel span
                        Case{2, 2, 7, 3, 1, 1, 2, PadMode::Replicate},
                        // Cout and T_out >= 32: the implicit GEMM (tiled), whole and ragged tiles,
                        // Cin*K not a multiple of 4 (scalar loads of w), dilation, stride
                        Case{4, 64, 7, 1, 1, 1, 64, PadMode::Zero}, Case{3, 40, 7, 1, 1, 1, 70, PadMode::Replicate},
                        Case{33, 64, 3, 1, 3, 1, 100, PadMode::Replicate}, Case{8, 32, 8, 4, 1, 1, 200, PadMode::Zero},
                        Case{16, 70, 1, 1, 1, 1, 129, PadMode::Zero},
                        // groups 1 and T_out < 32: the split-K GEMM, K past one round of 32 chunks
                        // (300 x 4 = 1200 terms), rows not a multiple of its 8
                        Case{300, 40, 4, 1, 1, 1, 10, PadMode::Zero}, Case{40, 9, 3, 2, 1, 1, 20, PadMode::Replicate}}) {
    Conv1dShape s{c.cin, c.cout, c.k, c.stride, c.dil, c.groups, c.T, c.pad};
    auto x = random_vec(size_t(c.cin * c.T), r), w = random_vec(size_t(c.cout * (c.cin / c.groups) * c.k), r);
    auto b = random_vec(size_t(c.cout), r), ctx = random_vec(size_t(c.cin * s.pad_left()) + 1, r);
    for (int variant = 0; variant < 8; ++variant) {  // context x ELU input x accumulate
      const bool with_ctx = variant & 1, acc = variant & 4;
      s.elu_input = variant & 2;
      auto y = random_vec(size_t(c.cout * s.length_out()), r);
      Dev dx(x), dw(w), db(b), dc(ctx), dy(y);
      ref::conv1d(s, x.data(), w.data(), b.data(), y.data(), acc, with_ctx ? ctx.data() : nullptr);
      gpu::conv1d(s, dx.p, dw.p, db.p, dy.p, acc, with_ctx ? dc.p : nullptr);
      expect_close(dy.host(), y, 1e-5);
    }
  }
  struct TCase { int64_t cin, cout, k, stride, groups, T; bool trimmed; };
  for (const TCase& c : {TCase{1, 1, 1, 1, 1, 1, true}, TCase{4, 2, 16, 8, 1, 7, true}, TCase{6, 6, 4, 2, 6, 9, true},
                         TCase{5, 3, 12, 6, 1, 11, false}, TCase{3, 2, 5, 2, 1, 150, true},
                         TCase{2, 4, 3, 1, 2, 259, false},
                         // stride x Cout and T_out / stride >= 32: the stacked-phase GEMM (tiled);
                         // K = 2S as in Mimi, untrimmed, taps past K (K 5, S 2), stride 1
                         TCase{8, 16, 16, 8, 1, 40, true}, TCase{5, 12, 12, 6, 1, 33, false},
                         TCase{3, 40, 5, 2, 1, 70, true}, TCase{7, 33, 3, 1, 1, 100, true},
                         // groups 1 and fewer than 32 columns: the split-K GEMM (K 80 and 600)
                         TCase{40, 12, 16, 8, 1, 3, true}, TCase{300, 5, 4, 2, 1, 4, false}}) {
    ConvTranspose1dShape s{c.cin, c.cout, c.k, c.stride, c.groups, c.T};
    s.trimmed = c.trimmed;
    auto x = random_vec(size_t(c.cin * c.T), r), w = random_vec(size_t(c.cin * (c.cout / c.groups) * c.k), r);
    auto b = random_vec(size_t(c.cout), r);
    std::vector<float> y(size_t(c.cout * s.length_out()));
    ref::conv_transpose1d(s, x.data(), w.data(), b.data(), y.data());
    Dev dx(x), dw(w), db(b), dy(y.size());
    gpu::conv_transpose1d(s, dx.p, dw.p, db.p, dy.p);
    expect_close(dy.host(), y, 1e-5);
  }
}

TEST_CASE("gpu conv1d and conv_transpose1d: a prefix's outputs do not depend on the kernel") {
  // A streaming step's few outputs take the one-thread-per-output kernels, an offline chunk's
  // the tiled ones; both sum the same terms in the same order, so the outputs of a prefix of the
  // input are bitwise those of the whole input (streaming == offline needs no tolerance here).
  Rng r(12);
  {
    Conv1dShape s{16, 48, 3, 1, 2, 1, 120, PadMode::Replicate};
    s.elu_input = true;
    auto x = random_vec(size_t(s.in_channels * s.length_in), r), w = random_vec(size_t(48 * 16 * 3), r);
    auto b = random_vec(48, r);
    Dev dx(x), dw(w), db(b), whole(size_t(48 * s.length_out()));
    gpu::conv1d(s, dx.p, dw.p, db.p, whole.p, false, nullptr);  // 120 outputs: tiled
    Conv1dShape p = s;
    p.length_in = 6;
    Dev dxp(columns(x, 16, 120, 0, 6)), part(size_t(48 * p.length_out()));
    gpu::conv1d(p, dxp.p, dw.p, db.p, part.p, false, nullptr);  // 6 outputs: one thread each
    CHECK(count_differ(part.host(), whole.host(), 48, s.length_out(), 0, p.length_out()) == 0);
  }
  {  // fewer than 32 output channels: the one-thread-per-output kernel whole, split-K for the prefix
    Conv1dShape s{70, 8, 4, 1, 1, 1, 90, PadMode::Zero};
    auto x = random_vec(size_t(70 * 90), r), w = random_vec(size_t(8 * 70 * 4), r), b = random_vec(8, r);
    Dev dx(x), dw(w), db(b), whole(size_t(8 * s.length_out()));
    gpu::conv1d(s, dx.p, dw.p, db.p, whole.p, false, nullptr);
    Conv1dShape p = s;
    p.length_in = 5;
    Dev dxp(columns(x, 70, 90, 0, 5)), part(size_t(8 * p.length_out()));
    gpu::conv1d(p, dxp.p, dw.p, db.p, part.p, false, nullptr);
    CHECK(count_differ(part.host(), whole.host(), 8, s.length_out(), 0, p.length_out()) == 0);
  }
  {
    ConvTranspose1dShape s{40, 8, 8, 4, 1, 50};  // K = 2 x 40 terms: chunks of 32 cross the phases' taps
    auto x = random_vec(size_t(40 * 50), r), w = random_vec(size_t(40 * 8 * 8), r), b = random_vec(8, r);
    Dev dx(x), dw(w), db(b), whole(size_t(8 * s.length_out()));
    gpu::conv_transpose1d(s, dx.p, dw.p, db.p, whole.p);
    ConvTranspose1dShape p = s;
    p.length_in = 3;
    Dev dxp(columns(x, 40, 50, 0, 3)), part(size_t(8 * p.length_out()));
    gpu::conv_transpose1d(p, dxp.p, dw.p, db.p, part.p);
    CHECK(count_differ(part.host(), whole.host(), 8, s.length_out(), 0, p.length_out()) == 0);
  }
  {
    ConvTranspose1dShape s{12, 8, 8, 4, 1, 50};
    auto x = random_vec(size_t(12 * 50), r), w = random_vec(size_t(12 * 8 * 8), r), b = random_vec(8, r);
    Dev dx(x), dw(w), db(b), whole(size_t(8 * s.length_out()));
    gpu::conv_transpose1d(s, dx.p, dw.p, db.p, whole.p);  // 32 x 50 stacked phases: tiled
    ConvTranspose1dShape p = s;
    p.length_in = 3;
    Dev dxp(columns(x, 12, 50, 0, 3)), part(size_t(8 * p.length_out()));
    gpu::conv_transpose1d(p, dxp.p, dw.p, db.p, part.p);  // 12 outputs per channel: one thread each
    CHECK(count_differ(part.host(), whole.host(), 8, s.length_out(), 0, p.length_out()) == 0);
  }
}

TEST_CASE("gpu attention: a query's output does not depend on the call") {
  // Offline: 300 queries against all 300 keys. Streaming: the last 2 queries against the
  // window the cache holds (249 keys) plus themselves. The same query must come out bitwise.
  Rng r(13);
  const int64_t H = 2, hd = 64, T = 300, ctx = 250, Tq = 2, k0 = T - Tq - (ctx - 1);
  auto q = random_vec(size_t(H * hd * T), r, -2, 2), k = random_vec(size_t(H * hd * T), r, -2, 2);
  auto v = random_vec(size_t(H * hd * T), r);
  const float scale = 0.125f;
  Dev dq(q), dk(k), dv(v), all(size_t(H * hd * T));
  gpu::attention(H, T, T, hd, 0, 0, ctx, scale, dq.p, dk.p, dv.p, all.p);
  const int64_t rows = H * hd, Tk = T - k0;
  Dev sq(columns(q, rows, T, T - Tq, Tq)), sk(columns(k, rows, T, k0, Tk)), sv(columns(v, rows, T, k0, Tk));
  Dev step(size_t(rows * Tq));
  gpu::attention(H, Tq, Tk, hd, T - Tq, k0, ctx, scale, sq.p, sk.p, sv.p, step.p);
  CHECK(count_differ(step.host(), all.host(), rows, T, T - Tq, Tq) == 0);
}

TEST_CASE("gpu elementwise, layer norm, rope") {
  Rng r(3);
  for (int64_t n : {1, 17, 100000}) {
    auto x = random_vec(size_t(n), r, -6, 6), y0 = random_vec(size_t(n), r);
    std::vector<float> e(x.size()), g(x.size());
    ref::elu(n, x.data(), e.data());
    ref::gelu_erf(n, x.data(), g.data());
    Dev dx(x), de(static_cast<size_t>(n)), dg(static_cast<size_t>(n));
    gpu::elu(n, dx.p, de.p);
    gpu::gelu_erf(n, dx.p, dg.p);
    expect_close(de.host(), e, 0, 1e-6);
    expect_close(dg.host(), g, 0, 2e-6);
    auto a = y0;
    ref::add_inplace(n, x.data(), a.data());
    Dev dy(y0);
    gpu::add_inplace(n, dx.p, dy.p);
    expect_close(dy.host(), a, 0, 1e-6);
  }
  // LayerNorm blocks own 32 columns: partial last blocks, C below and above the 8 lanes
  for (auto [C, T] : {std::array<int64_t, 2>{1, 1}, {5, 3}, {512, 7}, {17, 200}, {3, 32}, {7, 33}, {512, 65}}) {
    CAPTURE(C); CAPTURE(T);
    auto x = random_vec(size_t(C * T), r, -3, 3), gm = random_vec(size_t(C), r), bt = random_vec(size_t(C), r);
    auto y0 = random_vec(size_t(C * T), r);
    std::vector<float> y(x.size());
    ref::layer_norm(C, T, x.data(), gm.data(), bt.data(), 1e-5f, y.data());
    Dev dx(x), dg(gm), db(bt), dy(y.size());
    gpu::layer_norm(C, T, dx.p, dg.p, db.p, 1e-5f, dy.p);
    const auto whole = dy.host();
    expect_close(whole, y, 1e-5, 1e-5);
    // column-invariant: a column range alone gives the whole's bits (batched == alone)
    for (auto [first, n] : {std::array<int64_t, 2>{0, 1}, {T - 1, 1}, {T / 2, T - T / 2}}) {
      Dev part(columns(x, C, T, first, n)), out(size_t(C * n));
      gpu::layer_norm(C, n, part.p, dg.p, db.p, 1e-5f, out.p);
      CHECK(count_differ(out.host(), whole, C, T, first, n) == 0);
    }
    auto a = y0, c = y0;
    ref::layer_scale_add(C, T, gm.data(), x.data(), a.data());
    ref::bias_add(C, T, bt.data(), c.data());
    Dev d1(y0), d2(y0);
    gpu::layer_scale_add(C, T, dg.p, dx.p, d1.p);
    gpu::bias_add(C, T, db.p, d2.p);
    expect_close(d1.host(), a, 0, 1e-6);
    expect_close(d2.host(), c, 0, 1e-6);
  }
  for (RopeLayout layout : {RopeLayout::Interleaved, RopeLayout::RotateHalf})
    for (auto [H, hd, T, off] : {std::array<int64_t, 4>{1, 2, 1, 0}, {8, 64, 100, 250}, {3, 6, 5, 7},
                                        // angles past 1000 rad (a long stream's position), the largest head_dim
                                        {1, 64, 3, 4000}, {1, 512, 2, 9}}) {
      auto x = random_vec(size_t(H * hd * T), r);
      auto y = x;
      const int32_t pos = int32_t(off);
      ref::rope(H, hd, T, &pos, 10000.0f, layout, y.data());
      Dev dx(x);
      std::shared_ptr<int32_t> dpos(gpu::alloc_i32(1), gpu::release);  // the position lives on the device
      gpu::upload_i32(dpos.get(), &pos, 1);
      gpu::rope(H, hd, T, dpos.get(), 10000.0f, layout, dx.p);
      expect_close(dx.host(), y, 1e-5, 1e-5);
    }
}

TEST_CASE("gpu attention and rvq") {
  Rng r(4);
  for (auto [H, Tq, Tk, hd, qs, ks, ctx] : {std::array<int64_t, 7>{1, 1, 1, 2, 0, 0, 1}, {2, 17, 17, 8, 0, 0, 5},
                                           {8, 300, 300, 64, 0, 0, 250}, {2, 10, 25, 4, 15, 0, 5}, {1, 4, 4, 2, 0, 10, 3},
                                           // head_dim 64 (the tiled kernel): a streaming step against the cached
                                           // window, ragged query blocks, a window smaller than a key tile,
                                           // queries that see no key
                                           {8, 2, 251, 64, 1000, 751, 250}, {2, 70, 130, 64, 60, 0, 50},
                                           {1, 33, 33, 64, 5, 3, 7}, {1, 5, 10, 64, 0, 3, 2}}) {
    auto q = random_vec(size_t(H * hd * Tq), r, -2, 2), k = random_vec(size_t(H * hd * Tk), r, -2, 2);
    auto v = random_vec(size_t(H * hd * Tk), r);
    std::vector<float> o(q.size());
    const float scale = 1.0f / std::sqrt(float(hd));
    ref::attention(H, Tq, Tk, hd, qs, ks, ctx, scale, q.data(), k.data(), v.data(), o.data());
    Dev dq(q), dk(k), dv(v), dout(o.size());
    gpu::attention(H, Tq, Tk, hd, qs, ks, ctx, scale, dq.p, dk.p, dv.p, dout.p);
    expect_close(dout.host(), o, 1e-5, 1e-6);
  }
  // F < 32: one block per frame; F >= 32: a GEMM per codebook, then one thread per frame
  for (auto [Q, F, bins, n] : {std::array<int64_t, 4>{1, 1, 1, 1}, {4, 7, 5, 3}, {16, 27, 64, 7}, {32, 9, 300, 4},
                                                {300, 3, 20, 2},  // Q > kThreads
                                                {1, 32, 1, 1}, {8, 40, 64, 3}, {16, 70, 300, 4}, {5, 33, 7, 2}}) {
    CAPTURE(Q); CAPTURE(F); CAPTURE(bins); CAPTURE(n);
    std::vector<std::vector<float>> books, norms;
    std::vector<std::unique_ptr<Dev>> dbooks, dnorms;
    std::vector<const float*> hb, hn, db, dn;
    for (int64_t j = 0; j < n; ++j) {
      books.push_back(random_vec(size_t(bins * Q), r));
      std::vector<float> nn(size_t(bins), 0.0f);
      for (int64_t b = 0; b < bins; ++b)
        for (int64_t qq = 0; qq < Q; ++qq) nn[size_t(b)] += books.back()[size_t(b * Q + qq)] * books.back()[size_t(b * Q + qq)];
      norms.push_back(nn);
    }
    for (int64_t j = 0; j < n; ++j) {
      hb.push_back(books[size_t(j)].data());
      hn.push_back(norms[size_t(j)].data());
      dbooks.push_back(std::make_unique<Dev>(books[size_t(j)]));
      dnorms.push_back(std::make_unique<Dev>(norms[size_t(j)]));
      db.push_back(dbooks.back()->p);
      dn.push_back(dnorms.back()->p);
    }
    auto x = random_vec(size_t(Q * F), r);
    std::vector<int32_t> codes(size_t(n * F));
    ref::rvq_encode(Q, F, bins, n, x.data(), hb.data(), hn.data(), codes.data(), nullptr);
    Dev dx(x), work(size_t(rvq_work_floats(Q, F, bins)));
    int32_t* dc = gpu::alloc_i32(codes.size());
    gpu::rvq_encode(Q, F, bins, n, dx.p, db.data(), dn.data(), dc, work.p);
    std::vector<int32_t> got(codes.size());
    gpu::synchronize();
    gpu::download_i32(got.data(), dc, got.size());
    CHECK(got == codes);
    CHECK(dx.host() == x);  // x is read only: the residual lives in the workspace
    // a frame's codes do not depend on F or on the path (GEMM for F >= 32, per frame below)
    for (auto [first, m] : {std::array<int64_t, 2>{0, 1}, {F - 1, 1}, {F / 3, std::min<int64_t>(F - F / 3, 33)}}) {
      Dev part(columns(x, Q, F, first, m)), pwork(size_t(rvq_work_floats(Q, m, bins)));
      int32_t* pc = gpu::alloc_i32(size_t(n * m));
      gpu::rvq_encode(Q, m, bins, n, part.p, db.data(), dn.data(), pc, pwork.p);
      std::vector<int32_t> pg(size_t(n * m));
      gpu::synchronize();
      gpu::download_i32(pg.data(), pc, pg.size());
      gpu::release(pc);
      int64_t differ = 0;
      for (int64_t j = 0; j < n; ++j)
        for (int64_t f = 0; f < m; ++f) differ += pg[size_t(j * m + f)] != got[size_t(j * F + first + f)];
      CHECK_MESSAGE(differ == 0, "columns " << first << ".." << first + m - 1);
    }
    std::vector<float> y(size_t(Q * F));
    ref::rvq_decode(Q, F, bins, n, codes.data(), hb.data(), y.data());
    Dev dy(y.size());
    gpu::upload_i32(dc, codes.data(), codes.size());
    gpu::rvq_decode(Q, F, bins, n, dc, db.data(), dy.p);
    expect_close(dy.host(), y, 0, 1e-6);
    gpu::release(dc);
  }
}

int main(int argc, char** argv) {
  if (gpu::device_count() == 0) {
    std::printf("SKIPPED: no GPU device; the GPU kernels were compiled but not run\n");
    return 77;
  }
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
