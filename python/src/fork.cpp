// Fork. A child forked from a process that loaded mimi (datasets.map(num_proc=N), DataLoader
// fork workers) computes on the calling thread only, whatever threads= later asks: N worker
// processes, one thread each, is what those pipelines want (N x the default threads would
// oversubscribe the machine N times). The kernels' worker teams themselves survive a fork
// (kernels/cpu/thread_pool.h: the child builds its own); this is a policy, not a workaround.
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
