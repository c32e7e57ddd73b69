// The GPU emulator: the kernels of kernels/gpu/*.cu compiled by a host C++ compiler (CMake
// option MIMI_GPU_EMULATE) and run on CPU threads, so that they execute (and are tested) on a
// machine without a GPU. Included by kernels/gpu/vendor.h only; header-only.
//
// Model:
//   - one OS thread per GPU thread of a block (a pool of std::threads, grown to the largest
//     block launched), or one fiber per GPU thread with MIMI_EMU_EXEC=fibers (see "block
//     execution" below); the blocks of a grid run one after another, launches one at a time
//     (a global lock), synchronously: streams and async copies are ordered by construction.
//   - __shared__ is `static`: one copy shared by the threads of the running block, which is
//     correct because blocks never overlap. Dynamic shared memory is fresh per block and
//     filled with NaN (0xFF bytes), as are fresh device allocations: reads before writes show.
//   - __syncthreads() is a real barrier. A thread that returns while others wait at a barrier,
//     or a barrier reached after a thread of the block returned, aborts naming the kernel.
//   - launch limits (block <= 1024 threads, block.z <= 64, grid.y/z <= 65535, no zero
//     dimension, dynamic shared <= 48 KiB) are checked; a bad launch runs nothing and reports
//     cudaErrorInvalidConfiguration through GetLastError, like the real runtime.
//   - device memory is host memory (malloc); the runtime calls check that device-side ranges
//     lie inside one allocation (cudaErrorInvalidValue otherwise).
//   - the emulated device answers as one CUDA device (GetDeviceCount = 1).
//   - warpSize is 32, or 64 with MIMI_EMU_WARP=64 (HIP's wave64). Warp operations (__shfl*_sync,
//     __ballot/__any/__all_sync, __syncwarp) meet on a per-warp barrier and check their mask
//     (it must hold the caller and name only lanes the block has; a read from a lane outside it
//     gives all-ones bytes, the emulator's "undefined");
//     atomics go through std::atomic_ref. Both use atomics, so ThreadSanitizer (threads mode)
//     reports a missing __syncthreads()/__syncwarp() as the data race it is.
//   - graph capture (emulate_runtime.h): launches and async copies on a capturing stream are
//     recorded and replayed by GraphLaunch; calls a capture forbids fail as on a GPU.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <semaphore>
#include <thread>
#include <tuple>
#include <type_traits>
#include <ucontext.h>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

// Device math the kernels use that the host library lacks or spells differently.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float a, float b) { return a / b; }
template <class T>
inline T max(T a, T b) { return a < b ? b : a; }
template <class T>
inline T min(T a, T b) { return b < a ? b : a; }

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureImplicit = 906,
};
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2 };
enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone = 0, cudaStreamCaptureStatusActive = 1, cudaStreamCaptureStatusInvalidated = 2 };
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
// A created stream (StreamCreate; nullptr is the legacy stream 0). While it is being captured
// (emulate_runtime.h) the work submitted to it is recorded here instead of run.
struct mimi_emu_stream {
  bool invalidated = false;  // a forbidden call happened during the capture
  std::vector<std::function<cudaError_t()>> recorded;
};
struct mimi_emu_graph {  // what a capture recorded, in submission order
  std::vector<std::function<cudaError_t()>> work;
};
struct mimi_emu_graph_exec {
  std::vector<std::function<cudaError_t()>> work;
};
using cudaStream_t = mimi_emu_stream*;
struct mimi_emu_event {  // only timing events exist as objects (no-timing ones are nullptr)
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};
using cudaEvent_t = mimi_emu_event*;
using cudaGraph_t = mimi_emu_graph*;
using cudaGraphExec_t = mimi_emu_graph_exec*;

// The fields of the runtime's device properties that mimi reads.
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem, sharedMemPerBlock;
  int warpSize, maxThreadsPerBlock, multiProcessorCount, major, minor;
};

namespace mimi_emu {

inline int warp_size() {
  static const int w = [] {
    const char* e = std::getenv("MIMI_EMU_WARP");
    return e && std::atoi(e) == 64 ? 64 : 32;
  }();
  return w;
}

[[noreturn]] inline void die(const char* kernel, const char* what) {
  std::fprintf(stderr, "mimi GPU emulator: kernel %s: %s\n", kernel ? kernel : "?", what);
  std::fflush(stderr);
  std::abort();
}

// --- runtime state -------------------------------------------------------------------------
struct State {
  std::mutex m;                          // allocations, last error
  std::map<uintptr_t, size_t> allocs;    // device allocations: start -> bytes
  cudaError_t last = cudaSuccess;        // sticky until GetLastError
  int device = 0;
  std::recursive_mutex launch;           // one launch/copy at a time
  cudaStream_t capturing = nullptr;      // the stream being captured, if any
};
inline State& state() {
  static State s;
  return s;
}
inline cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) {
    std::lock_guard lk(state().m);
    state().last = e;
  }
  return e;
}
// Whether [p, p + bytes) lies inside one device allocation.
inline bool on_device(const void* p, size_t bytes) {
  std::lock_guard lk(state().m);
  const auto a = uintptr_t(p);
  auto it = state().allocs.upper_bound(a);
  if (it == state().allocs.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

// Work submitted to stream s (a launch, an async copy or memset, a graph): run now, returning its
// error as the synchronous call would, or recorded when s is being captured. Work for another
// stream while a capture is under way is what the real runtime refuses in global capture mode:
// it invalidates the capture and fails.
inline cudaError_t submit(cudaStream_t s, std::function<cudaError_t()> work) {
  {
    std::lock_guard lk(state().m);
    if (cudaStream_t cap = state().capturing) {
      if (s == cap) {
        cap->recorded.push_back(std::move(work));
        return cudaSuccess;
      }
      cap->invalidated = true;
      state().last = cudaErrorStreamCaptureImplicit;
      return cudaErrorStreamCaptureImplicit;
    }
  }
  return work();
}

// --- block execution ---------------------------------------------------------------------------
// How the threads of a block run (env MIMI_EMU_EXEC):
//   threads (default)  one OS thread per GPU thread (a pool of std::threads): real concurrency,
//                      what a race detector needs;
//   fibers             one ucontext fiber per GPU thread, switched at __syncthreads() on the
//                      launching thread: the same barrier semantics and checks, deterministic,
//                      and ~100x faster for barrier-heavy kernels (the golden runs use it).
// In both, a kernel whose first blocks never reach __syncthreads() (element-wise kernels) has
// its later blocks' threads run one after another on the launching thread, which is one of the
// schedules a GPU may pick; should such a kernel then reach a barrier, the emulator aborts
// (MIMI_EMU_EXEC=threads-all or fibers-all turns that shortcut off).
enum class Exec { Threads, Fibers, Sequential };

inline Exec exec_mode() {
  static const Exec e = [] {
    const char* v = std::getenv("MIMI_EMU_EXEC");
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    (void)v;
    return Exec::Threads;  // the sanitizers cannot follow the fibers' stack switches (ASan: false overflows)
#else
    return v && std::strncmp(v, "fibers", 6) == 0 ? Exec::Fibers : Exec::Threads;
#endif
  }();
  return e;
}
inline bool sequential_shortcut() {
  static const bool on = [] {
    const char* v = std::getenv("MIMI_EMU_EXEC");
    return !(v && std::strstr(v, "-all"));
  }();
  return on;
}

using LaneMask = unsigned long long;  // a warp's lanes (64 bits: the HIP wave64 case)

// A warp's meeting place for warp operations (shuffles, votes, __syncwarp): the lanes of an
// operation write their value, meet, read, and meet again before the area is reused. The
// meetings are a barrier on atomics like the block's, so ThreadSanitizer sees them.
struct Warp {
  std::atomic<unsigned> arrived{0};
  std::atomic<uint32_t> generation{0};
  std::atomic<LaneMask> exited{0};   // lanes that returned
  std::atomic<LaneMask> waiting{0};  // the mask of the operation under way (0: none)
  uint64_t values[64] = {};
};

// MIMI_EMU_JITTER=1 (threads executor): a thread that arrives at a barrier or warp operation
// sleeps a little before its checks, which opens the interleavings a busy machine produces only
// now and then (how the emulator's own barrier checks are tested against false alarms).
inline bool jitter() {
  static const bool on = [] {
    const char* v = std::getenv("MIMI_EMU_JITTER");
    return v && *v && *v != '0';
  }();
  return on;
}
inline void jitter_pause(unsigned salt) {
  if (jitter()) std::this_thread::sleep_for(std::chrono::microseconds(40 + 23 * (salt % 5)));
}

struct Block {  // the running block: its barriers and dynamic shared memory
  const char* kernel = nullptr;
  unsigned n = 0;  // threads in the block
  Exec exec = Exec::Threads;
  // The barrier (threads): futex-backed atomics (std::atomic wait/notify). Both divergence
  // checks read the other side's counter after bumping their own (seq_cst), so a thread that
  // returns and a thread that waits cannot both miss each other.
  std::atomic<unsigned> arrived{0}, exited{0}, syncs{0};
  std::atomic<uint32_t> generation{0};
  std::vector<unsigned char> dynamic;
  std::unique_ptr<Warp[]> warps;  // ceil(n / warpSize)
};
inline thread_local Block* current_block = nullptr;

void fiber_wait();  // below

inline void sync_threads() {
  Block* b = current_block;
  if (!b) die("?", "__syncthreads() outside a kernel");
  if (b->exec == Exec::Sequential)
    die(b->kernel, "__syncthreads() in a kernel that ran barrier-free in its first blocks (data-dependent "
                   "barrier?); rerun with MIMI_EMU_EXEC=threads-all or fibers-all");
  b->syncs.fetch_add(1, std::memory_order_relaxed);
  const uint32_t g = b->generation.load();
  if (b->arrived.fetch_add(1) + 1 == b->n) {
    b->arrived.store(0);
    b->generation.fetch_add(1);
    if (b->exec == Exec::Threads) b->generation.notify_all();
    return;
  }
  if (b->exec == Exec::Threads) jitter_pause(threadIdx.x);
  // A returned thread is a divergence only while this barrier is still incomplete: once the
  // last thread arrived, a fast thread may leave it, finish the kernel and return before a slow
  // one, descheduled right after arriving, gets here.
  if (b->exited.load() > 0 && b->generation.load() == g)
    die(b->kernel, "__syncthreads() reached after another thread of the block returned (divergent barrier)");
  if (b->exec == Exec::Fibers) {
    while (b->generation.load() == g) fiber_wait();
  } else {
    while (b->generation.load() == g) b->generation.wait(g);
  }
}

inline void thread_exit(Block* b, unsigned tid) {
  b->exited.fetch_add(1);
  if (b->arrived.load() > 0)
    die(b->kernel, "a thread returned while others wait at __syncthreads() (divergent barrier)");
  Warp& w = b->warps[tid / unsigned(warp_size())];
  const LaneMask me = 1ull << (tid % unsigned(warp_size()));
  w.exited.fetch_or(me);
  if (w.waiting.load() & me)
    die(b->kernel, "a lane returned while others of its warp wait in a warp operation (divergent warp operation)");
}

// --- warp operations (the CUDA/HIP functions themselves are at the end of this header) -----
struct WarpCall {
  Block* b;
  Warp* w;
  unsigned lane;
  LaneMask mask;
};
inline unsigned linear_tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

// The calling lane enters an operation over `mask`; checks what a GPU leaves undefined.
inline WarpCall warp_enter(LaneMask mask) {
  Block* b = current_block;
  if (!b) die("?", "warp operation outside a kernel");
  if (b->exec == Exec::Sequential)
    die(b->kernel, "warp operation in a kernel that ran barrier-free in its first blocks; rerun with "
                   "MIMI_EMU_EXEC=threads-all or fibers-all");
  b->syncs.fetch_add(1, std::memory_order_relaxed);  // lanes must run concurrently from now on
  const unsigned W = unsigned(warp_size()), t = linear_tid(), lane = t % W, live = std::min(W, b->n - (t - lane));
  const LaneMask existing = live == 64 ? ~0ull : (1ull << live) - 1;
  if (!((mask >> lane) & 1)) die(b->kernel, "a warp operation's mask leaves out the calling lane");
  if (mask & ~existing)
    die(b->kernel, "a warp operation's mask names lanes this block does not have (partial last warp, or a "
                   "32-lane mask on a 64-lane warp)");
  return {b, &b->warps[t / W], lane, mask};
}
// Every lane of the mask arrives before any leaves.
inline void warp_meet(const WarpCall& c) {
  Warp& w = *c.w;
  const unsigned n = unsigned(__builtin_popcountll(c.mask));
  const uint32_t g = w.generation.load();
  w.waiting.fetch_or(c.mask);
  if (w.arrived.fetch_add(1) + 1 == n) {
    w.arrived.store(0);
    w.waiting.store(0);
    w.generation.fetch_add(1);
    if (c.b->exec == Exec::Threads) w.generation.notify_all();
    return;
  }
  if (c.b->exec == Exec::Threads) jitter_pause(c.lane);
  if ((w.exited.load() & c.mask) && w.generation.load() == g)  // as in sync_threads
    die(c.b->kernel, "a warp operation's mask names a lane that returned (divergent warp operation)");
  if (c.b->exec == Exec::Fibers) {
    while (w.generation.load() == g) fiber_wait();
  } else {
    while (w.generation.load() == g) w.generation.wait(g);
  }
}
// Each lane publishes `v`; returns what lane src_of(lane) published.
template <class T, class SrcOf>
T warp_exchange(LaneMask mask, T v, SrcOf src_of) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp operations move up to 8 bytes");
  const WarpCall c = warp_enter(mask);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  c.w->values[c.lane] = bits;
  warp_meet(c);
  const unsigned src = src_of(c.lane);
  // A source lane outside the mask gives an undefined value on a GPU: here all-ones bytes (NaN, -1).
  const uint64_t got = src < 64 && ((mask >> src) & 1) ? c.w->values[src] : ~0ull;
  T out;
  std::memcpy(&out, &got, sizeof(T));
  warp_meet(c);
  return out;
}
// The mask of lanes whose `pred` is true, over the lanes of `mask`.
inline LaneMask warp_vote(LaneMask mask, bool pred) {
  const WarpCall c = warp_enter(mask);
  c.w->values[c.lane] = pred;
  warp_meet(c);
  LaneMask out = 0;
  for (unsigned l = 0; l < 64; ++l)
    if (((mask >> l) & 1) && c.w->values[l]) out |= 1ull << l;
  warp_meet(c);
  return out;
}

// The pool: worker i runs GPU thread i of every block.
class Pool {
 public:
  static Pool& get() {
    static Pool p;
    return p;
  }
  // Runs job(lane) for lane < n on n worker threads; returns when all are done.
  void run(unsigned n, const std::function<void(unsigned)>& job) {
    while (workers_.size() < n) {
      auto w = std::make_unique<Worker>();
      Worker* raw = w.get();
      const unsigned lane = unsigned(workers_.size());
      raw->thread = std::thread([this, raw, lane] { loop(raw, lane); });
      workers_.push_back(std::move(w));
    }
    job_ = &job;
    remaining_.store(n);
    for (unsigned i = 0; i < n; ++i) workers_[i]->go.release();
    done_.acquire();
  }
  ~Pool() {
    stop_ = true;
    for (auto& w : workers_) w->go.release();
    for (auto& w : workers_) w->thread.join();
  }

 private:
  struct Worker {
    std::thread thread;
    std::binary_semaphore go{0};
  };
  void loop(Worker* w, unsigned lane) {
    for (;;) {
      w->go.acquire();
      if (stop_) return;
      (*job_)(lane);
      if (remaining_.fetch_sub(1) == 1) done_.release();
    }
  }
  std::vector<std::unique_ptr<Worker>> workers_;
  const std::function<void(unsigned)>* job_ = nullptr;
  std::atomic<unsigned> remaining_{0};
  std::binary_semaphore done_{0};
  std::atomic<bool> stop_{false};
};

// Fibers: the GPU threads of a block as coroutines on the launching thread. A fiber yields only
// at a barrier; the scheduler resumes the waiting fibers once every one arrived. On x86-64 the
// switch is six pushes and a stack swap (swapcontext's signal-mask syscalls would dominate);
// elsewhere ucontext.
#if defined(__x86_64__) && !defined(MIMI_EMU_UCONTEXT)
extern "C" void mimi_emu_switch(void** save_sp, void* next_sp);
__asm__(R"(
  .text
  .weak mimi_emu_switch
  .type mimi_emu_switch, @function
mimi_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mimi_emu_switch, .-mimi_emu_switch
)");
struct FiberContext {
  void* sp = nullptr;
  void init(char* stack, size_t size, void (*entry)()) {
    auto top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t(15);
    void** p = reinterpret_cast<void**>(top - 16);  // 16-aligned slot: the return address
    *p = reinterpret_cast<void*>(entry);           // `ret` enters entry with rsp = 8 mod 16
    p -= 6;                                        // rbp rbx r12..r15, popped by the switch
    for (int i = 0; i < 6; ++i) p[i] = nullptr;
    sp = p;
  }
  static void jump(FiberContext& from, FiberContext& to) { mimi_emu_switch(&from.sp, to.sp); }
};
#else
struct FiberContext {
  ucontext_t uc;
  void init(char* stack, size_t size, void (*entry)()) {
    getcontext(&uc);
    uc.uc_stack.ss_sp = stack;
    uc.uc_stack.ss_size = size;
    uc.uc_link = nullptr;
    makecontext(&uc, entry, 0);
  }
  static void jump(FiberContext& from, FiberContext& to) { swapcontext(&from.uc, &to.uc); }
};
#endif

struct Fibers {
  static constexpr size_t kStack = 256 * 1024;
  std::vector<std::unique_ptr<char[]>> stacks;
  std::vector<FiberContext> ctx;
  std::vector<unsigned char> done;
  FiberContext sched;
  unsigned current = 0;
  const std::function<void(unsigned)>* job = nullptr;
  dim3 block;

  static Fibers& get() {
    static thread_local Fibers f;
    return f;
  }
  [[noreturn]] static void entry() {
    Fibers& f = get();
    const unsigned lane = f.current;
    (*f.job)(lane);
    f.done[lane] = 1;
    FiberContext::jump(f.ctx[lane], f.sched);  // never resumed
    std::abort();
  }
  void set_thread(unsigned lane) {
    threadIdx = uint3{lane % block.x, (lane / block.x) % block.y, lane / (block.x * block.y)};
  }
  // `b` is current_block for every fiber: one that finished clears it, the others get it back.
  void run(unsigned n, dim3 blk, Block* b, const std::function<void(unsigned)>& j) {
    job = &j;
    block = blk;
    while (stacks.size() < n) stacks.emplace_back(new char[kStack]);  // untouched until used
    ctx.resize(n);
    done.assign(n, 0);
    for (unsigned i = 0; i < n; ++i) ctx[i].init(stacks[i].get(), kStack, &Fibers::entry);
    for (unsigned left = n; left > 0;) {  // passes: each fiber runs to its next barrier or its end
      for (unsigned i = 0; i < n; ++i) {
        if (done[i]) continue;
        current = i;
        set_thread(i);
        current_block = b;
        FiberContext::jump(sched, ctx[i]);
        if (done[i]) --left;
      }
    }
  }
};
inline void fiber_wait() {
  Fibers& f = Fibers::get();
  const unsigned me = f.current;
  FiberContext::jump(f.ctx[me], f.sched);
  f.set_thread(me);
}

struct KernelStats {
  unsigned blocks = 0;  // blocks run with concurrent threads so far
  bool barriers = false;
  const char* name = nullptr;  // for MIMI_EMU_COVERAGE
};
inline std::map<const void*, KernelStats>& kernel_stats();
// MIMI_EMU_COVERAGE=FILE: at exit, one line per kernel instance launched ("name +offset"), the
// offset being its address's distance from kernel_stats() in the same binary, so that two runs
// of one binary compare with `comm`: tests/ops_gpu_subset.sh shows this way that the part of the
// op table the sanitizer builds run launches every kernel instance the whole table launches.
struct KernelTable {
  std::map<const void*, KernelStats> stats;
  ~KernelTable() {
    const char* path = std::getenv("MIMI_EMU_COVERAGE");
    if (!path || !*path) return;
    if (FILE* f = std::fopen(path, "a")) {
      const auto anchor = reinterpret_cast<intptr_t>(&kernel_stats);
      for (const auto& [fn, s] : stats)
        std::fprintf(f, "%s %+lld\n", s.name, static_cast<long long>(reinterpret_cast<intptr_t>(fn) - anchor));
      std::fclose(f);
    }
  }
};
inline std::map<const void*, KernelStats>& kernel_stats() {
  static KernelTable t;
  return t.stats;
}

constexpr size_t kMaxDynamicShared = 48 * 1024;

// Runs every block of a grid (after launch() checked the configuration).
template <class... Params, class Tuple>
void run_grid(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, const Tuple& params) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  std::lock_guard lk(state().launch);
  KernelStats& stats = kernel_stats()[reinterpret_cast<const void*>(kernel)];
  stats.name = name;
  Block b;
  b.kernel = name;
  b.n = unsigned(threads);
  b.warps.reset(new Warp[(b.n + unsigned(warp_size()) - 1) / unsigned(warp_size())]);
  uint3 bid;
  const std::function<void(unsigned)> job = [&](unsigned lane) {
    threadIdx = uint3{lane % block.x, (lane / block.x) % block.y, lane / (block.x * block.y)};
    blockIdx = bid;
    blockDim = block;
    gridDim = grid;
    current_block = &b;
    std::apply(kernel, params);
    current_block = nullptr;
    thread_exit(&b, lane);
  };
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        b.arrived = 0;
        b.exited = 0;
        b.syncs = 0;
        b.dynamic.assign(shared, 0xFF);  // NaN poison
        bid = uint3{x, y, z};
        if (sequential_shortcut() && stats.blocks >= 4 && !stats.barriers) {
          b.exec = Exec::Sequential;
          for (unsigned lane = 0; lane < b.n; ++lane) job(lane);
          continue;
        }
        b.exec = exec_mode();
        if (b.exec == Exec::Fibers)
          Fibers::get().run(b.n, block, &b, job);
        else
          Pool::get().run(b.n, job);
        ++stats.blocks;
        stats.barriers = stats.barriers || b.syncs > 0;
      }
}

// kernel<<<grid, block, shared, stream>>>(args...): the configuration is checked as the real
// runtime does (a bad launch runs nothing and reports cudaErrorInvalidConfiguration through
// GetLastError); the parameters are copied once, like a real launch (and kept by a capture).
template <class... Params, class... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
            Args&&... args) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0 || threads > 1024 ||
      block.z > 64 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535 || shared > kMaxDynamicShared) {
    set_error(cudaErrorInvalidConfiguration);
    return;
  }
  std::tuple<std::decay_t<Params>...> params(std::forward<Args>(args)...);
  submit(stream, [=] {
    run_grid(name, kernel, grid, block, shared, params);
    return cudaSuccess;
  });
}

inline void* dynamic_shared() {
  Block* b = current_block;
  if (!b) die("?", "dynamic shared memory outside a kernel");
  return b->dynamic.data();
}

}  // namespace mimi_emu

#include "kernels/gpu/emulator/emulate_runtime.h"  // memory, copies, streams, graph capture

inline void __syncthreads() { mimi_emu::sync_threads(); }
inline const int warpSize = mimi_emu::warp_size();

// Warp operations with their CUDA names; the mask is 64 bits wide (HIP's) so that a 32-lane
// mask on a 64-lane warp (MIMI_EMU_WARP=64) is caught. Sources outside a segment of `width`
// lanes read the caller's own value, as on a GPU.
inline mimi_emu::LaneMask mimi_emu_full_mask() { return warpSize == 64 ? ~0ull : 0xffffffffull; }
template <class T>
T __shfl_sync(mimi_emu::LaneMask mask, T var, int src, int width = warpSize) {
  return mimi_emu::warp_exchange(mask, var, [&](unsigned lane) {
    return (lane & ~unsigned(width - 1)) + (unsigned(src) & unsigned(width - 1));
  });
}
template <class T>
T __shfl_up_sync(mimi_emu::LaneMask mask, T var, unsigned delta, int width = warpSize) {
  return mimi_emu::warp_exchange(mask, var, [&](unsigned lane) {
    return (lane & unsigned(width - 1)) >= delta ? lane - delta : lane;
  });
}
template <class T>
T __shfl_down_sync(mimi_emu::LaneMask mask, T var, unsigned delta, int width = warpSize) {
  return mimi_emu::warp_exchange(mask, var, [&](unsigned lane) {
    return (lane & unsigned(width - 1)) + delta < unsigned(width) ? lane + delta : lane;
  });
}
template <class T>
T __shfl_xor_sync(mimi_emu::LaneMask mask, T var, int lane_mask, int width = warpSize) {
  return mimi_emu::warp_exchange(mask, var, [&](unsigned lane) {
    const unsigned src = lane ^ unsigned(lane_mask);
    return (src & ~unsigned(width - 1)) == (lane & ~unsigned(width - 1)) ? src : lane;
  });
}
inline mimi_emu::LaneMask __ballot_sync(mimi_emu::LaneMask mask, int pred) { return mimi_emu::warp_vote(mask, pred != 0); }
inline int __any_sync(mimi_emu::LaneMask mask, int pred) { return mimi_emu::warp_vote(mask, pred != 0) != 0; }
inline int __all_sync(mimi_emu::LaneMask mask, int pred) { return mimi_emu::warp_vote(mask, pred != 0) == mask; }
inline void __syncwarp(mimi_emu::LaneMask mask = ~0ull) {
  if (mask == ~0ull) mask = mimi_emu_full_mask();
  (void)mimi_emu::warp_vote(mask, true);
}

// Atomics on device (or shared) memory, through std::atomic_ref (seq_cst): ThreadSanitizer sees them.
#define MIMI_EMU_ATOMICS(T)                                                                              \
  inline T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }                          \
  inline T atomicSub(T* p, T v) { return std::atomic_ref<T>(*p).fetch_sub(v); }                          \
  inline T atomicExch(T* p, T v) { return std::atomic_ref<T>(*p).exchange(v); }                          \
  inline T atomicMax(T* p, T v) {                                                                        \
    std::atomic_ref<T> a(*p);                                                                            \
    T old = a.load();                                                                                    \
    while (old < v && !a.compare_exchange_weak(old, v)) {                                                \
    }                                                                                                    \
    return old;                                                                                          \
  }                                                                                                      \
  inline T atomicMin(T* p, T v) {                                                                        \
    std::atomic_ref<T> a(*p);                                                                            \
    T old = a.load();                                                                                    \
    while (v < old && !a.compare_exchange_weak(old, v)) {                                                \
    }                                                                                                    \
    return old;                                                                                          \
  }
MIMI_EMU_ATOMICS(int)
MIMI_EMU_ATOMICS(unsigned)
MIMI_EMU_ATOMICS(unsigned long long)
MIMI_EMU_ATOMICS(float)
MIMI_EMU_ATOMICS(double)
#undef MIMI_EMU_ATOMICS
#define MIMI_EMU_INT_ATOMICS(T)                                                                          \
  inline T atomicCAS(T* p, T compare, T v) {                                                             \
    std::atomic_ref<T>(*p).compare_exchange_strong(compare, v);                                          \
    return compare;                                                                                      \
  }                                                                                                      \
  inline T atomicAnd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_and(v); }                          \
  inline T atomicOr(T* p, T v) { return std::atomic_ref<T>(*p).fetch_or(v); }                            \
  inline T atomicXor(T* p, T v) { return std::atomic_ref<T>(*p).fetch_xor(v); }
MIMI_EMU_INT_ATOMICS(int)
MIMI_EMU_INT_ATOMICS(unsigned)
MIMI_EMU_INT_ATOMICS(unsigned long long)
#undef MIMI_EMU_INT_ATOMICS
