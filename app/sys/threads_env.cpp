// The threads' stacks: a small `ulimit -s` must not kill mimi (see threads_env.h).
//
// (Until 2026-12-07 this file also re-executed mimi with GOMP_SPINCOUNT=10000 to bound libgomp's
// spinning; the kernels now run on their own worker teams, kernels/cpu/thread_pool.h, whose spin
// is bounded in the code, so every process starts once.)
#include "app/sys/threads_env.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace mimi::app {

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
