// Work splitting for the CPU kernels (their own worker teams underneath: kernels/cpu/thread_pool.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/ops.h"

namespace mimi::cpu {

// Splits [0, n) into chunks of at least `grain` and runs fn(begin, end) on the kernels'
// threads; with one thread, or a single chunk, it runs inline on the caller.
template <class Fn>
void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = (n + grain - 1) / grain;
  const int threads = int(std::min<int64_t>(num_threads(), chunks));
  if (threads <= 1) {
    fn(int64_t(0), n);
    return;
  }
  auto chunk = [&](int64_t c) { fn(c * grain, std::min(n, (c + 1) * grain)); };
  run_parallel(chunks, threads, ChunkFn(chunk));
}

}  // namespace mimi::cpu
