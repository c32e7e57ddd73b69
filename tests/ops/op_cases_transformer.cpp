// The transformer's and the quantizer's op cases: linear (plain and the GPU's fused epilogues,
// composed from the plain ops where a backend has no fused table, as the plans do), rope,
// attention, rvq encode and decode.
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>

#include "tests/ops/op_case.h"

namespace mimi::optest {

namespace {

void linear_cases(Table& t) {
  // the CPU sweep's shapes and the fused-epilogue shapes of the GPU test: its small kernel
  // (T < 32), the tiled one, unaligned rows (in = 30: no float4 loads); then the full model's
  // projections at the encoder's and decoder's chunks (qkv at 64 frames, ff1 at 64, ff2 at 128:
  // `test_ops --perf --op linear` times the shapes the transformer runs)
  for (auto [in, out, T] : {std::array<int64_t, 3>{1, 1, 1}, {32, 96, 54}, {64, 32, 1}, {513, 7, 33}, {16, 24, 3},
                            {64, 96, 40}, {30, 70, 33}, {128, 64, 128}, {512, 1536, 64}, {512, 2048, 64},
                            {2048, 512, 128}}) {
    const std::string shape = kv({{"in", in}, {"out", out}, {"T", T}});
    const double flops = 2.0 * in * out * T, bytes = 4.0 * (in * out + in * T + out * T);
    t.add("linear", shape, {1e-5, 1e-6}, {1e-5, 1e-5}, false, flops, bytes, [in, out, T](Arena& a, Rng& r) {
      float* W = a.put(r.vec(size_t(in * out)));
      float* x = a.put(r.vec(size_t(in * T)));
      float* y = a.nans(size_t(out * T));
      const Kernels& k = a.k;
      return Bound{[=, &k] { k.linear(in, out, T, W, x, y); }, [=, &a] { return a.get(y, size_t(out * T)); }};
    });
    t.add("linear_gelu", shape, {1e-5, 1e-5}, {1e-5, 1e-5}, false, flops, bytes, [in, out, T](Arena& a, Rng& r) {
      float* W = a.put(r.vec(size_t(in * out)));
      float* x = a.put(r.vec(size_t(in * T), -3, 3));
      float* y = a.nans(size_t(out * T));
      const Kernels& k = a.k;
      return Bound{[=, &k] {
                     if (k.fused) return k.fused->linear_gelu(in, out, T, W, x, y);
                     k.linear(in, out, T, W, x, y);
                     k.gelu_erf(out * T, y, y);
                   },
                   [=, &a] { return a.get(y, size_t(out * T)); }};
    });
    t.add("linear_scale_add", shape, {1e-5, 1e-5}, {1e-5, 1e-5}, false, flops + 2.0 * out * T,
          bytes + 4.0 * out * T, [in, out, T](Arena& a, Rng& r) {
            float* W = a.put(r.vec(size_t(in * out)));
            float* x = a.put(r.vec(size_t(in * T), -3, 3));
            float* s = a.put(r.vec(size_t(out)));
            float* y = a.put(r.vec(size_t(out * T)));
            float* h = a.nans(size_t(out * T));
            const Kernels& k = a.k;
            return Bound{[=, &k] {
                           if (k.fused) return k.fused->linear_scale_add(in, out, T, W, x, s, y);
                           k.linear(in, out, T, W, x, h);
                           k.layer_scale_add(out, T, s, h, y);
                         },
                         [=, &a] { return a.get(y, size_t(out * T)); }};
          });
    for (bool gelu : {false, true})
      t.add("layer_norm_linear", shape + (gelu ? " gelu" : ""), {1e-5, 1e-5}, {1e-5, 1e-5}, false,
            flops + 8.0 * in * T, bytes, [in, out, T, gelu](Arena& a, Rng& r) {
              float* W = a.put(r.vec(size_t(in * out)));
              float* x = a.put(r.vec(size_t(in * T), -3, 3));
              float* g = a.put(r.vec(size_t(in)));
              float* b = a.put(r.vec(size_t(in)));
              float* stats = a.nans(size_t(2 * T));
              float* normed = a.nans(size_t(in * T));
              float* y = a.nans(size_t(out * T));
              const Kernels& k = a.k;
              return Bound{[=, &k] {
                             if (k.fused) return k.fused->layer_norm_linear(in, out, T, W, x, g, b, 1e-5f, gelu, stats, y);
                             k.layer_norm(in, T, x, g, b, 1e-5f, normed);
                             k.linear(in, out, T, W, normed, y);
                             if (gelu) k.gelu_erf(out * T, y, y);
                           },
                           [=, &a] { return a.get(y, size_t(out * T)); }};
            });
  }
}

void rope_cases(Table& t) {
  // angles past 1000 rad (a long stream's position), the largest head_dim
  for (auto [H, hd, T, pos] : {std::array<int64_t, 4>{1, 2, 1, 0}, {4, 8, 17, 0}, {8, 64, 100, 250}, {3, 6, 5, 7},
                               {1, 64, 3, 4000}, {1, 512, 2, 9}})
    for (RopeLayout layout : {RopeLayout::Interleaved, RopeLayout::RotateHalf})
      t.add("rope",
            kv({{"H", H}, {"hd", hd}, {"T", T}, {"pos", pos}}) +
                (layout == RopeLayout::Interleaved ? " interleaved" : " rotate-half"),
            {1e-6, 1e-7}, {1e-5, 1e-5}, false, 6.0 * H * hd * T, 8.0 * H * hd * T,
            [H, hd, T, pos, layout](Arena& a, Rng& r) {
              float* x = a.put(r.vec(size_t(H * hd * T)));
              int32_t* p = a.put_i32({int32_t(pos)});  // the position lives in the backend's memory
              const Kernels& k = a.k;
              return Bound{[=, &k] { k.rope(H, hd, T, p, 10000.0f, layout, x); },
                           [=, &a] { return a.get(x, size_t(H * hd * T)); }};
            });
}

void attention_cases(Table& t) {
  struct Case { int64_t H, Tq, Tk, hd, q_start, k_start, context; };
  for (const Case& c : {Case{1, 1, 1, 2, 0, 0, 1}, Case{2, 17, 17, 8, 0, 0, 5}, Case{4, 40, 40, 16, 0, 0, 250},
                        Case{2, 10, 25, 4, 15, 0, 5}, Case{3, 5, 5, 6, 0, 0, 1},
                        Case{1, 4, 4, 2, 0, 10, 3},  // sees nothing: zeros
                        Case{8, 300, 300, 64, 0, 0, 250}, Case{2, 2, 6, 4, 4, 0, 250},
                        // head_dim 64 (the GPU's tiled kernel): a streaming step against the cached
                        // window, ragged query blocks, a window smaller than a key tile, queries
                        // that see no key
                        Case{8, 2, 251, 64, 1000, 751, 250}, Case{2, 70, 130, 64, 60, 0, 50},
                        Case{1, 33, 33, 64, 5, 3, 7}, Case{1, 5, 10, 64, 0, 3, 2}}) {
    const double seen = double(std::min(c.Tk, c.context));
    t.add("attention",
          kv({{"H", c.H}, {"Tq", c.Tq}, {"Tk", c.Tk}, {"hd", c.hd}, {"q_start", c.q_start}, {"k_start", c.k_start},
              {"ctx", c.context}}),
          {1e-5, 1e-6}, {1e-5, 1e-6}, false, 4.0 * c.H * c.hd * c.Tq * seen, 4.0 * c.H * c.hd * (2 * c.Tq + 2 * c.Tk),
          [c](Arena& a, Rng& r) {
            const size_t nq = size_t(c.H * c.hd * c.Tq), nk = size_t(c.H * c.hd * c.Tk);
            float* q = a.put(r.vec(nq, -2, 2));
            float* kk = a.put(r.vec(nk, -2, 2));
            float* v = a.put(r.vec(nk));
            float* o = a.put(r.vec(nq));  // every element must be written, zeros included
            const float scale = 1.0f / std::sqrt(float(c.hd));
            const Kernels& k = a.k;
            return Bound{[=, &k] { k.attention(c.H, c.Tq, c.Tk, c.hd, c.q_start, c.k_start, c.context, scale, q, kk, v, o); },
                         [=, &a] { return a.get(o, nq); }};
          });
  }
}

// n codebooks [bins, Q] and their |e|^2 in the backend's memory, the pointer arrays on the host
// (as the plans pass them). Integer runs duplicate row 0 into row 1: an exact tie, which every
// backend must break as the reference does (to the lower index).
struct Books {
  std::vector<float*> rows, norms;
  Books(Arena& a, Rng& r, int64_t Q, int64_t bins, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
      auto e = r.vec(size_t(bins * Q));
      if (r.integer && bins > 1) std::copy_n(e.begin(), Q, e.begin() + Q);
      std::vector<float> nn(size_t(bins), 0.0f);
      for (int64_t b = 0; b < bins; ++b)
        for (int64_t q = 0; q < Q; ++q) nn[size_t(b)] += e[size_t(b * Q + q)] * e[size_t(b * Q + q)];
      rows.push_back(a.put(e));
      norms.push_back(a.put(nn));
    }
  }
};

void rvq_cases(Table& t) {
  // F < 32: the GPU's one block per frame; F >= 32: a GEMM per codebook; the real 2048 bins in
  // the CPU's blocks of 16 columns and a tail; Q above the GPU block's 256 threads
  for (auto [Q, F, bins, n] : {std::array<int64_t, 4>{1, 1, 1, 1}, {4, 7, 5, 3}, {16, 27, 64, 7}, {32, 9, 300, 4},
                               {3, 1, 2, 1}, {8, 41, 2048, 2}, {300, 3, 20, 2}, {1, 32, 1, 1}, {8, 40, 64, 3},
                               {16, 70, 300, 4}, {5, 33, 7, 2}})
    for (bool integer : {false, true}) {
      const std::string shape = kv({{"Q", Q}, {"F", F}, {"bins", bins}, {"n", n}});
      t.add("rvq_encode", shape, kExact, kExact, integer, 2.0 * Q * bins * F * n, 4.0 * (n * bins * (Q + 1) + Q * F + n * F),
            [Q, F, bins, n](Arena& a, Rng& r) {
              auto books = std::make_shared<Books>(a, r, Q, bins, n);
              float* x = a.put(r.vec(size_t(Q * F)));
              float* work = a.nans(size_t(rvq_work_floats(Q, F, bins)));
              int32_t* codes = a.put_i32(std::vector<int32_t>(size_t(n * F), -1));
              const Kernels& k = a.k;
              return Bound{[=, &k] {
                             k.rvq_encode(Q, F, bins, n, x, books->rows.data(), books->norms.data(), codes, work);
                           },
                           [=, &a] {
                             // the codes, then x: x is read only (the residual lives in the workspace)
                             const auto c = a.get_i32(codes, size_t(n * F));
                             std::vector<float> out(c.begin(), c.end());
                             const auto xs = a.get(x, size_t(Q * F));
                             out.insert(out.end(), xs.begin(), xs.end());
                             return out;
                           }};
            });
      t.add("rvq_decode", shape, kExact, {0, 1e-6}, integer, double(Q * F * n), 4.0 * (Q * F + n * F + n * bins * Q),
            [Q, F, bins, n](Arena& a, Rng& r) {
              auto books = std::make_shared<Books>(a, r, Q, bins, n);
              std::vector<int32_t> host(size_t(n * F));
              for (auto& c : host) c = int32_t(r.next() % uint64_t(bins));
              int32_t* codes = a.put_i32(host);
              float* y = a.put(r.vec(size_t(Q * F)));
              const Kernels& k = a.k;
              return Bound{[=, &k] { k.rvq_decode(Q, F, bins, n, codes, books->rows.data(), y); },
                           [=, &a] { return a.get(y, size_t(Q * F)); }};
            });
    }
}

}  // namespace

void transformer_cases(Table& t) {
  linear_cases(t);
  rope_cases(t);
  attention_cases(t);
  rvq_cases(t);
}

}  // namespace mimi::optest
