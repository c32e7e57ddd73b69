// Per-thread scratch buffers of the CPU kernels, without C++ thread_local objects.
//
// Why: the first use of a thread_local object with a destructor registers that destructor with
// glibc (__cxa_thread_atexit_impl), which allocates; when that allocation fails (a memory limit,
// a new thread whose arena cannot be mapped) glibc aborts the process ("Fatal glibc error: failed
// to register TLS destructor": SIGABRT, nothing can catch it). Here the thread keeps only a plain
// pointer (no destructor to register); the object is owned by the thread's scratch set, a
// pthread-specific value whose destructor frees the set when the thread ends. Making it can
// throw std::bad_alloc like any allocation (the CLI's exit 75), never abort.
//
//   std::vector<float>& win = MIMI_THREAD_SCRATCH(std::vector<float>);  // one object per site and thread
#pragma once

#include <memory>

namespace mimi::cpu {
namespace detail {
// Hands `p` to the calling thread's scratch set (freed when the thread ends); returns p.get().
void* adopt_scratch(std::shared_ptr<void> p);
}  // namespace detail

// The calling thread's object of type T for the call site `Tag` (a lambda's unique type).
template <class T, class Tag>
T& thread_scratch(Tag) {
  thread_local T* p = nullptr;  // trivially destructible: nothing registered with glibc
  if (!p) p = static_cast<T*>(detail::adopt_scratch(std::make_shared<T>()));
  return *p;
}

}  // namespace mimi::cpu

#define MIMI_THREAD_SCRATCH(...) ::mimi::cpu::thread_scratch<__VA_ARGS__>([] {})
