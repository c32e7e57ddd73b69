// What the GPU kernels promise beyond "equals the reference on the op table" (that is
// tests/test_ops.cpp, run on every backend): bitwise properties the batched and streaming plans
// rely on (a column's value does not depend on N, the call or the kernel; one summation order;
// fused epilogues equal the unfused ops). Without a device the whole test reports itself as
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
#include "support/rng.h"


using namespace mimi;
using namespace mimi::testing;

namespace {

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
    // (against the reference ops: tests/test_ops.cpp, linear_gelu and linear_scale_add)
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

TEST_CASE("gpu attention_window: every slot's step equals its own rope and attention, bitwise") {
  // Slots stream steps of 0..maxT columns (0: idle) side by side; the windowed ops (one launch
  // each for every slot, keys and values in per-slot rings) must give each slot's rotated
  // queries and attention output bitwise as the per-slot path of the plans: rope at the slot's
  // position, then attention over its cached keys and its new ones laid out in order. Positions
  // pass the window and wrap the ring many times; both kernels (head_dim 64: tiled; 8: generic).
  struct Case {
    int64_t hd, ctx, maxT, steps;
  };
  for (const Case cs : {Case{64, 6, 3, 8}, Case{8, 5, 4, 8}, Case{64, 3, 66, 2}, Case{8, 1, 2, 4}}) {
    CAPTURE(cs.hd); CAPTURE(cs.ctx); CAPTURE(cs.maxT);
    Rng r(uint64_t(21 + cs.hd + cs.ctx));
    const int64_t H = 2, hd = cs.hd, D = H * hd, S = 3, R = cs.ctx - 1 + cs.maxT, cap = cs.ctx - 1;
    const float scale = 1.0f / std::sqrt(float(hd)), period = 10000.0f;
    Dev rk(size_t(S * D * R)), rv(size_t(S * D * R));
    std::vector<std::vector<float>> hk(S), hv(S);  // per slot, [D][position]: its rotated keys and values so far
    std::vector<int64_t> pos(S, 0);
    int32_t* dpos = gpu::alloc_i32(1);
    int32_t* dseg = gpu::alloc_i32(size_t(4 * S));
    for (int64_t step = 0; step < cs.steps; ++step) {
      CAPTURE(step);
      std::vector<WindowSegment> segs;
      int64_t Tt = 0, max_len = 0;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t T = r.small_int(0, int(cs.maxT));
        if (T == 0) continue;
        segs.push_back({int32_t(Tt), int32_t(T), int32_t(pos[size_t(s)]), int32_t(s)});
        Tt += T;
        max_len = std::max(max_len, T);
      }
      if (segs.empty()) continue;
      const auto qkv = random_vec(size_t(3 * D * Tt), r, -2, 2);
      Dev dqkv(qkv), out(size_t(D * Tt));
      gpu::upload_i32(dseg, reinterpret_cast<const int32_t*>(segs.data()), 4 * segs.size());
      const auto* table = reinterpret_cast<const WindowSegment*>(dseg);
      gpu::rope_append(H, hd, Tt, int64_t(segs.size()), max_len, table, period, RopeLayout::Interleaved, dqkv.p, rk.p,
                       rv.p, R);
      gpu::attention_window(H, hd, Tt, int64_t(segs.size()), max_len, table, cs.ctx, scale, dqkv.p, rk.p, rv.p, R,
                            out.p);
      const auto got_q = dqkv.host(), got_o = out.host();
      for (const WindowSegment& sg : segs) {
        const int64_t T = sg.length, o = sg.offset, p = sg.position, s = sg.slot;
        CAPTURE(s);
        const int32_t p32 = int32_t(p);
        gpu::upload_i32(dpos, &p32, 1);
        Dev qs(columns(qkv, 3 * D, Tt, o, T));  // rows [0, D): q; [D, 2D): k
        gpu::rope(H, hd, T, dpos, period, RopeLayout::Interleaved, qs.p);
        gpu::rope(H, hd, T, dpos, period, RopeLayout::Interleaved, qs.p + D * T);
        const auto rot = qs.host();
        CHECK(count_differ(std::vector<float>(rot.begin(), rot.begin() + D * T), got_q, D, Tt, o, T) == 0);
        auto& K = hk[size_t(s)];
        auto& V = hv[size_t(s)];
        const int64_t n0 = p;  // positions held so far
        std::vector<float> nk(size_t(D * (n0 + T))), nv(nk.size());
        for (int64_t d = 0; d < D; ++d)
          for (int64_t j = 0; j < n0 + T; ++j) {
            nk[size_t(d * (n0 + T) + j)] = j < n0 ? K[size_t(d * n0 + j)] : rot[size_t((D + d) * T + j - n0)];
            nv[size_t(d * (n0 + T) + j)] = j < n0 ? V[size_t(d * n0 + j)] : qkv[size_t((2 * D + d) * Tt + o + j - n0)];
          }
        K.swap(nk), V.swap(nv);
        const int64_t cached = std::min(cap, p), Tk = cached + T;
        Dev kb(columns(K, D, p + T, p - cached, Tk)), vb(columns(V, D, p + T, p - cached, Tk)), os(size_t(D * T));
        gpu::attention(H, T, Tk, hd, cached, 0, cs.ctx, scale, qs.p, kb.p, vb.p, os.p);
        CHECK(count_differ(os.host(), got_o, D, Tt, o, T) == 0);
        pos[size_t(s)] += T;
      }
    }
    gpu::release(dpos);
    gpu::release(dseg);
  }
}

TEST_CASE("gpu conv1d_segments: every segment equals conv1d alone with its slot's context, bitwise") {
  // Segments of a batched step side by side, each with its slot's context in one [slots, Cin, P]
  // buffer: outputs bitwise conv1d of that segment alone with that context (every kernel: tiled,
  // split-K and one thread per output, by the column count and channels), and each used slot's
  // context afterwards the last P of [context | its inputs] (T below and above P); unused slots
  // untouched.
  struct Case {
    int64_t cin, cout, k, stride, dil, T, nseg;
    bool elu, acc;
    int64_t groups = 1;
  };
  Rng r(31);
  for (const Case cs : {Case{3, 40, 7, 1, 1, 5, 3, false, false}, Case{8, 64, 3, 1, 3, 2, 17, true, false},
                        Case{16, 33, 4, 2, 1, 8, 5, true, true}, Case{4, 2, 3, 1, 1, 1, 9, true, false},
                        Case{6, 48, 1, 1, 1, 3, 4, false, true}, Case{5, 36, 10, 5, 1, 10, 2, false, false},
                        Case{4, 2, 3, 1, 1, 4, 9, true, false},  // one thread per output over 36 columns
                        Case{8, 8, 3, 1, 2, 5, 7, false, true, 4}}) {  // grouped
    CAPTURE(cs.cin); CAPTURE(cs.cout); CAPTURE(cs.k); CAPTURE(cs.T); CAPTURE(cs.nseg);
    Conv1dShape s;
    s.in_channels = cs.cin, s.out_channels = cs.cout, s.kernel = cs.k, s.stride = cs.stride, s.dilation = cs.dil;
    s.groups = cs.groups;
    s.length_in = cs.T;
    s.elu_input = cs.elu;
    const int64_t P = s.pad_left(), To = s.length_out(), S = cs.nseg + 2, n = cs.nseg;
    const auto x = random_vec(size_t(cs.cin * n * cs.T), r, -2, 2);
    const auto w = random_vec(size_t(cs.cout * (cs.cin / cs.groups) * cs.k), r);
    const auto bias = random_vec(size_t(cs.cout), r), y0 = random_vec(size_t(cs.cout * n * To), r);
    const auto ctx = random_vec(size_t(S * cs.cin * std::max<int64_t>(P, 1)), r, -2, 2);
    std::vector<WindowSegment> segs;
    for (int64_t i = 0; i < n; ++i) segs.push_back({0, 0, 0, int32_t(((1 - i) % S + S) % S)});  // slots out of order, two unused
    std::vector<int32_t> used(size_t(S), 0);
    for (const auto& sg : segs) used[size_t(sg.slot)] = 1;
    REQUIRE(std::count(used.begin(), used.end(), 1) == n);  // distinct slots
    Dev dx(x), dw(w), db(bias), dy(y0), dctx(ctx);
    int32_t* dseg = gpu::alloc_i32(size_t(4 * n));
    gpu::upload_i32(dseg, reinterpret_cast<const int32_t*>(segs.data()), size_t(4 * n));
    gpu::conv1d_segments(s, n, reinterpret_cast<const WindowSegment*>(dseg), dx.p, dw.p, db.p, dy.p, cs.acc,
                         P > 0 ? dctx.p : nullptr);
    const auto got = dy.host(), got_ctx = dctx.host();
    gpu::release(dseg);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t slot = segs[size_t(i)].slot;
      std::vector<float> c1(size_t(cs.cin * std::max<int64_t>(P, 1)));
      std::copy_n(ctx.begin() + slot * cs.cin * P, cs.cin * P, c1.begin());
      Dev xi(columns(x, cs.cin, n * cs.T, i * cs.T, cs.T)), yi(columns(y0, cs.cout, n * To, i * To, To)), ci(c1);
      gpu::conv1d(s, xi.p, dw.p, db.p, yi.p, cs.acc, P > 0 ? ci.p : nullptr);
      CHECK(count_differ(yi.host(), got, cs.cout, n * To, i * To, To) == 0);
      for (int64_t c = 0; c < cs.cin; ++c)  // the context moved on: last P of [context | inputs]
        for (int64_t j = 0; j < P; ++j) {
          const int64_t from = j + cs.T;  // index into [context (P) | inputs (T)]
          const float want = from < P ? c1[size_t(c * P + from)] : x[size_t(c * n * cs.T + i * cs.T + from - P)];
          CHECK(got_ctx[size_t((slot * cs.cin + c) * P + j)] == want);
        }
    }
    for (int64_t slot = 0; slot < S; ++slot)
      if (!used[size_t(slot)])
        for (int64_t e = 0; e < cs.cin * P; ++e) CHECK(got_ctx[size_t(slot * cs.cin * P + e)] == ctx[size_t(slot * cs.cin * P + e)]);
  }
}

TEST_CASE("gpu conv_transpose1d_segments: every segment equals convtr_step alone with its slot's carry, bitwise") {
  // As convtr_step (codec/layer_steps.cpp) does it for one stream, with the GPU ops: the trimmed
  // transform, the carried overlap added, the next overlap from the last ceil(K/S) inputs' untrimmed
  // transform (plus the old one's rest when the chunk is shorter than the overlap). Every kernel
  // (tiled, split-K, depthwise one thread per output); chunks shorter and longer than the overlap.
  struct Case {
    int64_t cin, cout, k, stride, groups, T, nseg;
  };
  Rng r(41);
  for (const Case cs : {Case{16, 24, 4, 2, 1, 9, 4}, Case{8, 6, 8, 4, 1, 1, 3}, Case{12, 12, 4, 2, 12, 2, 5},
                        Case{32, 16, 16, 8, 1, 2, 3}, Case{4, 4, 6, 2, 4, 1, 2}, Case{6, 40, 2, 2, 1, 3, 12},
                        Case{8, 40, 6, 2, 1, 1, 3}}) {  // a segment shorter than the overlap, groups 1
    CAPTURE(cs.cin); CAPTURE(cs.cout); CAPTURE(cs.k); CAPTURE(cs.stride); CAPTURE(cs.groups); CAPTURE(cs.T);
    ConvTranspose1dShape s;
    s.in_channels = cs.cin, s.out_channels = cs.cout, s.kernel = cs.k, s.stride = cs.stride, s.groups = cs.groups;
    s.length_in = cs.T;
    const int64_t S = cs.stride, O = s.overlap(), To = cs.T * S, n = cs.nseg, slots = n + 1;
    const auto x = random_vec(size_t(cs.cin * n * cs.T), r, -2, 2);
    const auto w = random_vec(size_t(cs.cin * (cs.cout / cs.groups) * cs.k), r), bias = random_vec(size_t(cs.cout), r);
    const auto carry0 = random_vec(size_t(slots * cs.cout * std::max<int64_t>(O, 1)), r);
    std::vector<WindowSegment> segs;
    for (int64_t i = 0; i < n; ++i) segs.push_back({0, 0, 0, int32_t(n - 1 - i)});  // slot n unused
    Dev dx(x), dw(w), db(bias), dy(size_t(cs.cout * n * To)), dc(carry0);
    int32_t* dseg = gpu::alloc_i32(size_t(4 * n));
    gpu::upload_i32(dseg, reinterpret_cast<const int32_t*>(segs.data()), size_t(4 * n));
    gpu::conv_transpose1d_segments(s, n, reinterpret_cast<const WindowSegment*>(dseg), dx.p, dw.p, db.p, dy.p,
                                   O > 0 ? dc.p : nullptr);
    const auto got = dy.host(), got_c = dc.host();
    gpu::release(dseg);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t slot = segs[size_t(i)].slot;
      CAPTURE(i);
      std::vector<float> c1(size_t(cs.cout * std::max<int64_t>(O, 1)));
      std::copy_n(carry0.begin() + slot * cs.cout * O, cs.cout * O, c1.begin());
      Dev xi(columns(x, cs.cin, n * cs.T, i * cs.T, cs.T)), yi(size_t(cs.cout * To)), carry(c1), old(c1);
      gpu::conv_transpose1d(s, xi.p, dw.p, db.p, yi.p);
      if (O > 0) {
        gpu::add2d(yi.p, To, carry.p, O, std::min(O, To), cs.cout);
        const int64_t m = std::min(cs.T, (cs.k + S - 1) / S);
        ConvTranspose1dShape tail = s;
        tail.length_in = m;
        tail.trimmed = false;
        const int64_t L = tail.length_out();
        Dev work(columns(x, cs.cin, n * cs.T, i * cs.T + cs.T - m, m)), full(size_t(cs.cout * L));
        gpu::conv_transpose1d(tail, work.p, dw.p, nullptr, full.p);
        gpu::copy2d(carry.p, O, full.p + L - O, L, O, cs.cout);
        if (O > To) gpu::add2d(carry.p, O, old.p + To, O, O - To, cs.cout);
        const auto want_c = carry.host();
        for (int64_t e = 0; e < cs.cout * O; ++e) CHECK(got_c[size_t(slot * cs.cout * O + e)] == want_c[size_t(e)]);
      }
      CHECK(count_differ(yi.host(), got, cs.cout, n * To, i * To, To) == 0);
    }
    for (int64_t e = 0; e < cs.cout * O; ++e)  // the unused slot's carry untouched
      CHECK(got_c[size_t(n * cs.cout * O + e)] == carry0[size_t(n * cs.cout * O + e)]);
  }
}

TEST_CASE("gpu layer norm: a column range alone gives the whole's bits") {
  // batched == alone; blocks own 32 columns: partial last blocks, C below and above the 8 lanes
  Rng r(3);
  for (auto [C, T] : {std::array<int64_t, 2>{1, 1}, {5, 3}, {512, 7}, {17, 200}, {3, 32}, {7, 33}, {512, 65}}) {
    CAPTURE(C); CAPTURE(T);
    auto x = random_vec(size_t(C * T), r, -3, 3), gm = random_vec(size_t(C), r), bt = random_vec(size_t(C), r);
    Dev dx(x), dg(gm), db(bt), dy(size_t(C * T));
    gpu::layer_norm(C, T, dx.p, dg.p, db.p, 1e-5f, dy.p);
    const auto whole = dy.host();
    for (auto [first, n] : {std::array<int64_t, 2>{0, 1}, {T - 1, 1}, {T / 2, T - T / 2}}) {
      Dev part(columns(x, C, T, first, n)), out(size_t(C * n));
      gpu::layer_norm(C, n, part.p, dg.p, db.p, 1e-5f, out.p);
      CHECK(count_differ(out.host(), whole, C, T, first, n) == 0);
    }
  }
}

TEST_CASE("gpu rvq: a frame's codes do not depend on F or on the path") {
  // F < 32: one block per frame; F >= 32: a GEMM per codebook, then one thread per frame
  Rng r(4);
  for (auto [Q, F, bins, n] : {std::array<int64_t, 4>{1, 1, 1, 1}, {4, 7, 5, 3}, {16, 27, 64, 7}, {32, 9, 300, 4},
                                                {300, 3, 20, 2},  // Q > kThreads
                                                {1, 32, 1, 1}, {8, 40, 64, 3}, {16, 70, 300, 4}, {5, 33, 7, 2}}) {
    CAPTURE(Q); CAPTURE(F); CAPTURE(bins); CAPTURE(n);
    std::vector<std::unique_ptr<Dev>> dbooks, dnorms;
    std::vector<const float*> db, dn;
    for (int64_t j = 0; j < n; ++j) {
      const auto book = random_vec(size_t(bins * Q), r);
      std::vector<float> nn(size_t(bins), 0.0f);
      for (int64_t b = 0; b < bins; ++b)
        for (int64_t qq = 0; qq < Q; ++qq) nn[size_t(b)] += book[size_t(b * Q + qq)] * book[size_t(b * Q + qq)];
      dbooks.push_back(std::make_unique<Dev>(book));
      dnorms.push_back(std::make_unique<Dev>(nn));
      db.push_back(dbooks.back()->p);
      dn.push_back(dnorms.back()->p);
    }
    auto x = random_vec(size_t(Q * F), r);
    Dev dx(x), work(size_t(rvq_work_floats(Q, F, bins)));
    std::vector<int32_t> got(size_t(n * F));
    int32_t* dc = gpu::alloc_i32(got.size());
    gpu::rvq_encode(Q, F, bins, n, dx.p, db.data(), dn.data(), dc, work.p);
    gpu::synchronize();
    gpu::download_i32(got.data(), dc, got.size());
    gpu::release(dc);
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
