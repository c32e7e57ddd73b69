// Every op case of tests/ops/ on every backend this build has, against kernels/ref (ggml's
// test-backend-ops): first everything is checked, then, with --perf, every case is timed and
// its GFLOP/s and GB/s printed (llm.c's check-then-time). No timing is ever asserted.
//
//   test_ops [--backend cpu|gpu|all] [--op NAME] [--max-flops F] [--perf] [--list]
//
// --max-flops leaves out the cases over F flops per call (the sanitizer builds, where the large
// cases, which launch the same kernel instances as the small ones, take minutes: under TSan every
// emulated GPU thread is a real one; tests/ops_gpu_subset.sh checks that with MIMI_EMU_COVERAGE).
//
// The CPU runs twice, with its default thread count and with one thread (a kernel then walks
// its whole range in one call, in its own cache-sized pieces). --backend gpu with no GPU device
// exits 77 (ctest's "skipped"): the GPU kernels were built but could not run.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tests/ops/op_case.h"

using namespace mimi;
using namespace mimi::optest;

namespace {

struct Backend {
  std::string name;
  Device device;    // kernels_for(device) before its cases: it also makes a GPU the current one
  int cpu_threads;  // -1: not the CPU
  bool gpu;
};

std::vector<Backend> backends(const std::string& which) {
  std::vector<Backend> out;
  if (which == "cpu" || which == "all") {
    out.push_back({"cpu", Device{}, 0, false});
    out.push_back({"cpu/1-thread", Device{}, 1, false});
  }
  if (which == "gpu" || which == "all")
    for (const DeviceDescription& d : list_devices())
      if (d.device.kind == Device::Kind::Cuda || d.device.kind == Device::Kind::Hip)
        out.push_back({describe(d.device) + (d.emulated ? " [emulated]" : ""), d.device, -1, true});
  return out;
}

std::vector<float> run_once(const OpCase& c, const Kernels& k) {
  Arena a(k);
  Rng r(c.seed, c.integer);
  Bound b = c.bind(a, r);
  b.call();
  return b.read();
}

// "" when got matches want within tol, else what differs.
std::string compare(const std::vector<float>& got, const std::vector<float>& want, Tol tol) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  double mx = 0, worst = 0;
  size_t at = 0;
  for (float x : want) mx = std::max(mx, double(std::fabs(x)));
  const double limit = tol.rel * mx + tol.abs;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    // bitwise equal is a match, except NaN: a NaN is never right, on either side
    const bool same = std::memcmp(&got[i], &want[i], sizeof(float)) == 0 && !std::isnan(got[i]);
    const double d = std::fabs(double(got[i]) - double(want[i]));
    if (same) continue;
    if (!(d <= limit)) ++bad;  // NaN is never within tolerance
    if (!(d <= worst)) worst = d, at = i;
  }
  if (bad == 0) return "";
  char msg[200];
  std::snprintf(msg, sizeof msg, "%zu of %zu outside tolerance, worst |got-ref| = %g at %zu (got %g, ref %g; tolerance %g)",
                bad, got.size(), worst, at, double(got[at]), double(want[at]), limit);
  return msg;
}

double seconds_per_call(const OpCase& c, const Kernels& k) {
  Arena a(k);
  Rng r(c.seed, c.integer);
  Bound b = c.bind(a, r);
  b.call();  // warm: first-touch pages, lazy module loading
  (void)b.read();
  // one timed call (read() waits for a device) sizes a batch of calls lasting about 20 ms; the
  // batch is queued back to back and ends with one read
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  b.call();
  (void)b.read();
  const double one = std::chrono::duration<double>(clock::now() - t0).count();
  const int reps = int(std::clamp(0.02 / std::max(one, 1e-9), 3.0, 100000.0));
  t0 = clock::now();
  for (int i = 0; i < reps; ++i) b.call();
  (void)b.read();
  return std::chrono::duration<double>(clock::now() - t0).count() / reps;
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = "all", only_op;
  bool perf = false, list = false;
  double max_flops = -1;  // < 0: no limit
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backend" && i + 1 < argc) which = argv[++i];
    else if (a == "--op" && i + 1 < argc) only_op = argv[++i];
    else if (a == "--max-flops" && i + 1 < argc) {
      char* end = nullptr;
      max_flops = std::strtod(argv[++i], &end);
      if (end == argv[i] || *end || !(max_flops >= 0)) {
        std::fprintf(stderr, "test_ops: --max-flops takes a number >= 0\n");
        return 2;
      }
    } else if (a == "--perf") perf = true;
    else if (a == "--list") list = true;
    else {
      std::fprintf(stderr, "usage: test_ops [--backend cpu|gpu|all] [--op NAME] [--max-flops F] [--perf] [--list]\n");
      return 2;
    }
  }
  if (which != "cpu" && which != "gpu" && which != "all") {
    std::fprintf(stderr, "test_ops: --backend is cpu, gpu or all\n");
    return 2;
  }
  try {
    std::vector<OpCase> cases;
    size_t over = 0;  // cases left out by --max-flops
    for (OpCase& c : all_cases())
      if (only_op.empty() || c.op == only_op) {
        if (max_flops >= 0 && c.flops > max_flops) ++over;
        else cases.push_back(std::move(c));
      }
    if (cases.empty()) {
      if (over) std::fprintf(stderr, "test_ops: every case is over --max-flops %g\n", max_flops);
      else std::fprintf(stderr, "test_ops: no case of op '%s' (--list names them)\n", only_op.c_str());
      return 2;
    }
    if (list) {
      for (const OpCase& c : cases) std::printf("%s %s\n", c.op.c_str(), c.shape.c_str());
      return 0;
    }
    const std::vector<Backend> bes = backends(which);
    if (bes.empty()) {
      std::printf("SKIPPED: no GPU device; the GPU kernels were compiled but not run (%s)\n", gpu_unavailable().c_str());
      return 77;
    }
    const Kernels& ref = kernels_for(Device{Device::Kind::Ref, 0});
    std::vector<std::optional<std::vector<float>>> oracle(cases.size());
    int failed = 0;
    for (const Backend& be : bes) {
      const Kernels& k = kernels_for(be.device);
      std::map<std::string, std::array<int, 3>> per_op;  // op -> passed, failed, absent
      for (size_t i = 0; i < cases.size(); ++i) {
        const OpCase& c = cases[i];
        auto& count = per_op[c.op];
        if (!c.present(k)) {
          ++count[2];
          continue;
        }
        if (!oracle[i]) oracle[i] = run_once(c, ref);
        if (be.cpu_threads >= 0) cpu::set_num_threads(be.cpu_threads);
        std::string why;
        try {
          why = compare(run_once(c, k), *oracle[i], be.gpu ? c.gpu : c.cpu);
        } catch (const std::exception& e) {
          why = std::string("threw: ") + e.what();
        }
        if (be.cpu_threads >= 0) cpu::set_num_threads(0);
        if (why.empty()) {
          ++count[0];
        } else {
          ++count[1];
          ++failed;
          std::printf("FAIL [%s] %s %s: %s\n", be.name.c_str(), c.op.c_str(), c.shape.c_str(), why.c_str());
        }
      }
      std::printf("%s:", be.name.c_str());
      for (const auto& [op, n] : per_op)
        std::printf(" %s %d%s%s", op.c_str(), n[0], n[1] ? (" FAILED " + std::to_string(n[1])).c_str() : "",
                    n[2] ? (" (" + std::to_string(n[2]) + " absent: optional op)").c_str() : "");
      std::printf("\n");
    }
    std::printf("%zu cases x %zu backends: %s", cases.size(), bes.size(), failed ? "FAILED" : "all match the reference");
    if (over) std::printf(" (%zu cases over --max-flops %g not run)", over, max_flops);
    std::printf("\n");
    if (failed) {
      std::printf("%d case runs failed%s\n", failed, perf ? "; nothing timed (check first, then time)" : "");
      return 1;
    }
    if (perf) {
      std::printf("\n%-28s %-18s %-70s %12s %10s %10s\n", "backend", "op", "shape", "us/call", "GFLOP/s", "GB/s");
      for (const Backend& be : bes) {
        const Kernels& k = kernels_for(be.device);
        for (const OpCase& c : cases) {
          if (!c.present(k)) continue;
          if (be.cpu_threads >= 0) cpu::set_num_threads(be.cpu_threads);
          const double s = seconds_per_call(c, k);
          if (be.cpu_threads >= 0) cpu::set_num_threads(0);
          std::printf("%-28s %-18s %-70s %12.1f %10.2f %10.2f\n", be.name.c_str(), c.op.c_str(), c.shape.c_str(),
                      s * 1e6, c.flops / s * 1e-9, c.bytes / s * 1e-9);
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_ops: %s\n", e.what());
    return 1;
  }
}
