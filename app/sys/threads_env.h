// OpenMP's spin-wait, bounded before libgomp reads its environment (see threads_env.cpp).
#pragma once

namespace mimi::app {

// Called first in main(). Unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT, sets
// GOMP_SPINCOUNT=10000 and re-executes the program (same argv) so libgomp, which reads
// its environment when it is loaded, sees it. Returns (without re-exec) when nothing is to do
// or the exec fails.
void configure_openmp_wait(char** argv);

// Called before anything else in main(). A small stack limit (`ulimit -s 64`) made mimi die of
// SIGSEGV with no message: glibc sizes both the main thread's stack and every new thread's from
// it. Here every later thread (OpenMP's, the readers) gets at least kStackBytes whatever the
// limit, and the limit itself is raised to kStackBytes where the hard limit allows. Returns true
// when the main thread's stack is still shorter: main() then runs the program on a thread with a
// stack of kStackBytes (run_on_own_stack).
constexpr unsigned long kStackBytes = 8ul << 20;  // Linux's usual default
bool main_stack_short();
// Runs fn(argc, argv) on a new thread with a kStackBytes stack and returns its result; if no
// thread can be created that is the machine's failure: a message and exit code 75.
int run_on_own_stack(int (*fn)(int, char**), int argc, char** argv);

}  // namespace mimi::app
