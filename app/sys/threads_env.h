// Thread stacks under a small stack limit (see threads_env.cpp).
#pragma once

namespace mimi::app {

// Called before anything else in main(). A small stack limit (`ulimit -s 64`) made mimi die of
// SIGSEGV with no message: glibc sizes both the main thread's stack and every new thread's from
// it. Here every later thread (the kernels' workers, the readers) gets at least kStackBytes whatever the
// limit, and the limit itself is raised to kStackBytes where the hard limit allows. Returns true
// when the main thread's stack is still shorter: main() then runs the program on a thread with a
// stack of kStackBytes (run_on_own_stack).
constexpr unsigned long kStackBytes = 8ul << 20;  // Linux's usual default
bool main_stack_short();
// Runs fn(argc, argv) on a new thread with a kStackBytes stack and returns its result; if no
// thread can be created that is the machine's failure: a message and exit code 75.
int run_on_own_stack(int (*fn)(int, char**), int argc, char** argv);

}  // namespace mimi::app
