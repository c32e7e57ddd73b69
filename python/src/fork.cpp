// Fork safety. GNU OpenMP keeps a pool of worker threads; a child forked from a process that has
// used them (datasets.map(num_proc=N), DataLoader fork workers) inherits the pool's state but not
// its threads, and its first parallel region would wait for them forever. So in every child
// forked from a process that loaded mimi the kernels run on the calling thread only (N worker
// processes, one thread each: what those pipelines want anyway), whatever threads= later asks.
// A fork while another thread is inside a codec call is not supported: the child inherits that
// codec's lock held (use the codec after the fork from the child's own Codec, or fork first).
#include <pthread.h>

#include <atomic>

#include "kernels/ops.h"
#include "python/src/bind.h"

namespace mimi::py {
namespace {

std::atomic<bool> g_forked_child{false};

void in_child() {
  g_forked_child = true;
  cpu::set_num_threads(1);
}

}  // namespace

void bind_fork(nb::module_& m) {
  static const int installed = pthread_atfork(nullptr, nullptr, in_child);
  (void)installed;
  m.def("_forked_child", [] { return g_forked_child.load(); },
        "True in a process forked from one that loaded mimi: its kernels run on one thread");
}

}  // namespace mimi::py
