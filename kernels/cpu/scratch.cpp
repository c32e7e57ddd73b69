// The per-thread scratch sets of kernels/cpu/scratch.h.
#include "kernels/cpu/scratch.h"

#include <pthread.h>

#include <new>
#include <vector>

namespace mimi::cpu::detail {
namespace {

using Set = std::vector<std::shared_ptr<void>>;

pthread_key_t set_key() {
  static const pthread_key_t key = [] {
    pthread_key_t k;
    // a key's destructor runs at thread exit with the thread's value (not for the main thread,
    // whose scratch lives as long as the process)
    if (pthread_key_create(&k, [](void* s) { delete static_cast<Set*>(s); }) != 0) throw std::bad_alloc();
    return k;
  }();
  return key;
}

}  // namespace

void* adopt_scratch(std::shared_ptr<void> p) {
  const pthread_key_t key = set_key();
  auto* set = static_cast<Set*>(pthread_getspecific(key));
  if (!set) {
    auto fresh = std::make_unique<Set>();
    // pthread_setspecific stores the first 32 keys' values in the thread itself; past those it
    // allocates, and a failure is an error code, not an abort
    if (pthread_setspecific(key, fresh.get()) != 0) throw std::bad_alloc();
    set = fresh.release();
  }
  set->push_back(p);
  return p.get();
}

}  // namespace mimi::cpu::detail
