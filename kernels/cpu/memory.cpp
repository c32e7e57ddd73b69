// CPU memory ops: host memory, so upload/download are plain copies.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cpu/threads.h"
#include "kernels/ops.h"

namespace mimi::cpu {
namespace {
void* zeroed(size_t bytes) {
  // 64-byte aligned (whole cache lines, aligned vector loads), at least one byte
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}
}  // namespace

float* alloc(size_t n) { return static_cast<float*>(zeroed(n * sizeof(float))); }
int32_t* alloc_i32(size_t n) { return static_cast<int32_t*>(zeroed(n * sizeof(int32_t))); }
void release(void* p) { std::free(p); }

void copy2d(float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width, int64_t rows) {
  if (width <= 0 || rows <= 0) return;
  // split big copies (a sub-chunk's 128 x 7680 activation) across threads, in whole rows
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / width);
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::memcpy(dst + r * dpitch, src + r * spitch, size_t(width) * sizeof(float));
  });
}

void add2d(float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j) dst[r * dpitch + j] += src[r * spitch + j];
}

void fill(float* dst, int64_t n, float value) { std::fill(dst, dst + std::max<int64_t>(n, 0), value); }

void upload(float* dst, const float* host_src, size_t n) {
  if (n && dst != host_src) std::memcpy(dst, host_src, n * sizeof(float));
}
void download(float* host_dst, const float* src, size_t n) {
  if (n && host_dst != src) std::memcpy(host_dst, src, n * sizeof(float));
}
void upload_i32(int32_t* dst, const int32_t* host_src, size_t n) {
  if (n && dst != host_src) std::memcpy(dst, host_src, n * sizeof(int32_t));
}
void download_i32(int32_t* host_dst, const int32_t* src, size_t n) {
  if (n && host_dst != src) std::memcpy(host_dst, src, n * sizeof(int32_t));
}

}  // namespace mimi::cpu
