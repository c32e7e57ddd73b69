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

// Splits [0, n) into chunks of whole `unit`s (only the last may be ragged), about `per_thread`
// chunks per thread, their sizes within one unit of each other and their count a multiple of
// the threads. Threads take chunks in turn, so equal chunks in a multiple of their number finish
// together: 7 chunks of 1024 columns and one of 512 on 2 threads kept one of them idle for 1/15
// of the product, 15 equal tiles for 1/16.
template <class Fn>
void parallel_for_even(int64_t n, int64_t unit, int64_t per_thread, Fn&& fn) {
  if (n <= 0) return;
  unit = std::max<int64_t>(unit, 1);
  const int64_t units = (n + unit - 1) / unit;
  const int64_t threads = std::min<int64_t>(num_threads(), units);
  if (threads <= 1) {
    fn(int64_t(0), n);
    return;
  }
  const int64_t chunks = std::min(units, threads * std::max<int64_t>(per_thread, 1)) / threads * threads;
  auto chunk = [&](int64_t c) { fn(std::min(n, c * units / chunks * unit), std::min(n, (c + 1) * units / chunks * unit)); };
  run_parallel(chunks, int(threads), ChunkFn(chunk));
}

// The size of the tiles that cut `length` steps for the kernels' threads: at most `tile` (the
// cache-sized most), a multiple of `unit`, and where the length allows as many tiles as a
// multiple of the threads (see parallel_for_even).
inline int64_t even_tile(int64_t length, int64_t tile, int64_t unit) {
  const int64_t threads = num_threads();
  const int64_t tiles = (length + tile - 1) / tile;
  if (threads <= 1 || tiles <= 0) return tile;
  const int64_t even = (tiles + threads - 1) / threads * threads;
  const int64_t size = ((length + even - 1) / even + unit - 1) / unit * unit;
  return std::max(unit, std::min(tile, size));
}

}  // namespace mimi::cpu
