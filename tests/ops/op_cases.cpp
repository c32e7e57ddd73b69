// The op cases: every shape of the former per-backend sweeps (tests/test_kernels.cpp "X: cpu vs
// ref" and tests/test_gpu_kernels.cpp "gpu X"), merged, each run with every variant either sweep
// had, on every backend. Degenerate sizes on purpose: T = 1, T below the kernel span, K = 0, one
// channel, groups = C, strides that do not divide T, ragged tiles of every fast path.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>

#include "tests/ops/op_case.h"

namespace mimi::optest {

std::vector<float> Rng::vec(size_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (auto& x : v) x = integer ? float(int64_t(next() % 7) - 3) : uniform(lo, hi);
  return v;
}

Arena::~Arena() {
  for (void* p : owned_) k.release(p);
}
float* Arena::put(const std::vector<float>& host) {
  float* p = zeros(host.size());
  if (!host.empty()) k.upload(p, host.data(), host.size());
  return p;
}
float* Arena::zeros(size_t n) {
  float* p = k.alloc(std::max<size_t>(n, 1));
  owned_.push_back(p);
  return p;
}
float* Arena::nans(size_t n) { return put(std::vector<float>(n, std::nanf(""))); }
int32_t* Arena::put_i32(const std::vector<int32_t>& host) {
  int32_t* p = k.alloc_i32(std::max<size_t>(host.size(), 1));
  owned_.push_back(p);
  if (!host.empty()) k.upload_i32(p, host.data(), host.size());
  return p;
}
std::vector<float> Arena::get(const float* p, size_t n) const {
  std::vector<float> h(n);
  if (n) k.download(h.data(), p, n);
  return h;
}
std::vector<int32_t> Arena::get_i32(const int32_t* p, size_t n) const {
  std::vector<int32_t> h(n);
  if (n) k.download_i32(h.data(), p, n);
  return h;
}

namespace {

void gemm_cases(Table& t) {
  struct Case { int64_t M, N, K, pad; bool acc; };
  std::vector<Case> cases = {{1, 1, 1, 0, false},  {1, 1, 1, 3, true},    {7, 33, 5, 0, false},
                             {6, 32, 256, 1, false}, {13, 100, 300, 2, true}, {1, 513, 1, 0, false},
                             {5, 7, 600, 0, false},  {40, 1, 17, 4, true},   {97, 257, 129, 0, false}};
  // GPU kernel boundaries: the one-output-per-thread kernel (M or N < 32), whole and ragged
  // 64 x 64 tiles, K below, at and across the 16-wide step, K = 0; each dense and padded
  // (row strides not a multiple of 4), accumulating or not
  for (auto [M, N, K] : {std::array<int64_t, 3>{1, 1, 1}, {7, 33, 5}, {300, 2, 64}, {31, 200, 40}, {64, 250, 512},
                         {97, 257, 129}, {64, 64, 16}, {128, 192, 48}, {65, 65, 17}, {33, 1000, 3}, {200, 40, 1},
                         {32, 32, 0}})
    for (int64_t pad : {0, 3})
      for (bool acc : {false, true}) cases.push_back({M, N, K, pad, acc});
  // the CPU's shared packing of B (threads > 1, M > N > 4, 2^20 flops or more): narrow, ragged
  // and more than one NC-wide block of columns, K over several KC blocks
  for (auto [M, N, K] : {std::array<int64_t, 3>{600, 40, 300}, {700, 7, 513}, {1100, 520, 260}})
    for (int64_t pad : {0, 3}) cases.push_back({M, N, K, pad, pad > 0});
  for (const Case& c : cases)
    for (bool integer : {false, true}) {
      const int64_t lda = c.K + c.pad, ldb = c.N + c.pad, ldc = c.N + c.pad;
      t.add("gemm", kv({{"M", c.M}, {"N", c.N}, {"K", c.K}, {"pad", c.pad}}) + (c.acc ? " acc" : ""), {1e-5, 1e-6},
            {1e-5, 1e-6}, integer, 2.0 * c.M * c.N * c.K, 4.0 * (c.M * c.K + c.K * c.N + c.M * c.N * (c.acc ? 2 : 1)),
            [c, lda, ldb, ldc](Arena& a, Rng& r) {
              float* A = a.put(r.vec(size_t(c.M * lda)));
              float* B = a.put(r.vec(size_t(std::max<int64_t>(c.K, 1) * ldb)));
              float* C = a.put(r.vec(size_t(c.M * ldc)));  // the padding columns must stay untouched
              const Kernels& k = a.k;
              return Bound{[=, &k] { k.gemm(c.M, c.N, c.K, A, lda, B, ldb, C, ldc, c.acc); },
                           [=, &a] { return a.get(C, size_t(c.M * ldc)); }};
            });
    }
}

struct ConvCase { int64_t cin, cout, k, stride, dil, groups, T; PadMode pad; };

}  // namespace

std::vector<Conv1dShape> conv1d_shapes() {
  using Case = ConvCase;
  const PadMode Z = PadMode::Zero, R = PadMode::Replicate;
  const Case cases[] = {
      {1, 1, 1, 1, 1, 1, 1, Z},        // everything 1
      {1, 4, 7, 1, 1, 1, 1, Z},        // T = 1 < kernel
      {1, 4, 7, 1, 1, 1, 5, Z},        // T < kernel
      {3, 5, 3, 1, 1, 1, 17, Z},       // odd channels
      {4, 8, 8, 4, 1, 1, 37, Z},       // stride 4, T not a multiple
      {5, 10, 10, 5, 1, 1, 23, Z},     // stride 5
      {6, 6, 3, 1, 2, 1, 30, Z},       // dilation 2
      {6, 6, 3, 1, 1, 6, 30, Z},       // groups = C (depthwise)
      {6, 6, 3, 1, 2, 6, 30, Z},       // depthwise and dilated
      {4, 6, 3, 1, 1, 2, 31, Z},       // groups = 2
      {8, 8, 4, 2, 1, 1, 9, R},        // the downsample conv
      {3, 3, 4, 2, 1, 1, 1, R},        // replicate with T = 1
      {7, 7, 4, 2, 1, 7, 12, R},       // replicate, depthwise
      {64, 32, 3, 1, 1, 1, 600, Z},    // several time tiles
      {32, 64, 1, 1, 1, 1, 300, Z},    // pointwise fast path
      {6, 9, 1, 1, 1, 3, 20, Z},       // pointwise, grouped
      {130, 70, 7, 1, 1, 1, 513, Z},   // ragged register blocks
      {2, 3, 16, 8, 1, 1, 100, Z},     // kernel 2*stride, T not a multiple
      {64, 1, 3, 1, 1, 1, 5000, Z},    // CPU direct path: one output channel, long
      {64, 1, 7, 1, 1, 1, 4231, Z},    // the decoder's last conv, ragged length
      {2, 3, 7, 1, 1, 1, 130, R},      // direct, register blocks + vector + scalar tails
      {1, 64, 7, 1, 1, 1, 9000, Z},    // direct path: one input channel
      {3, 2, 4, 2, 1, 1, 9001, R},     // direct, strided, replicate
      {40, 24, 5, 1, 1, 1, 700, Z},    // tiled path (T_out > 512)
      {40, 24, 4, 2, 1, 1, 1100, R},   // tiled, strided, replicate
      {24, 20, 3, 1, 2, 4, 600, Z},    // tiled, grouped, dilated
      {16, 24, 10, 5, 1, 1, 2703, Z},  // tiled strided (phase split), T not a multiple
      {8, 8, 4, 2, 1, 2, 1301, R},     // phase split, grouped, replicate
      {6, 9, 7, 3, 1, 1, 1700, Z},     // phase split, kernel not a multiple of stride
      {16, 24, 10, 5, 1, 1, 2708, Z},  // phase split, kernel 2*stride (output pairs), odd T_out
      {5, 7, 8, 4, 1, 1, 2055, R},     // output pairs, replicate, odd T_out in the last tile
      {64, 128, 8, 4, 1, 1, 4100, Z},  // output pairs at the first downsample's width, ragged tile
      // GPU: more than one block of outputs per channel (256 threads), odd tails
      {2, 3, 3, 1, 1, 1, 300, R},
      {2, 3, 4, 2, 3, 1, 517, Z},
      {2, 2, 7, 3, 1, 1, 2, R},  // input shorter than the kernel span
      // GPU implicit GEMM (Cout and T_out >= 32): whole and ragged tiles, Cin*K not a multiple of
      // 4 (scalar loads of w), dilation, stride
      {4, 64, 7, 1, 1, 1, 64, Z},
      {3, 40, 7, 1, 1, 1, 70, R},
      {33, 64, 3, 1, 3, 1, 100, R},
      {8, 32, 8, 4, 1, 1, 200, Z},
      {16, 70, 1, 1, 1, 1, 129, Z},
      // GPU split-K GEMM (groups 1, T_out < 32): K past one round of 32 chunks (300 x 4 terms),
      // rows not a multiple of its 8
      {300, 40, 4, 1, 1, 1, 10, Z},
      {40, 9, 3, 2, 1, 1, 20, R},
  };
  std::vector<Conv1dShape> out;
  for (const Case& c : cases) out.push_back({c.cin, c.cout, c.k, c.stride, c.dil, c.groups, c.T, c.pad});
  return out;
}

namespace {

void conv1d_cases(Table& t) {
  const PadMode R = PadMode::Replicate;
  // variants: bias or not, a streaming left context or the padding, ELU fused on the input,
  // accumulate (the fused residual add); the integer runs skip ELU (its values are not exact)
  struct Variant { bool bias, ctx, elu, acc; };
  std::vector<Variant> float_variants{{false, false, false, false}};
  for (int v = 0; v < 8; ++v) float_variants.push_back({true, bool(v & 1), bool(v & 2), bool(v & 4)});
  const std::vector<Variant> int_variants{
      {true, false, false, false}, {false, false, false, false}, {true, true, false, false}, {true, false, false, true}};
  for (const Conv1dShape& base : conv1d_shapes())
    for (bool integer : {false, true})
      for (const Variant& v : integer ? int_variants : float_variants) {
        const ConvCase c{base.in_channels, base.out_channels, base.kernel,   base.stride,
                         base.dilation,    base.groups,       base.length_in, base.pad};
        Conv1dShape s{c.cin, c.cout, c.k, c.stride, c.dil, c.groups, c.T, c.pad};
        s.elu_input = v.elu;
        const int64_t Tout = s.length_out(), nw = c.cout * (c.cin / c.groups) * c.k;
        const std::string shape = kv({{"cin", c.cin}, {"cout", c.cout}, {"k", c.k}, {"stride", c.stride},
                                      {"dil", c.dil}, {"groups", c.groups}, {"T", c.T}}) +
                                  (c.pad == R ? " replicate" : "") + (v.bias ? "" : " nobias") +
                                  (v.ctx ? " ctx" : "") + (v.elu ? " elu" : "") + (v.acc ? " acc" : "");
        t.add("conv1d", shape, {1e-5, 1e-6}, {1e-5, 1e-6}, integer, 2.0 * c.cout * (c.cin / c.groups) * c.k * Tout,
              4.0 * (c.cin * c.T + nw + c.cout * Tout * (v.acc ? 2 : 1)), [s, c, v, nw, Tout](Arena& a, Rng& r) {
                float* x = a.put(r.vec(size_t(c.cin * c.T)));
                float* w = a.put(r.vec(size_t(nw)));
                float* b = v.bias ? a.put(r.vec(size_t(c.cout))) : nullptr;
                float* ctx = v.ctx ? a.put(r.vec(size_t(c.cin * s.pad_left()))) : nullptr;
                float* y = a.put(r.vec(size_t(c.cout * Tout)));  // what accumulate adds to
                const Kernels& k = a.k;
                return Bound{[=, &k] { k.conv1d(s, x, w, b, y, v.acc, ctx); },
                             [=, &a] { return a.get(y, size_t(c.cout * Tout)); }};
              });
      }
}

}  // namespace

std::vector<ConvTranspose1dShape> conv_transpose1d_shapes() {
  struct Case { int64_t cin, cout, k, stride, groups, T; };
  const Case cases[] = {
      {1, 1, 1, 1, 1, 1},     {4, 2, 16, 8, 1, 1},    {4, 2, 16, 8, 1, 7},    {5, 3, 12, 6, 1, 11},
      {6, 6, 4, 2, 6, 9},     {6, 6, 4, 2, 6, 1},     {4, 6, 4, 2, 2, 5},     {64, 32, 8, 4, 1, 1100},
      {3, 5, 3, 3, 1, 4},     {7, 3, 10, 5, 1, 13},   {33, 33, 4, 2, 33, 50},
      {8, 4, 8, 4, 1, 1500},  {5, 3, 10, 5, 1, 1100}, {3, 2, 7, 3, 1, 1030},  // CPU polyphase path
      {6, 5, 12, 6, 1, 1301}, {4, 3, 7, 4, 1, 1025},  // polyphase output-step pairs: odd last tile, K < 2S
      {128, 64, 8, 4, 1, 1024},  // pairs at the last upsample's width
      {300, 3, 16, 8, 1, 2},  {260, 5, 4, 2, 1, 4},   {520, 1, 3, 1, 1, 3},  // skinny, K over KC blocks
      {4, 2, 16, 8, 1, 3},    {6, 6, 4, 2, 6, 5},     {5, 3, 12, 6, 1, 1},    {4, 3, 8, 4, 1, 1200},
      {3, 2, 7, 3, 1, 1100},  {5, 4, 10, 5, 1, 1025}, {5, 3, 10, 5, 1, 3},    {8, 4, 8, 4, 1, 1100},
      // GPU: more than one block per channel, grouped; the stacked-phase GEMM (stride x Cout and
      // T_out / stride >= 32; K = 2S as in Mimi, taps past K, stride 1); the split-K GEMM (groups
      // 1, fewer than 32 columns: K 80 and 600)
      {3, 2, 5, 2, 1, 150},   {2, 4, 3, 1, 2, 259},   {8, 16, 16, 8, 1, 40},  {5, 12, 12, 6, 1, 33},
      {3, 40, 5, 2, 1, 70},   {7, 33, 3, 1, 1, 100},  {40, 12, 16, 8, 1, 3},  {300, 5, 4, 2, 1, 4},
  };
  std::vector<ConvTranspose1dShape> out;
  for (const Case& c : cases) out.push_back({c.cin, c.cout, c.k, c.stride, c.groups, c.T});
  return out;
}

namespace {

void conv_transpose1d_cases(Table& t) {
  struct Case { int64_t cin, cout, k, stride, groups, T; };
  for (const ConvTranspose1dShape& base : conv_transpose1d_shapes())
    for (bool trimmed : {true, false})  // untrimmed: the streaming tail
      for (bool bias : {true, false})
        for (bool integer : {false, true}) {
          const Case c{base.in_channels, base.out_channels, base.kernel, base.stride, base.groups, base.length_in};
          ConvTranspose1dShape s = base;
          s.trimmed = trimmed;
          const int64_t Tout = s.length_out(), nw = c.cin * (c.cout / c.groups) * c.k;
          t.add("conv_transpose1d",
                kv({{"cin", c.cin}, {"cout", c.cout}, {"k", c.k}, {"stride", c.stride}, {"groups", c.groups},
                    {"T", c.T}}) + (trimmed ? "" : " untrimmed") + (bias ? "" : " nobias"),
                {1e-5, 1e-6}, {1e-5, 1e-6}, integer, 2.0 * c.cin * (c.cout / c.groups) * c.k * c.T,
                4.0 * (c.cin * c.T + nw + c.cout * Tout), [s, c, bias, nw, Tout](Arena& a, Rng& r) {
                  float* x = a.put(r.vec(size_t(c.cin * c.T)));
                  float* w = a.put(r.vec(size_t(nw)));
                  float* b = bias ? a.put(r.vec(size_t(c.cout))) : nullptr;
                  float* y = a.nans(size_t(c.cout * Tout));
                  const Kernels& k = a.k;
                  return Bound{[=, &k] { k.conv_transpose1d(s, x, w, b, y); },
                               [=, &a] { return a.get(y, size_t(c.cout * Tout)); }};
                });
        }
}

void resblock_cases(Table& t) {
  struct Case { int64_t C, H, K, d, T; };
  for (const Case& c : {Case{4, 2, 3, 1, 1}, Case{8, 4, 3, 1, 5}, Case{64, 32, 3, 1, 600}, Case{6, 3, 3, 2, 300},
                        Case{5, 3, 1, 1, 17}, Case{3, 2, 3, 1, 257}})
    for (bool ctx : {false, true}) {
      const ResBlockShape s{c.C, c.H, c.K, c.d, c.T};
      OpCase& oc = t.add(
          "resblock", kv({{"C", c.C}, {"H", c.H}, {"K", c.K}, {"dil", c.d}, {"T", c.T}}) + (ctx ? " ctx" : ""),
          {1e-5, 1e-6}, {1e-5, 1e-6}, false, 2.0 * c.T * (c.H * c.C * c.K + c.C * c.H),
          4.0 * (2 * c.C * c.T + c.H * c.C * c.K + c.C * c.H), [s, c, ctx](Arena& a, Rng& r) {
            float* w1 = a.put(r.vec(size_t(c.H * c.C * c.K)));
            float* b1 = a.put(r.vec(size_t(c.H)));
            float* w2 = a.put(r.vec(size_t(c.C * c.H)));
            float* b2 = a.put(r.vec(size_t(c.C)));
            float* x = a.put(r.vec(size_t(c.C * c.T), -3, 3));
            float* cx = ctx ? a.put(r.vec(size_t(c.C * s.context()), -3, 3)) : nullptr;
            const Kernels& k = a.k;
            return Bound{[=, &k] { k.resblock(s, w1, b1, w2, b2, cx, x); },
                         [=, &a] { return a.get(x, size_t(c.C * c.T)); }};
          });
      oc.present = [](const Kernels& k) { return k.resblock != nullptr; };  // optional: the GPU composes it
    }
}

void elementwise_cases(Table& t) {
  for (int64_t n : {1, 17, 100000}) {
    using Unary = void (*const Kernels::*)(int64_t, const float*, float*);
    for (auto [name, fn, cpu_tol, gpu_tol] :
         {std::tuple<const char*, Unary, Tol, Tol>{"elu", &Kernels::elu, {0, 1e-7}, {0, 1e-6}},
          {"gelu_erf", &Kernels::gelu_erf, {0, 2e-6}, {0, 2e-6}}})
      for (bool in_place : {false, true})
        t.add(name, kv({{"n", n}}) + (in_place ? " in-place" : ""), cpu_tol, gpu_tol, false, double(n), 8.0 * n,
              [n, fn, in_place](Arena& a, Rng& r) {
                float* x = a.put(r.vec(size_t(n), -6, 6));
                float* y = in_place ? x : a.nans(size_t(n));
                const Kernels& k = a.k;
                return Bound{[=, &k] { (k.*fn)(n, x, y); }, [=, &a] { return a.get(y, size_t(n)); }};
              });
    t.add("add_inplace", kv({{"n", n}}), kExact, {0, 1e-6}, false, double(n), 12.0 * n, [n](Arena& a, Rng& r) {
      float* x = a.put(r.vec(size_t(n), -6, 6));
      float* y = a.put(r.vec(size_t(n)));
      const Kernels& k = a.k;
      return Bound{[=, &k] { k.add_inplace(n, x, y); }, [=, &a] { return a.get(y, size_t(n)); }};
    });
  }
  // [C, T] ops: the CPU sweeps' shapes, the GPU's (layer norm blocks of 32 columns: partial last
  // blocks, C below and above its 8 lanes) and the transposed convs' untrimmed outputs
  const std::array<int64_t, 2> shapes[] = {{1, 1},  {1, 7},   {5, 1},   {5, 3},   {32, 70}, {512, 3},  {512, 7},
                                           {17, 200}, {3, 32}, {7, 33}, {512, 65}, {2, 32},  {6, 12},  {3, 12},
                                           {3, 4804}, {2, 3304}, {4, 5130}};
  for (auto [C, T] : shapes) {
    const std::string shape = kv({{"C", C}, {"T", T}});
    t.add("bias_add", shape, kExact, {0, 1e-6}, false, double(C * T), 8.0 * C * T, [C, T](Arena& a, Rng& r) {
      float* b = a.put(r.vec(size_t(C)));
      float* y = a.put(r.vec(size_t(C * T)));
      const Kernels& k = a.k;
      return Bound{[=, &k] { k.bias_add(C, T, b, y); }, [=, &a] { return a.get(y, size_t(C * T)); }};
    });
    t.add("layer_scale_add", shape, kExact, {0, 1e-6}, false, 2.0 * C * T, 12.0 * C * T, [C, T](Arena& a, Rng& r) {
      float* s = a.put(r.vec(size_t(C)));
      float* x = a.put(r.vec(size_t(C * T)));
      float* y = a.put(r.vec(size_t(C * T)));
      const Kernels& k = a.k;
      return Bound{[=, &k] { k.layer_scale_add(C, T, s, x, y); }, [=, &a] { return a.get(y, size_t(C * T)); }};
    });
    if (T > 1000) continue;  // the transposed convs' outputs: bias_add's and layer_scale_add's shapes only
    t.add("layer_norm", shape, {1e-5, 1e-6}, {1e-5, 1e-5}, false, 8.0 * C * T, 8.0 * C * T, [C, T](Arena& a, Rng& r) {
      float* x = a.put(r.vec(size_t(C * T), -3, 3));
      float* g = a.put(r.vec(size_t(C)));
      float* b = a.put(r.vec(size_t(C)));
      float* y = a.nans(size_t(C * T));
      const Kernels& k = a.k;
      return Bound{[=, &k] { k.layer_norm(C, T, x, g, b, 1e-5f, y); }, [=, &a] { return a.get(y, size_t(C * T)); }};
    });
  }
}

}  // namespace

std::vector<OpCase> all_cases() {
  Table t;
  gemm_cases(t);
  conv1d_cases(t);
  conv_transpose1d_cases(t);
  resblock_cases(t);
  elementwise_cases(t);
  transformer_cases(t);
  return std::move(t.cases);
}

}  // namespace mimi::optest
