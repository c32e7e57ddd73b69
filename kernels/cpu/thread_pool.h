// The CPU kernels' threads: a team of workers per calling thread, woken for each parallel loop.
//
// Why our own and not OpenMP (issue 29): libgomp's idle workers spin 300 000 iterations before
// sleeping unless GOMP_SPINCOUNT is set *before libgomp loads*, so mimi used to re-execute
// itself to set it (a second exec and dynamic link in every process start); it cannot be told
// per call, and a process that forks after using it (Python DataLoader workers) inherits a team
// whose threads do not exist. Here the spin is ours (spin_micros(), thread_pool.cpp), nothing is re-executed,
// a child of fork() builds a fresh team, and an exception thrown by a chunk reaches the caller
// (under OpenMP it ended the process).
//
// Contract of run_parallel(chunks, threads, body): body(c) runs once for every c in
// [0, chunks), on the caller and up to threads - 1 workers of the caller's team, in any order
// and any interleaving (chunks are claimed one at a time); it returns when every chunk has run.
// Chunks must write disjoint memory. Called from inside a chunk (nested), or with threads <= 1,
// it runs every chunk on the caller, in order. If chunks throw, the remaining unclaimed chunks
// are skipped and the first exception is rethrown on the caller once the others have finished.
#pragma once

#include <cstdint>
#include <type_traits>

namespace mimi::cpu {

// A borrowed callable (no allocation): valid for the duration of the call that receives it.
class ChunkFn {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::remove_cv_t<F>, ChunkFn>>>
  explicit ChunkFn(F& f) : ctx_(&f), call_([](void* c, int64_t i) { (*static_cast<F*>(c))(i); }) {}
  void operator()(int64_t i) const { call_(ctx_, i); }

 private:
  void* ctx_;
  void (*call_)(void*, int64_t);
};

void run_parallel(int64_t chunks, int threads, ChunkFn body);

// Workers currently started in the calling thread's team (tests).
int team_workers();

}  // namespace mimi::cpu
