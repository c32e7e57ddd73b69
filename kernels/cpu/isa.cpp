// CPU kernel dispatch: which kernel sets this build has, which of them this CPU runs (the one
// place that asks the CPU for its features), and the choice, made once before main.
#include "kernels/cpu/isa.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/threads.h"

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

namespace mimi::cpu {
namespace {

// Whether this CPU runs the kernels compiled for `name` (the flags CMake gives that file).
bool cpu_runs(const char* name) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (!std::strcmp(name, "avx512")) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
  if (!std::strcmp(name, "avx2")) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return !std::strcmp(name, "baseline");  // SSE2 is part of x86-64
#elif defined(__aarch64__) && defined(__linux__)
  // Advanced SIMD is part of ARMv8-A; the kernel still reports it (HWCAP_ASIMD)
  if (!std::strcmp(name, "neon")) return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
  return false;
#elif defined(__aarch64__) && defined(__APPLE__)
  int v = 0;
  size_t size = sizeof v;
  if (!std::strcmp(name, "neon"))
    return sysctlbyname("hw.optional.AdvSIMD", &v, &size, nullptr, 0) != 0 || v != 0;  // (older macOS: no key)
  return false;
#else
  return !std::strcmp(name, "baseline");
#endif
}

#define MIMI_ISA_CHOICE(ns) IsaChoice{.kernels = &ns::kernels, .runs_here = cpu_runs(ns::kernels.name)},
const std::vector<IsaChoice>& choices() {
  static const std::vector<IsaChoice> list{MIMI_ISA_NAMESPACES(MIMI_ISA_CHOICE)};
  return list;
}
#undef MIMI_ISA_CHOICE

// The widest set this CPU runs, or a narrower one named by MIMI_CPU_ISA: how the AVX2 kernels
// are measured and tested on an AVX-512 machine. One that the CPU lacks, or an unknown name,
// stops the process: it is never silently replaced. (This runs before main, so it cannot throw.)
const IsaKernels& detect() {
  const std::vector<IsaChoice>& list = choices();
  const char* want = std::getenv("MIMI_CPU_ISA");
  std::string names;
  for (const IsaChoice& c : list) names += std::string(names.empty() ? "" : ", ") + c.kernels->name;
  for (const IsaChoice& c : list) {
    if (want && *want && std::strcmp(want, c.kernels->name) != 0) continue;
    if (c.runs_here) return *c.kernels;
    if (want && *want) {
      std::fprintf(stderr, "mimi: error: MIMI_CPU_ISA=%s: this CPU lacks it (%s, up to what this CPU has)\n", want,
                   names.c_str());
      std::_Exit(2);  // not exit(): mimi's atexit handler reads any exit() it did not make as a library failing (75)
    }
  }
  if (want && *want)
    std::fprintf(stderr, "mimi: error: MIMI_CPU_ISA=%s: unknown ISA (%s, up to what this CPU has)\n", want,
                 names.c_str());
  else
    std::fprintf(stderr, "mimi: error: this CPU runs none of the kernel sets of this build (%s)\n", names.c_str());
  std::_Exit(2);
}

}  // namespace

const IsaKernels& isa() {
  static const IsaKernels& chosen = detect();
  return chosen;
}

namespace {
const IsaKernels& kIsa = isa();  // chosen before main: a bad MIMI_CPU_ISA stops the process at once
}  // namespace

int isa_choices(const IsaChoice** list) {
  *list = choices().data();
  return int(choices().size());
}

const char* gemm_isa() { return isa().name; }

double measure_peak_gflops(int threads, double seconds) {
  const auto loop = isa().fma_loop;
  int64_t iters = 1 << 20;
  double elapsed = 0;
  volatile float sink = 0;
  for (;;) {  // grow until the timed run is long enough
    const auto t0 = std::chrono::steady_clock::now();
    // one chunk per thread (a worker that wakes late would leave its chunk to another, which
    // halves the figure; the run grows to tens of ms, where a wake-up is lost in the noise)
    std::vector<float> out(size_t(std::max(threads, 1)));
    auto one = [&](int64_t t) { out[size_t(t)] = loop(iters); };
    run_parallel(threads, threads, ChunkFn(one));
    for (float v : out) sink = sink + v;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed > seconds / 4 || iters > (int64_t(1) << 34)) break;
    iters *= 4;
  }
  return double(threads) * double(iters) * 12.0 * isa().vector_width * 2.0 / elapsed / 1e9;
}

}  // namespace mimi::cpu
