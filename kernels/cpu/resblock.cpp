// CPU SEANet residual block, fused per time tile: the tile's input window (with its left
// context) is ELU'd once, multiplied by W1 (the GEMM packs its im2col rows straight from the
// window: no im2col copy), ELU'd, multiplied by W2 and added into x while everything is still
// in cache. Versus the op-by-op version this saves four passes over the activation, which at
// 24 kHz x 64 channels is 61 MB per 10 s each.
// Tiles run in parallel: each takes its left context from a snapshot of the original x made
// before any tile writes.
#include <algorithm>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/scratch.h"
#include "kernels/ops.h"

namespace mimi::cpu {
namespace {
// Columns per tile: long row segments (the tile reads C rows of x, T apart, whose short streams
// the hardware prefetcher picks up late) while the tile's window and hidden activations, about
// 1.5*C*n floats, stay within a 512 KB L2; and at least 4 tiles per thread where T allows.
int64_t tile_columns(int64_t C, int64_t T) {
  int64_t n = 1024;
  while (n > 128 && C * n > 65536) n /= 2;
  const int64_t per_thread = (T / (4 * num_threads()) + 15) / 16 * 16;
  return std::max<int64_t>(128, std::min(n, per_thread));
}
// Floats between rows of the hidden activation beyond its n columns. With rows exactly n = 1024
// floats (4 KB) apart, the 32 rows that the second GEMM reads at each step (its B, read in
// place) all fell in one set of the 8-way L1 and evicted each other: measured 1.15-1.27x on the
// 64-channel block with one more cache line per row.
constexpr int64_t kHiddenPad = 16;
}  // namespace

void resblock(const ResBlockShape& s, const float* w1, const float* b1, const float* w2, const float* b2,
              const float* context, float* x) {
  const int64_t C = s.channels, H = s.hidden, K = s.kernel, d = s.dilation, T = s.length, P = s.context();
  if (T <= 0) return;
  const int64_t tile = even_tile(T, tile_columns(C, T), 16);
  const int64_t tiles = (T + tile - 1) / tile;
  std::vector<float>& snap = MIMI_THREAD_SCRATCH(std::vector<float>);  // [tiles, C, P]: raw x left of each tile
  if (snap.size() < size_t(tiles * C * P)) snap.resize(size_t(tiles * C * P));
  float* sn = snap.data();  // (thread_local: name it here, workers have their own)
  for (int64_t i = 0; i < tiles; ++i)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < P; ++j) {
        const int64_t idx = i * tile - P + j;
        sn[(i * C + c) * P + j] = idx >= 0 ? x[c * T + idx] : (context ? context[c * P + P + idx] : 0.0f);
      }
  parallel_for(tiles, 1, [&](int64_t b, int64_t e) {
    std::vector<float>& win = MIMI_THREAD_SCRATCH(std::vector<float>);
    std::vector<float>& h = MIMI_THREAD_SCRATCH(std::vector<float>);
    std::vector<const float*>& rows = MIMI_THREAD_SCRATCH(std::vector<const float*>);  // im2col row (c, k) = window row c from k*d
    for (int64_t i = b; i < e; ++i) {
      const int64_t t0 = i * tile, n = std::min(tile, T - t0), L = P + n, ldh = n + kHiddenPad;
      win.resize(size_t(C * L));
      rows.resize(size_t(C * K));
      h.resize(size_t(H * ldh));
      for (int64_t c = 0; c < C; ++c) {
        if (c + 1 < C) prefetch_span(x + (c + 1) * T + t0, n);  // the next row, ahead of its ELU
        float* w = win.data() + c * L;  // ELU(x) straight from its sources: no copy pass
        elu_serial(P, sn + (i * C + c) * P, w);
        elu_serial(n, x + c * T + t0, w + P);
        for (int64_t k = 0; k < K; ++k) rows[size_t(c * K + k)] = w + k * d;
      }
      for (int64_t r = 0; r < H; ++r) std::fill(h.data() + r * ldh, h.data() + r * ldh + n, b1 ? b1[r] : 0.0f);
      gemm_serial_rows(H, n, C * K, w1, C * K, rows.data(), h.data(), ldh, true);
      for (int64_t r = 0; r < H; ++r) elu_serial(n, h.data() + r * ldh, h.data() + r * ldh);
      if (b2)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t j = 0; j < n; ++j) x[c * T + t0 + j] += b2[c];
      gemm_serial(C, n, H, w2, H, h.data(), ldh, x + t0, T, true);
    }
  });
}

}  // namespace mimi::cpu
