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
//   - warpSize is 32, or 64 with MIMI_EMU_WARP=64 (the kernels use no warp intrinsics yet).
#pragma once

#include <algorithm>
#include <atomic>
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
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
using cudaStream_t = struct mimi_emu_stream*;
using cudaEvent_t = struct mimi_emu_event*;

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
    return v && std::strncmp(v, "fibers", 6) == 0 ? Exec::Fibers : Exec::Threads;
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

struct Block {  // the running block: its barrier and dynamic shared memory
  const char* kernel = nullptr;
  unsigned n = 0;  // threads in the block
  Exec exec = Exec::Threads;
  // The barrier (threads): futex-backed atomics (std::atomic wait/notify). Both divergence
  // checks read the other side's counter after bumping their own (seq_cst), so a thread that
  // returns and a thread that waits cannot both miss each other.
  std::atomic<unsigned> arrived{0}, exited{0}, syncs{0};
  std::atomic<uint32_t> generation{0};
  std::vector<unsigned char> dynamic;
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
  if (b->exited.load() > 0)
    die(b->kernel, "__syncthreads() reached after another thread of the block returned (divergent barrier)");
  if (b->exec == Exec::Fibers) {
    while (b->generation.load() == g) fiber_wait();
  } else {
    while (b->generation.load() == g) b->generation.wait(g);
  }
}

inline void thread_exit(Block* b) {
  b->exited.fetch_add(1);
  if (b->arrived.load() > 0)
    die(b->kernel, "a thread returned while others wait at __syncthreads() (divergent barrier)");
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
  void run(unsigned n, dim3 blk, const std::function<void(unsigned)>& j) {
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
};
inline std::map<const void*, KernelStats>& kernel_stats() {
  static std::map<const void*, KernelStats> m;
  return m;
}

constexpr size_t kMaxDynamicShared = 48 * 1024;

template <class... Params, class... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t,
            Args&&... args) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0 || threads > 1024 ||
      block.z > 64 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535 || shared > kMaxDynamicShared) {
    set_error(cudaErrorInvalidConfiguration);
    return;
  }
  // The parameters are copied once, like a real launch; every thread calls the kernel with them.
  const std::tuple<std::decay_t<Params>...> params(std::forward<Args>(args)...);
  std::lock_guard lk(state().launch);
  KernelStats& stats = kernel_stats()[reinterpret_cast<const void*>(kernel)];
  Block b;
  b.kernel = name;
  b.n = unsigned(threads);
  uint3 bid;
  const std::function<void(unsigned)> job = [&](unsigned lane) {
    threadIdx = uint3{lane % block.x, (lane / block.x) % block.y, lane / (block.x * block.y)};
    blockIdx = bid;
    blockDim = block;
    gridDim = grid;
    current_block = &b;
    std::apply(kernel, params);
    current_block = nullptr;
    thread_exit(&b);
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
          Fibers::get().run(b.n, block, job);
        else
          Pool::get().run(b.n, job);
        ++stats.blocks;
        stats.barriers = stats.barriers || b.syncs > 0;
      }
}

inline void* dynamic_shared() {
  Block* b = current_block;
  if (!b) die("?", "dynamic shared memory outside a kernel");
  return b->dynamic.data();
}

// --- runtime API ----------------------------------------------------------------------------------
inline cudaError_t Malloc(void** p, size_t bytes) {
  void* q = std::malloc(bytes ? bytes : 1);
  if (!q) return set_error(cudaErrorMemoryAllocation);
  std::memset(q, 0xFF, bytes);  // NaN poison
  std::lock_guard lk(state().m);
  state().allocs[uintptr_t(q)] = bytes;
  *p = q;
  return cudaSuccess;
}
inline cudaError_t Free(void* p) {
  if (!p) return cudaSuccess;
  {
    std::lock_guard lk(state().m);
    if (!state().allocs.erase(uintptr_t(p))) {
      state().last = cudaErrorInvalidValue;
      return cudaErrorInvalidValue;
    }
  }
  std::free(p);
  return cudaSuccess;
}
inline bool side_ok(bool device, const void* p, size_t bytes) { return !device || bytes == 0 || on_device(p, bytes); }
inline cudaError_t Memcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const bool dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (!side_ok(dd, dst, bytes) || !side_ok(sd, src, bytes)) return set_error(cudaErrorInvalidValue);
  std::lock_guard lk(state().launch);
  if (bytes) std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
inline cudaError_t Memcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                            cudaMemcpyKind kind) {
  if (width > dpitch || width > spitch) return set_error(cudaErrorInvalidValue);
  if (height == 0 || width == 0) return cudaSuccess;
  const bool dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (!side_ok(dd, dst, dpitch * (height - 1) + width) || !side_ok(sd, src, spitch * (height - 1) + width))
    return set_error(cudaErrorInvalidValue);
  std::lock_guard lk(state().launch);
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}
inline cudaError_t Memcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                 size_t height, cudaMemcpyKind kind, cudaStream_t = nullptr) {
  return Memcpy2D(dst, dpitch, src, spitch, width, height, kind);
}
inline cudaError_t MemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t = nullptr) {
  return Memcpy(dst, src, bytes, kind);
}
inline cudaError_t Memset(void* p, int value, size_t bytes) {
  if (!side_ok(true, p, bytes)) return set_error(cudaErrorInvalidValue);
  std::lock_guard lk(state().launch);
  if (bytes) std::memset(p, value, bytes);
  return cudaSuccess;
}
inline cudaError_t MemsetAsync(void* p, int value, size_t bytes, cudaStream_t = nullptr) {
  return Memset(p, value, bytes);
}
inline cudaError_t DeviceSynchronize() { return cudaSuccess; }  // every launch is synchronous
inline cudaError_t GetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t GetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return set_error(cudaErrorInvalidDevice);
  *p = {};
  std::snprintf(p->name, sizeof p->name, "mimi GPU emulator (CPU threads, warp %d): not a GPU", warp_size());
  p->sharedMemPerBlock = 48 << 10;
  p->warpSize = warp_size();
  p->maxThreadsPerBlock = 1024;
  p->multiProcessorCount = 1;
  return cudaSuccess;
}
inline cudaError_t SetDevice(int d) {
  if (d != 0) return set_error(cudaErrorInvalidDevice);
  return cudaSuccess;
}
inline cudaError_t GetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t GetLastError() {
  std::lock_guard lk(state().m);
  const cudaError_t e = state().last;
  state().last = cudaSuccess;
  return e;
}
inline cudaError_t PeekAtLastError() {
  std::lock_guard lk(state().m);
  return state().last;
}
inline const char* GetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error (emulated)";
    case cudaErrorInvalidValue: return "invalid argument (emulated)";
    case cudaErrorMemoryAllocation: return "out of memory (emulated)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (emulated)";
    case cudaErrorInvalidDevice: return "invalid device ordinal (emulated)";
  }
  return "unknown error (emulated)";
}
// Streams and events: every operation is synchronous, so they only need to exist.
inline cudaError_t StreamCreate(cudaStream_t* s) {
  *s = nullptr;
  return cudaSuccess;
}
inline cudaError_t StreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t StreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t EventCreate(cudaEvent_t* e) {
  *e = nullptr;
  return cudaSuccess;
}
inline cudaError_t EventDestroy(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t EventRecord(cudaEvent_t, cudaStream_t = nullptr) { return cudaSuccess; }
inline cudaError_t EventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t StreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }

}  // namespace mimi_emu

inline void __syncthreads() { mimi_emu::sync_threads(); }
inline const int warpSize = mimi_emu::warp_size();
