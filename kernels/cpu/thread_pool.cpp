// The CPU kernels' worker teams (kernels/cpu/thread_pool.h).
//
// A team belongs to the thread that first runs a parallel loop (the "master"; the CLI's main
// thread, each Python thread that calls the codec). Its workers wait for a new job on `gen_`:
// they spin for spin_micros(), then sleep on a futex. The master publishes a job (the body, the
// chunk count, and `seats_`: how many workers may join), bumps `gen_`, wakes sleepers, and
// works through the chunks itself. A worker joins by taking a seat (one CAS on `seats_`, which
// also counts it as inside), claims chunks from `next_`, and leaves. When no chunk is left to
// claim, the master closes the seats and waits for the workers inside. So a worker that was
// slow to wake (a busy machine: another process on its core) does not hold the master up: it
// finds the seats closed and goes back to waiting, and the master did its share of chunks. (A
// worker preempted once seated, or inside a chunk, is still waited for.) A fork() inside a chunk
// is outside the contract. If a worker cannot be started (thread limits), the team stays at the
// size it has: the loops run on fewer threads, with the same results.
#include "kernels/cpu/thread_pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/cpu/scratch.h"

namespace mimi::cpu {
namespace {

// How long an idle worker (or the master waiting for workers) spins before it sleeps. Long
// enough to bridge the gap between two parallel loops of one pass (the serial work between
// them is micro- to sub-millisecond), short enough that a process sharing its cores with others
// hands them back quickly (docs/PERF.md, 2026-12-07: the same bound libgomp ran with under
// GOMP_SPINCOUNT=10000). MIMI_SPIN_US overrides it (benchmarks).
int64_t spin_micros() {
  static const int64_t us = [] {
    const char* e = std::getenv("MIMI_SPIN_US");
    if (!e || !*e) return int64_t(300);
    char* end = nullptr;
    const long long v = std::strtoll(e, &end, 10);
    return (*end || v < 0) ? int64_t(300) : int64_t(std::min<long long>(v, 1000000));
  }();
  return us;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, count, nullptr, nullptr, 0);
}

// Spins until pred() holds or the spin budget is spent; returns pred()'s last value.
template <class Pred>
bool spin_until(Pred pred) {
  if (pred()) return true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_micros());
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      cpu_relax();
      if (pred()) return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return pred();
  }
}

// (__thread, not the C++11 keyword: the compiler then refuses any type with a destructor, which
// glibc would have to register at a thread's first use: tests' no_tls_destructors)
__thread bool t_inside = false;  // a worker, or a master inside a loop: nested loops run inline

// fork(): the child has only the forking thread; every team made before belongs to threads that
// do not exist there. A team remembers the epoch it was made in.
std::atomic<uint64_t> g_fork_epoch{0};

// seats_: [31] the master sleeps until no worker is inside; [30:16] seats left; [15:0] inside
constexpr uint32_t kMasterAsleep = 1u << 31, kSeat = 1u << 16, kInsideMask = 0xFFFF;
constexpr int kMaxWorkers = 0x7FFF;

class Team {
 public:
  Team() : epoch_(g_fork_epoch.load()) {}
  ~Team();
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;

  bool stale() const { return epoch_ != g_fork_epoch.load(std::memory_order_relaxed); }
  int workers() const { return int(threads_.size()); }

  // Starts workers until there are `want` (or no more can be started: then the loops run on
  // fewer threads, with the same results).
  int grow(int want) {
    want = std::min(want, kMaxWorkers);
    if (int(threads_.size()) < want) threads_.reserve(size_t(want));  // no allocation once a thread runs
    while (int(threads_.size()) < want && !start_failed_) {
      // workers take no asynchronous signals (SIGINT, SIGTERM...: they go to the program's own
      // threads); the synchronous ones stay open, or a fault in a chunk would kill the process
      // without running the crash handlers (temporaries removed, the sanitizers' reports)
      sigset_t all, old;
      sigfillset(&all);
      for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&all, sig);
      pthread_sigmask(SIG_SETMASK, &all, &old);
      pthread_t t;
      const int err = pthread_create(&t, nullptr, &Team::worker_entry, this);
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      if (err != 0) {
        start_failed_ = true;
        break;
      }
      pthread_setname_np(t, "mimi-worker");
      threads_.push_back(t);
    }
    return int(threads_.size());
  }

  void run(int64_t chunks, int workers, ChunkFn body) {
    body_ = &body;
    chunks_ = chunks;
    next_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    failed_.store(false, std::memory_order_relaxed);
    seats_.store(uint32_t(workers) * kSeat, std::memory_order_release);  // publishes the job
    gen_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake(&gen_, workers);
    work();
    // no chunk left to claim: close the seats, then wait for the workers inside
    uint32_t s = seats_.load(std::memory_order_acquire);
    while (!seats_.compare_exchange_weak(s, s & kInsideMask, std::memory_order_acq_rel)) {
    }
    const auto none_inside = [&] { return (seats_.load(std::memory_order_acquire) & kInsideMask) == 0; };
    if (!spin_until(none_inside)) {
      for (;;) {
        s = seats_.load(std::memory_order_acquire);
        if ((s & kInsideMask) == 0) break;
        if (!(s & kMasterAsleep)) {
          seats_.compare_exchange_weak(s, s | kMasterAsleep, std::memory_order_acq_rel);
          continue;
        }
        futex_wait(&seats_, s);
      }
    }
    seats_.store(0, std::memory_order_relaxed);
    body_ = nullptr;
    if (std::exception_ptr e = std::exchange(error_, nullptr)) std::rethrow_exception(e);
  }

 private:
  static void* worker_entry(void* self) {
    static_cast<Team*>(self)->worker_main();
    return nullptr;
  }

  void worker_main() {
    t_inside = true;
    // this thread may start running after the team was stopped (a team made, used without it
    // and destroyed before the scheduler got to it): the generation first, then `stop_`
    uint32_t seen = gen_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    for (;;) {
      const auto changed = [&] { return gen_.load(std::memory_order_acquire) != seen; };
      if (!spin_until(changed)) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while (gen_.load(std::memory_order_seq_cst) == seen) futex_wait(&gen_, seen);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = gen_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_acquire)) return;
      if (!take_seat()) continue;  // the job is over (or full) already
      work();
      const uint32_t prev = seats_.fetch_sub(1, std::memory_order_acq_rel);
      if ((prev & kInsideMask) == 1 && (prev & kMasterAsleep)) futex_wake(&seats_, 1);
    }
  }

  bool take_seat() {
    uint32_t s = seats_.load(std::memory_order_acquire);
    while ((s & ~kMasterAsleep) >= kSeat)
      if (seats_.compare_exchange_weak(s, s - kSeat + 1, std::memory_order_acq_rel)) return true;
    return false;
  }

  void work() {
    for (;;) {
      const int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks_ || failed_.load(std::memory_order_relaxed)) return;
      try {
        (*body_)(c);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
  }

  const uint64_t epoch_;
  std::vector<pthread_t> threads_;
  bool start_failed_ = false;
  // the job: written by the master before `seats_` is published, read by the workers inside
  ChunkFn* body_ = nullptr;
  int64_t chunks_ = 0;
  std::atomic<int64_t> next_{0};  // the next chunk to claim
  std::atomic<bool> failed_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;
  std::atomic<uint32_t> gen_{0};    // futex word: bumped for every job, and to stop
  std::atomic<uint32_t> seats_{0};  // futex word of the master (layout above)
  std::atomic<int> sleepers_{0};    // workers asleep on gen_
  std::atomic<bool> stop_{false};
};

__thread Team* t_team = nullptr;  // owned by the thread's scratch set (freed at thread exit)

Team::~Team() {
  if (t_team == this) t_team = nullptr;  // a later key destructor of this thread may run kernels
  if (epoch_ != g_fork_epoch.load()) return;  // a team of the parent: its threads are not ours
  stop_.store(true);
  gen_.fetch_add(1);
  futex_wake(&gen_, INT_MAX);
  for (pthread_t t : threads_) pthread_join(t, nullptr);
}

Team& my_team() {
  static const bool hooked = [] {
    pthread_atfork(nullptr, nullptr, [] { g_fork_epoch.fetch_add(1); });
    return true;
  }();
  (void)hooked;
  if (t_team && t_team->stale()) t_team = nullptr;  // after fork(): left to its owner, unused
  if (!t_team) {
    auto team = std::make_shared<Team>();
    detail::adopt_scratch(team);
    t_team = team.get();
  }
  return *t_team;
}

}  // namespace

void run_parallel(int64_t chunks, int threads, ChunkFn body) {
  if (chunks <= 0) return;
  if (threads <= 1 || chunks == 1 || t_inside) {
    for (int64_t c = 0; c < chunks; ++c) body(c);
    return;
  }
  Team& team = my_team();
  const int workers = team.grow(int(std::min<int64_t>(threads, chunks)) - 1);
  if (workers <= 0) {
    for (int64_t c = 0; c < chunks; ++c) body(c);
    return;
  }
  t_inside = true;
  try {
    team.run(chunks, int(std::min<int64_t>(workers, std::min<int64_t>(threads, chunks) - 1)), body);
  } catch (...) {
    t_inside = false;
    throw;
  }
  t_inside = false;
}

int team_workers() { return t_team && !t_team->stale() ? t_team->workers() : 0; }

}  // namespace mimi::cpu
