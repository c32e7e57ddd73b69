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
#include "app/threads_env.h"

#include <limits.h>
#include <unistd.h>

#include <cstdlib>

namespace mimi::app {

void configure_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  // the binary's own path, not /proc/self/exe, so ps and top still show "mimi"
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  if (setenv("GOMP_SPINCOUNT", "10000", 1) != 0) return;
  execv(self, argv);
  // exec failed (binary replaced or deleted since): keep going with libgomp's default policy
  unsetenv("GOMP_SPINCOUNT");
}

}  // namespace mimi::app
