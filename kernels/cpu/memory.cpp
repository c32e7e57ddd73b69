// CPU memory ops: host memory, so upload/download are plain copies.
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cpu/threads.h"
#include "kernels/ops.h"

namespace mimi::cpu {
namespace {
// Every block starts 64-byte aligned (whole cache lines, aligned vector loads) and zeroed, and
// has a 64-byte header just below it saying how to give it back.
//
// Why not aligned_alloc + memset (issue 29): a 1 s encode's plan holds ~50 MB of buffers, and
// the memset faulted every 4 KB page of them in, serially, before the first sample: 89% of the
// process's 14 k page faults, ~30 ms of a ~100 ms run. A large block is instead a fresh anonymous
// mapping, which the kernel hands out zeroed and faults in only where the kernels first write
// it (in parallel, and never the parts a short input does not reach). It is 2 MB-aligned and
// advised as huge-page memory (transparent huge pages in "madvise" mode, the common default),
// so a fault brings 2 MB instead of 4 KB: 512x fewer faults, each clearing its page in one go.
constexpr size_t kHeader = 64;
constexpr size_t kLargeMin = size_t(1) << 20;  // below this, the heap (cheap, no syscalls)
constexpr size_t kHuge = size_t(2) << 20;      // x86-64 transparent huge page
constexpr size_t kPage = 4096;
constexpr uint64_t kSmall = 0x6d696d69736d6c6cull, kLarge = 0x6d696d696c726765ull;

struct Header {  // the 64 bytes just below a block
  uint64_t kind;  // kSmall or kLarge
  void* base;     // what to free (kSmall) or unmap (kLarge)
  size_t length;  // the mapping's length (kLarge)
};
static_assert(sizeof(Header) <= kHeader);

Header* header_of(void* p) { return reinterpret_cast<Header*>(static_cast<char*>(p) - kHeader); }

void* small_block(size_t rounded) {
  char* base = static_cast<char*>(std::aligned_alloc(64, rounded + kHeader));
  if (!base) throw std::bad_alloc();
  std::memset(base + kHeader, 0, rounded);
  *reinterpret_cast<Header*>(base) = Header{kSmall, base, 0};
  return base + kHeader;
}

[[maybe_unused]] void* large_block(size_t rounded) {
  // [start: the header's own 4 KB page][the block: 2 MB-aligned, rounded up to whole pages]
  const size_t body = (rounded + kPage - 1) / kPage * kPage;
  if (body > SIZE_MAX - kHuge - kPage) throw std::bad_alloc();
  const size_t reserve = body + kHuge + kPage;  // room to align
  void* got = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (got == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t lo = reinterpret_cast<uintptr_t>(got);
  const uintptr_t block = (lo + kPage + kHuge - 1) & ~uintptr_t(kHuge - 1);
  const uintptr_t start = block - kPage, end = block + body;
  // give back the slack, so that the header's page stands alone (with THP "always", a header
  // inside a 2 MB-aligned stretch of the mapping would pull in a whole huge page)
  if (start > lo) ::munmap(got, start - lo);
  if (lo + reserve > end) ::munmap(reinterpret_cast<void*>(end), lo + reserve - end);
  if (body >= kHuge) ::madvise(reinterpret_cast<void*>(block), body, MADV_HUGEPAGE);  // advice only
  void* p = reinterpret_cast<void*>(block);
  *header_of(p) = Header{kLarge, reinterpret_cast<void*>(start), end - start};
  return p;
}

void* zeroed(size_t bytes) {
  if (bytes > SIZE_MAX - 2 * kHuge) throw std::bad_alloc();
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
#if defined(__SANITIZE_ADDRESS__)
  return small_block(rounded);  // ASan checks heap blocks' bounds, not our own mappings'
#else
  return rounded >= kLargeMin ? large_block(rounded) : small_block(rounded);
#endif
}
}  // namespace

float* alloc(size_t n) {
  if (n > SIZE_MAX / sizeof(float)) throw std::bad_alloc();
  return static_cast<float*>(zeroed(n * sizeof(float)));
}
int32_t* alloc_i32(size_t n) {
  if (n > SIZE_MAX / sizeof(int32_t)) throw std::bad_alloc();
  return static_cast<int32_t*>(zeroed(n * sizeof(int32_t)));
}
void release(void* p) {
  if (!p) return;
  const Header h = *header_of(p);
  if (h.kind == kLarge)
    ::munmap(h.base, h.length);
  else
    std::free(h.base);
}

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
