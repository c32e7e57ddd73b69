// Why mimi re-executes itself with GOMP_SPINCOUNT=10000.
//
// libgomp's default (no OMP_WAIT_POLICY) lets an idle worker spin 300000 iterations (~10 ms
// here) before it sleeps. Alone on the machine that is free; but two mimi processes sharing
// the cores (`parallel -j2`, two Slurm tasks on a node, a compile or fuzzer beside it) each
// spin on the CPUs the other one needs: on 2 cores two concurrent 20 s encodes took 2.8-3.2x
// as long as two with --threads 1. The spinning has to be cut before libgomp starts: it reads
// OMP_WAIT_POLICY / GOMP_SPINCOUNT once, in its constructor, before main() runs, and keeps the
// values in variables it does not export, so a setenv() in main() comes too late. Measured on
// 2 cores (docs/PERF.md, 2026-12-01; scripts/bench-oversub.sh and `mimi bench`):
//   - GOMP_SPINCOUNT=10000 (chosen, ~0.3 ms of spinning): alone as fast as the default (10 s
//     encode 0.343 vs 0.344 s, streaming frame 13.3 vs 13.4 ms); two concurrent default-thread
//     encodes 1.07-1.13x the best split (--threads 1 each), against 2.75-3.2x before;
//   - OMP_WAIT_POLICY=passive (sleep at once): shared 1.03x, but alone 4-5% slower and the
//     streaming per-frame latency +40% (a futex wake-up per parallel region on this VM);
//   - GOMP_SPINCOUNT=1000: alone 1-2% slower, streaming +10%;
//   - OMP_DYNAMIC: libgomp sizes teams from the 15-minute load average, far too slow to follow;
//   - our own thread pool instead of OpenMP: could do both, but is far more code than this.
// A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is left alone (and ends the recursion: the
// re-executed process finds the variable set). The exec costs ~1 ms; if it fails the program
// runs on with libgomp's default.
//
// The re-exec repeats the command line the kernel started, /proc/self/cmdline, with the program
// /proc/self/exe, not mimi's own argv: run through the dynamic loader (`ld-linux-x86-64.so.2
// --library-path L mimi ARGS`, as the GPU bundle does), /proc/self/exe is the loader and argv no
// longer holds the loader's own arguments, so exec(self, argv) asked the loader to run
// `gen-weights` as a program (exit 127). The kernel's command line is right in both cases.
#include "app/sys/threads_env.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace mimi::app {

namespace {

// The NUL-separated arguments the process was started with (empty if unreadable).
std::vector<std::string> kernel_cmdline() {
  std::vector<std::string> args;
  const int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return args;
  std::string all;
  char buf[4096];
  for (ssize_t k; (k = ::read(fd, buf, sizeof buf)) > 0;) all.append(buf, size_t(k));
  ::close(fd);
  for (size_t at = 0; at < all.size();) {
    const size_t end = all.find('\0', at);
    args.push_back(all.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return args;
}

}  // namespace

void configure_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  std::vector<std::string> args = kernel_cmdline();
  // The kernel's line must end with mimi's own arguments (argv[1..]); otherwise something
  // rewrote it and the re-exec is not safe: run on with libgomp's default.
  int argc = 0;
  while (argv[argc]) ++argc;
  if (args.empty() || int(args.size()) < argc) return;
  for (int i = 1; i < argc; ++i)
    if (args[args.size() - size_t(argc) + size_t(i)] != argv[i]) return;
  std::vector<char*> exec_argv;
  for (std::string& a : args) exec_argv.push_back(a.data());
  exec_argv.push_back(nullptr);
  if (setenv("GOMP_SPINCOUNT", "10000", 1) != 0) return;
  execv(self, exec_argv.data());
  // exec failed (binary replaced or deleted since): keep going with libgomp's default policy
  unsetenv("GOMP_SPINCOUNT");
}

bool main_stack_short() {
  pthread_attr_t a;
  if (pthread_getattr_default_np(&a) == 0) {
    size_t cur = 0;
    if (pthread_attr_getstacksize(&a, &cur) == 0 && cur < kStackBytes && pthread_attr_setstacksize(&a, kStackBytes) == 0)
      pthread_setattr_default_np(&a);
    pthread_attr_destroy(&a);
  }
  rlimit rl{};
  if (getrlimit(RLIMIT_STACK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= kStackBytes) return false;
  const rlim_t want = rl.rlim_max == RLIM_INFINITY ? rlim_t(kStackBytes) : std::min<rlim_t>(rl.rlim_max, kStackBytes);
  if (want > rl.rlim_cur) {
    rl.rlim_cur = want;  // the main thread's stack grows up to the limit of the moment
    if (setrlimit(RLIMIT_STACK, &rl) != 0) return true;
  }
  return want < kStackBytes;
}

namespace {
struct Call {
  int (*fn)(int, char**);
  int argc;
  char** argv;
  int rc;
};
void* call_on_thread(void* p) {
  auto* c = static_cast<Call*>(p);
  c->rc = c->fn(c->argc, c->argv);
  return nullptr;
}
}  // namespace

int run_on_own_stack(int (*fn)(int, char**), int argc, char** argv) {
  Call c{fn, argc, argv, 70};
  pthread_attr_t a;
  pthread_t t;
  int err = pthread_attr_init(&a);
  if (err == 0) err = pthread_attr_setstacksize(&a, kStackBytes);
  if (err == 0) err = pthread_create(&t, &a, call_on_thread, &c);
  pthread_attr_destroy(&a);
  if (err != 0) {
    const std::string msg = "mimi: error: the stack limit (ulimit -s) is below " + std::to_string(kStackBytes >> 20) +
                            " MiB and no thread with a larger stack can be started: " + std::strerror(err) +
                            " (a limit of the machine, not of the input; raise ulimit -s)\n";
    (void)!::write(2, msg.data(), msg.size());
    return 75;
  }
  pthread_join(t, nullptr);
  return c.rc;
}

}  // namespace mimi::app
