// OpenMP's spin-wait, bounded before libgomp reads its environment (see threads_env.cpp).
#pragma once

namespace mimi::app {

// Called first in main(). Unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT, sets
// GOMP_SPINCOUNT=10000 and re-executes the program (same argv) so libgomp, which reads
// its environment when it is loaded, sees it. Returns (without re-exec) when nothing is to do
// or the exec fails.
void configure_openmp_wait(char** argv);

}  // namespace mimi::app
