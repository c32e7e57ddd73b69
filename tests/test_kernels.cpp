// What the CPU kernels promise beyond "equals the reference on the op table" (that is
// tests/test_ops.cpp, for every backend): hand-computed examples, the internal GEMM entry points
// (row pointers, transposed A, threaded slabs), the streaming context identity, every ISA's
// expm1, exact ties, and column invariance (the contract batched plans rely on).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/ops.h"
#include "support/rng.h"
#include "tests/ops/op_case.h"

using namespace mimi;
using namespace mimi::testing;

namespace {

// |got - ref| <= rel * max|ref| + abs, elementwise
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double rel = 2e-6, double abs = 1e-6) {
  REQUIRE(got.size() == ref.size());
  double mx = 0;
  for (float x : ref) mx = std::max(mx, double(std::fabs(x)));
  const double tol = rel * mx + abs;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    if (!(d <= worst)) {
      worst = d;
      at = i;
    }
  }
  INFO("worst |got-ref| = " << worst << " at " << at << " (tolerance " << tol << ")");
  CHECK(worst <= tol);
}

void expect_equal(const std::vector<float>& got, const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  size_t diffs = 0;
  for (size_t i = 0; i < got.size(); ++i) diffs += got[i] != ref[i];
  CHECK(diffs == 0);
}

}  // namespace

TEST_CASE("gemm: B given by row pointers (packed and in-place paths) vs ref") {
  Rng r(41);
  // M <= 64 and a multiple of 8 reads B in place; N not a multiple of 32 adds a packed ragged
  // part; K > 256 spans several K blocks (accumulation across them)
  for (auto [M, N, K] : {std::array<int64_t, 3>{8, 32, 5}, {32, 100, 192}, {64, 256, 600}, {72, 70, 300},
                         {16, 31, 17}, {1, 40, 3}}) {
    CAPTURE(M); CAPTURE(N); CAPTURE(K);
    const int64_t ldb = N + 13;  // rows scattered in a wider buffer, in a shuffled order
    auto A = int_vec(size_t(M * K), r), Bbuf = int_vec(size_t(K * ldb), r), C0 = int_vec(size_t(M * N), r);
    std::vector<const float*> rows(static_cast<size_t>(K));
    std::vector<float> B(size_t(K * N));
    for (int64_t k = 0; k < K; ++k) {
      const int64_t src = (k * 7 + 3) % K;  // a permutation of the rows (K, 7 coprime for these K)
      rows[size_t(k)] = Bbuf.data() + src * ldb + 5 % (ldb - N + 1);
      std::copy_n(rows[size_t(k)], N, B.begin() + k * N);
    }
    for (bool acc : {false, true}) {
      std::vector<float> want = C0, got = C0;
      ref::gemm(M, N, K, A.data(), K, B.data(), N, want.data(), N, acc);
      cpu::gemm_serial_rows(M, N, K, A.data(), K, rows.data(), got.data(), N, acc);
      expect_equal(got, want);
    }
  }
}

TEST_CASE("gemm: threaded row slabs sharing one packed B (plain and transposed A) vs ref") {
  // Split over M when M > N: the slabs share one packing of B (several k and column blocks
  // here), so a wrong block offset or a slab reading another's rows shows up as a mismatch.
  // With N <= 4 and A transposed, the skinny path's row blocks.
  struct Case { int64_t M, N, K, pad; bool acc; };
  const Case cases[] = {{300, 40, 600, 1, true}, {600, 300, 520, 2, false}, {67, 17, 1030, 0, true},
                        {1025, 5, 300, 3, false}, {200, 199, 257, 0, true},
                        // skinny (N <= 4): rows in blocks of 512 and a ragged rest, several k blocks
                        {1100, 2, 300, 1, true}, {1031, 4, 600, 0, false}, {2053, 1, 270, 2, true}};
  Rng r(11);
  for (int threads : {1, 2, 3}) {
    cpu::set_num_threads(threads);
    for (const Case& c : cases)
      for (bool ta : {false, true}) {
        CAPTURE(threads); CAPTURE(c.M); CAPTURE(c.N); CAPTURE(c.K); CAPTURE(ta);
        const int64_t lda = (ta ? c.M : c.K) + c.pad, ldb = c.N + c.pad, ldc = c.N + c.pad;
        auto A = int_vec(size_t((ta ? c.K : c.M) * lda), r), B = int_vec(size_t(c.K * ldb), r);
        auto C0 = int_vec(size_t(c.M * ldc), r);
        std::vector<float> At(size_t(c.M * c.K));  // A as [M, K] for the reference
        for (int64_t i = 0; i < c.M; ++i)
          for (int64_t k = 0; k < c.K; ++k) At[size_t(i * c.K + k)] = ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)];
        auto Cr = C0, Cc = C0;
        ref::gemm(c.M, c.N, c.K, At.data(), c.K, B.data(), ldb, Cr.data(), ldc, c.acc);
        if (ta) cpu::gemm_ta(c.M, c.N, c.K, A.data(), lda, B.data(), ldb, Cc.data(), ldc, c.acc);
        else cpu::gemm(c.M, c.N, c.K, A.data(), lda, B.data(), ldb, Cc.data(), ldc, c.acc);
        expect_equal(Cc, Cr);  // small integers: exact in any order
      }
  }
  cpu::set_num_threads(0);
}

TEST_CASE("conv1d: a given left context equals the conv of the context-prefixed input") {
  // [ctx | x] through the padded conv: its last T/stride outputs never touch the padding (P is a
  // multiple of the stride here) and must equal conv(x) with ctx as the context.
  Rng r(21);
  for (auto [cin, cout, k, stride, T] : {std::array<int64_t, 5>{3, 5, 3, 1, 10}, {4, 6, 8, 4, 16}, {2, 3, 4, 2, 6}}) {
    Conv1dShape s{cin, cout, k, stride, 1, 1, T, PadMode::Zero};
    const int64_t P = s.context(), n = s.length_out();
    REQUIRE(P % stride == 0);
    auto x = random_vec(size_t(cin * T), r), w = random_vec(size_t(cout * cin * k), r), b = random_vec(size_t(cout), r);
    auto ctx = random_vec(size_t(cin * P), r);
    std::vector<float> xc(size_t(cin * (P + T)));  // the context columns, then x
    for (int64_t c = 0; c < cin; ++c) {
      std::copy(ctx.begin() + c * P, ctx.begin() + (c + 1) * P, xc.begin() + c * (P + T));
      std::copy(x.begin() + c * T, x.begin() + (c + 1) * T, xc.begin() + c * (P + T) + P);
    }
    Conv1dShape longer = s;
    longer.length_in = P + T;
    const int64_t nl = longer.length_out();
    for (auto* conv : {&ref::conv1d, &cpu::conv1d}) {
      std::vector<float> a(size_t(cout * n)), e(size_t(cout * nl));
      (*conv)(s, x.data(), w.data(), b.data(), a.data(), false, ctx.data());
      (*conv)(longer, xc.data(), w.data(), b.data(), e.data(), false, nullptr);
      std::vector<float> tail;
      for (int64_t co = 0; co < cout; ++co) tail.insert(tail.end(), e.begin() + co * nl + nl - n, e.begin() + (co + 1) * nl);
      expect_close(a, tail, 1e-6);
    }
  }
}

TEST_CASE("conv1d: hand-computed causal example") {
  // x = [1, 2, 3], w = [1, 10, 100], zero left pad 2: y[t] = 100 x[t] + 10 x[t-1] + x[t-2]
  const std::vector<float> x{1, 2, 3}, w{1, 10, 100};
  std::vector<float> y(3);
  Conv1dShape s{1, 1, 3, 1, 1, 1, 3, PadMode::Zero};
  cpu::conv1d(s, x.data(), w.data(), nullptr, y.data(), false, nullptr);
  CHECK(y == std::vector<float>{100, 210, 321});
  s.pad = PadMode::Replicate;  // padding repeats x[0] = 1
  cpu::conv1d(s, x.data(), w.data(), nullptr, y.data(), false, nullptr);
  CHECK(y == std::vector<float>{111, 211, 321});
}

TEST_CASE("conv_transpose1d: hand-computed example with right trim") {
  // x = [1, 2], w = [1, 2, 3, 4], stride 2: full = [1, 2, 3+2, 4+4, 6, 8], trimmed to 4
  const std::vector<float> x{1, 2}, w{1, 2, 3, 4};
  std::vector<float> y(4);
  cpu::conv_transpose1d({1, 1, 4, 2, 1, 2}, x.data(), w.data(), nullptr, y.data());
  CHECK(y == std::vector<float>{1, 2, 5, 8});
}

TEST_CASE("conv shapes: output lengths, over every conv shape of the op table") {
  for (const Conv1dShape& s : optest::conv1d_shapes()) {
    CAPTURE(s.in_channels); CAPTURE(s.kernel); CAPTURE(s.stride); CAPTURE(s.dilation); CAPTURE(s.length_in);
    const int64_t T = s.length_in;
    if (T + s.pad_left() >= s.span()) CHECK(s.length_out() == (T + s.pad_left() - s.span()) / s.stride + 1);
    else CHECK(s.length_out() == 0);  // not even one full window
  }
  for (ConvTranspose1dShape s : optest::conv_transpose1d_shapes()) {
    CHECK(s.length_out() == s.length_in * s.stride);
    s.trimmed = false;
    CHECK(s.length_out() == (s.length_in - 1) * s.stride + s.kernel);
  }
}

TEST_CASE("conv1d reference: ELU fused on the input is ELU, then the conv (padding and context too)") {
  // the oracle of every ELU case of the op table must itself mean what the contract says
  Rng r(2);
  for (Conv1dShape s : optest::conv1d_shapes()) {
    CAPTURE(s.in_channels); CAPTURE(s.out_channels); CAPTURE(s.kernel); CAPTURE(s.stride); CAPTURE(s.length_in);
    const int64_t Tout = s.length_out();
    auto x = random_vec(size_t(s.in_channels * s.length_in), r), ctx = random_vec(size_t(s.in_channels * s.pad_left()), r);
    auto w = random_vec(size_t(s.out_channels * (s.in_channels / s.groups) * s.kernel), r), b = random_vec(size_t(s.out_channels), r);
    std::vector<float> xe(x.size()), ce(ctx.size());
    ref::elu(int64_t(x.size()), x.data(), xe.data());
    ref::elu(int64_t(ctx.size()), ctx.data(), ce.data());
    for (bool with_ctx : {false, true}) {
      CAPTURE(with_ctx);
      std::vector<float> fused(size_t(s.out_channels * Tout)), composed(fused.size());
      Conv1dShape se = s;
      se.elu_input = true;
      ref::conv1d(se, x.data(), w.data(), b.data(), fused.data(), false, with_ctx ? ctx.data() : nullptr);
      ref::conv1d(s, xe.data(), w.data(), b.data(), composed.data(), false, with_ctx ? ce.data() : nullptr);
      expect_close(fused, composed, 1e-6);
    }
  }
}

TEST_CASE("elementwise: known values") {
  float v[3] = {-1.0f, 0.0f, 2.0f}, out[3];
  cpu::elu(3, v, out);
  CHECK(out[0] == doctest::Approx(std::expm1(-1.0)));
  CHECK(out[1] == 0.0f);
  CHECK(out[2] == 2.0f);
  cpu::gelu_erf(3, v, out);
  CHECK(out[0] == doctest::Approx(-0.15865525393145707));
  CHECK(out[2] == doctest::Approx(1.9544997361036416));
}

TEST_CASE("rope: position 0 is the identity; the two layouts are one rotation of paired rows") {
  Rng r(7);
  std::vector<float> x{1, 2, 3, 4};  // H=1, hd=4, T=1
  auto y = x;
  const int32_t zero = 0, three = 3;
  cpu::rope(1, 4, 1, &zero, 10000.0f, RopeLayout::Interleaved, y.data());
  CHECK(y == x);
  std::vector<float> inter(8), half(8);  // hd = 4, T = 2: rows (0,1),(2,3) vs (0,2),(1,3)
  auto xi = random_vec(8, r);
  inter = xi;
  const int perm[4] = {0, 2, 1, 3};  // interleaved row -> rotate-half row
  for (int row = 0; row < 4; ++row)
    for (int t = 0; t < 2; ++t) half[size_t(perm[row] * 2 + t)] = xi[size_t(row * 2 + t)];
  cpu::rope(1, 4, 2, &three, 10000.0f, RopeLayout::Interleaved, inter.data());
  cpu::rope(1, 4, 2, &three, 10000.0f, RopeLayout::RotateHalf, half.data());
  for (int row = 0; row < 4; ++row)
    for (int t = 0; t < 2; ++t) CHECK(half[size_t(perm[row] * 2 + t)] == inter[size_t(row * 2 + t)]);
}

TEST_CASE("attention: with context 1 each query sees only itself, so the output is v") {
  Rng r(8);
  auto q = random_vec(12, r), k = random_vec(12, r), v = random_vec(12, r);
  std::vector<float> o(12);
  cpu::attention(2, 3, 3, 2, 0, 0, 1, 1.0f, q.data(), k.data(), v.data(), o.data());
  expect_close(o, v, 0, 1e-7);
}

TEST_CASE("rvq: an exact tie goes to the lower index, on the reference and the CPU") {
  // row 1 duplicates row 0 (small integers: the distances are exact), so code 1 never wins
  Rng r(9);
  for (auto [Q, F, bins] : {std::array<int64_t, 3>{4, 7, 5}, {8, 41, 2048}, {3, 1, 2}}) {
    auto book = int_vec(size_t(bins * Q), r);
    std::copy_n(book.begin(), Q, book.begin() + Q);
    std::vector<float> norms(static_cast<size_t>(bins));
    for (int64_t b = 0; b < bins; ++b)
      for (int64_t q = 0; q < Q; ++q) norms[size_t(b)] += book[size_t(b * Q + q)] * book[size_t(b * Q + q)];
    const float* bp = book.data();
    const float* np = norms.data();
    auto x = int_vec(size_t(Q * F), r);
    for (int64_t i = 0; i < F; ++i) std::copy_n(book.begin(), Q, x.begin() + i * Q);  // exactly on row 0
    std::vector<float> xt(size_t(Q * F));  // x is [Q, F]: frame f is column f
    for (int64_t f = 0; f < F; ++f)
      for (int64_t q = 0; q < Q; ++q) xt[size_t(q * F + f)] = x[size_t(f * Q + q)];
    std::vector<int32_t> cr(size_t(F), -1), cc(size_t(F), -1);
    std::vector<float> work(size_t(rvq_work_floats(Q, F, bins)));
    ref::rvq_encode(Q, F, bins, 1, xt.data(), &bp, &np, cr.data(), nullptr);
    cpu::rvq_encode(Q, F, bins, 1, xt.data(), &bp, &np, cc.data(), work.data());
    for (int64_t f = 0; f < F; ++f) {
      CHECK(cr[size_t(f)] == 0);
      CHECK(cc[size_t(f)] == 0);
    }
  }
}

TEST_CASE("elu: every instruction-set variant's expm1 within 2 ulp of double expm1") {
  // dense over [-20, 0], plus values near 0 (relative accuracy), subnormals and -0
  std::vector<float> x;
  for (int i = 0; i <= 200000; ++i) x.push_back(-20.0f * float(i) / 200000.0f);
  for (float v = -1e-3f; v < -1e-38f; v *= 0.7f) x.push_back(v);
  x.push_back(-1e-40f);
  x.push_back(-0.0f);
  x.push_back(3.5f);
  std::vector<float> y(x.size());
  const cpu::IsaChoice* isas;
  const int n_isas = cpu::isa_choices(&isas);
  for (int v = 0; v < n_isas; ++v) {
    if (!isas[v].runs_here) continue;
    const std::string name = isas[v].kernels->name;
    CAPTURE(name);
    isas[v].kernels->elu_serial(int64_t(x.size()), x.data(), y.data());
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = x[i] > 0 ? double(x[i]) : std::expm1(double(x[i]));
      const double ulp = std::max(std::abs(double(std::nextafter(float(want), 0.0f)) - want), 1.4e-45);
      worst = std::max(worst, std::abs(double(y[i]) - want) / ulp);
    }
    MESSAGE(std::string(name) << ": worst ELU error " << worst << " ulp");
    CHECK(worst <= 2.0);
  }
}

namespace {

// (offset, width) pieces of [0, N) that column invariance is checked on: every column alone, two
// partitions into widths cycling 1..5 (phase-shifted, so a column sits at different offsets of
// its piece and of the piece's SIMD vectors), odd splits, and the whole.
std::vector<std::pair<int64_t, int64_t>> column_pieces(int64_t N) {
  std::vector<std::pair<int64_t, int64_t>> p{{0, N}};
  for (int64_t j = 0; j < N; ++j) p.push_back({j, 1});
  for (int64_t first : {1, 3})
    for (int64_t j = 0, w = first; j < N; j += w, w = w % 5 + 1) p.push_back({j, std::min(w, N - j)});
  if (N > 2) p.insert(p.end(), {{1, N - 2}, {0, N - 1}, {N / 3, (N + 1) / 2 - N / 3}});
  return p;
}

// Columns [off, off + w) of a row-major [rows, N] matrix, compact [rows, w].
template <class T>
std::vector<T> cols(const std::vector<T>& m, int64_t N, int64_t off, int64_t w) {
  const int64_t rows = int64_t(m.size()) / N;
  std::vector<T> out(size_t(rows * w));
  for (int64_t r = 0; r < rows; ++r) std::copy_n(m.begin() + r * N + off, w, out.begin() + r * w);
  return out;
}
template <class T>
std::vector<uint32_t> bits(const std::vector<T>& v) {
  static_assert(sizeof(T) == 4);
  std::vector<uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

// run(off, w): the op on columns [off, off + w) of its [.., N] inputs; returns its output
// [rows, w] as bit patterns. Every piece, with 1 and 2 threads, must reproduce the wide
// single-thread result bit for bit.
using ColumnRun = std::function<std::vector<uint32_t>(int64_t off, int64_t w)>;
void check_column_invariance(const std::string& what, int64_t N, const ColumnRun& run) {
  cpu::set_num_threads(1);
  const auto wide = run(0, N);
  const int64_t rows = int64_t(wide.size()) / N;
  for (int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    int64_t bad = 0;
    std::string first;
    for (auto [off, w] : column_pieces(N)) {
      const auto got = run(off, w);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < w; ++j)
          if (got[size_t(r * w + j)] != wide[size_t(r * N + off + j)] && bad++ == 0)
            first = "column " + std::to_string(off + j) + " row " + std::to_string(r) + " in piece [" +
                    std::to_string(off) + ", +" + std::to_string(w) + ")";
    }
    INFO(what << ", N=" << N << ", threads=" << threads << ": " << bad << " values differ, first " << first);
    CHECK(bad == 0);
  }
  cpu::set_num_threads(0);
}

}  // namespace

// The contract in ops.h that batched plans rely on: a column's outputs do not depend on how many
// columns the call has, where the column sits, or the thread count.
TEST_CASE("column invariance") {
  Rng r(12);
  SUBCASE("gemm and linear") {
    // the transformer's shapes (QKV 1536x512, MLP 2048x512 and 512x2048), skinny and wide;
    // M < 16, K = 1, K not a multiple of any vector width, K > 256 (several K blocks)
    struct Case { int64_t M, K, N, pad; bool acc; };
    const Case cases[] = {{1536, 512, 12, 0, false}, {512, 2048, 9, 0, false}, {2048, 512, 40, 0, false},
                          {512, 512, 6, 3, true},    {2048, 2048, 5, 0, false}, {7, 5, 9, 0, false},
                          {15, 1, 6, 0, true},       {40, 1, 5, 3, false},      {33, 19, 11, 1, true},
                          {100, 600, 23, 0, false},  {17, 257, 8, 2, true},     {64, 300, 40, 0, false},
                          {16, 3, 2, 0, false},      {250, 77, 1, 0, false},    {31, 1000, 7, 5, true}};
    for (const Case& c : cases) {
      const int64_t lda = c.K + c.pad;
      const auto A = random_vec(size_t(c.M * lda), r), B = random_vec(size_t(c.K * c.N), r),
                 C0 = random_vec(size_t(c.M * c.N), r);
      // B and its column offset read in place
      check_column_invariance("gemm M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) + (c.acc ? " acc" : ""),
                              c.N, [&](int64_t off, int64_t w) {
                                auto C = cols(C0, c.N, off, w);
                                cpu::gemm(c.M, w, c.K, A.data(), lda, B.data() + off, c.N, C.data(), w, c.acc);
                                return bits(C);
                              });
      if (c.pad == 0 && !c.acc)
        check_column_invariance("linear in=" + std::to_string(c.K) + " out=" + std::to_string(c.M), c.N,
                                [&](int64_t off, int64_t w) {
                                  std::vector<float> y(size_t(c.M * w));
                                  cpu::linear(c.K, c.M, w, A.data(), cols(B, c.N, off, w).data(), y.data());
                                  return bits(y);
                                });
    }
  }
  SUBCASE("layer_norm and the elementwise ops") {
    // [C, N] signals; N > 64 crosses layer_norm's per-thread time split
    for (auto [C, N] : {std::pair<int64_t, int64_t>{512, 150}, {512, 5}, {2048, 7}, {17, 70}, {3, 41}, {1, 19}}) {
      const auto x = random_vec(size_t(C * N), r, -4, 4), y0 = random_vec(size_t(C * N), r),
                 g = random_vec(size_t(C), r), b = random_vec(size_t(C), r);
      const std::string shape = " C=" + std::to_string(C);
      check_column_invariance("layer_norm" + shape, N, [&](int64_t off, int64_t w) {
        std::vector<float> y(size_t(C * w));
        cpu::layer_norm(C, w, cols(x, N, off, w).data(), g.data(), b.data(), 1e-5f, y.data());
        return bits(y);
      });
      check_column_invariance("gelu_erf" + shape, N, [&](int64_t off, int64_t w) {
        auto y = cols(x, N, off, w);
        cpu::gelu_erf(C * w, y.data(), y.data());
        return bits(y);
      });
      check_column_invariance("elu" + shape, N, [&](int64_t off, int64_t w) {
        auto y = cols(x, N, off, w);
        cpu::elu(C * w, y.data(), y.data());
        return bits(y);
      });
      check_column_invariance("add_inplace" + shape, N, [&](int64_t off, int64_t w) {
        auto y = cols(y0, N, off, w);
        cpu::add_inplace(C * w, cols(x, N, off, w).data(), y.data());
        return bits(y);
      });
      check_column_invariance("bias_add" + shape, N, [&](int64_t off, int64_t w) {
        auto y = cols(y0, N, off, w);
        cpu::bias_add(C, w, b.data(), y.data());
        return bits(y);
      });
      check_column_invariance("layer_scale_add" + shape, N, [&](int64_t off, int64_t w) {
        auto y = cols(y0, N, off, w);
        cpu::layer_scale_add(C, w, g.data(), cols(x, N, off, w).data(), y.data());
        return bits(y);
      });
    }
  }
  SUBCASE("rvq encode and decode") {
    // columns are frames. Near-duplicate codebook rows (base + 1e-6 noise) make the argmin hinge
    // on the last bits of the distances, so an order change in the dot-product GEMM shows up.
    struct Case { int64_t Q, F, bins, n; float spread; };
    for (const Case& c : {Case{256, 12, 2048, 2, 1.0f}, Case{256, 9, 64, 3, 1e-6f}, Case{32, 40, 64, 4, 1e-6f},
                          Case{4, 7, 5, 3, 1.0f}}) {
      std::vector<std::vector<float>> books, norms;
      std::vector<const float*> bp, np;
      for (int64_t j = 0; j < c.n; ++j) {
        const auto base = random_vec(size_t(c.Q), r);
        std::vector<float> E(size_t(c.bins * c.Q)), nn(size_t(c.bins));
        for (int64_t b = 0; b < c.bins; ++b)
          for (int64_t q = 0; q < c.Q; ++q) {
            const float e = (c.spread < 1 ? base[size_t(q)] : 0.0f) + c.spread * r.uniform(-1, 1);
            E[size_t(b * c.Q + q)] = e;
            nn[size_t(b)] += e * e;
          }
        books.push_back(E);
        norms.push_back(nn);
      }
      for (auto& b : books) bp.push_back(b.data());
      for (auto& n : norms) np.push_back(n.data());
      const auto x = random_vec(size_t(c.Q * c.F), r);
      const std::string shape = " Q=" + std::to_string(c.Q) + " bins=" + std::to_string(c.bins);
      check_column_invariance("rvq_encode" + shape, c.F, [&](int64_t off, int64_t w) {
        std::vector<int32_t> codes(size_t(c.n * w));
        std::vector<float> work(size_t(rvq_work_floats(c.Q, w, c.bins)));
        cpu::rvq_encode(c.Q, w, c.bins, c.n, cols(x, c.F, off, w).data(), bp.data(), np.data(), codes.data(),
                        work.data());
        return bits(codes);
      });
      std::vector<int32_t> codes(size_t(c.n * c.F));
      for (auto& code : codes) code = r.small_int(0, int(c.bins - 1));
      check_column_invariance("rvq_decode" + shape, c.F, [&](int64_t off, int64_t w) {
        std::vector<float> y(size_t(c.Q * w));
        cpu::rvq_decode(c.Q, w, c.bins, c.n, cols(codes, c.F, off, w).data(), bp.data(), y.data());
        return bits(y);
      });
    }
  }
}
