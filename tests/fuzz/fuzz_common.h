// Shared pieces of the libFuzzer harnesses (tests/fuzz/fuzz_*.cpp). The same harness sources
// are built two ways: by scripts/fuzz.sh with clang -fsanitize=fuzzer,address,undefined, and
// without libFuzzer into the `fuzz_regressions` ctest (tests/fuzz/replay_main.cpp), where each
// harness' LLVMFuzzerTestOneInput is renamed by -DMIMI_FUZZ_ENTRY=<name>.
//
// The contract every harness checks: a parser either returns something the next stage can use
// safely, or throws mimi::Error of a non-Internal kind. Any other exception escapes the harness
// (libFuzzer reports it as a crash; the replay test as a failure), and so does Error(Internal).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "codec/error.h"

#ifdef MIMI_FUZZ_ENTRY
#define MIMI_FUZZ_TARGET extern "C" int MIMI_FUZZ_ENTRY(const uint8_t* data, size_t size)
#else
#define MIMI_FUZZ_TARGET extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
#endif

namespace mimi::fuzz {

// A finding that is not a sanitizer report: an invariant the harness checks did not hold.
class Finding : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] inline void finding(const std::string& what) {
#ifdef MIMI_FUZZ_ENTRY
  throw Finding(what);  // the replay test reports it and goes on with the next file
#else
  std::fprintf(stderr, "==mimi-fuzz== FINDING: %s\n", what.c_str());
  std::abort();  // libFuzzer saves the input as crash-*
#endif
}

#define MIMI_FUZZ_CHECK(cond, msg) \
  do {                             \
    if (!(cond)) ::mimi::fuzz::finding(std::string(#cond) + ": " + (msg)); \
  } while (0)

// Runs f; a mimi::Error of a kind other than Internal is the expected way to refuse input.
// Returns false when f threw one.
template <class F>
bool refused_cleanly(F&& f) {
  try {
    f();
    return true;
  } catch (const mimi::Error& e) {
    if (e.kind() == mimi::ErrorKind::Internal) finding(std::string("Error(Internal): ") + e.what());
    return false;
  }
}

// The bytes as a file with a path, as the CLI opens its inputs: a memfd seen through
// /proc/self/fd/N (no disk, nothing left behind).
class MemFd {
 public:
  MemFd(const uint8_t* data, size_t size) {
    fd_ = memfd_create("mimi-fuzz", 0);
    if (fd_ < 0) std::abort();
    size_t off = 0;
    while (off < size) {
      const ssize_t w = ::write(fd_, data + off, size - off);
      if (w <= 0) std::abort();
      off += size_t(w);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFd() { ::close(fd_); }
  MemFd(const MemFd&) = delete;
  MemFd& operator=(const MemFd&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace mimi::fuzz
