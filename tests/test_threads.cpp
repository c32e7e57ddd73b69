// The default thread count (kernels/cpu/cpu_budget.*): parsing of the cgroup and environment
// limits, their combination, and the process's own affinity mask. No timing here.
#include <doctest/doctest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "kernels/cpu/cpu_budget.h"
#include "kernels/ops.h"

using namespace mimi::cpu;
namespace fs = std::filesystem;

namespace {

// A fake root for read_cpu_limits(root): /proc/self/cgroup and the cgroup files.
struct FakeRoot {
  fs::path dir = fs::temp_directory_path() / ("mimi-threads-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  static inline int counter = 0;
  FakeRoot() { fs::create_directories(dir); }
  ~FakeRoot() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  void write(const std::string& rel, const std::string& text) const {
    const fs::path p = dir / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
};

// Sets (or unsets) an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const char* n, const char* value) : name(n) {
    if (const char* o = std::getenv(n)) old = o;
    if (value) setenv(n, value, 1); else unsetenv(n);
  }
  ~ScopedEnv() {
    if (old) setenv(name.c_str(), old->c_str(), 1); else unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("cpu budget: cgroup v2 cpu.max") {
  CHECK(parse_cgroup2_cpu_max("max 100000") == 0.0);
  CHECK(parse_cgroup2_cpu_max("max 100000\n") == 0.0);
  CHECK(parse_cgroup2_cpu_max("150000 100000") == doctest::Approx(1.5));
  CHECK(parse_cgroup2_cpu_max("50000 100000") == doctest::Approx(0.5));
  CHECK(parse_cgroup2_cpu_max("200000 100000\n") == doctest::Approx(2.0));
  CHECK(parse_cgroup2_cpu_max("") == 0.0);
  CHECK(parse_cgroup2_cpu_max("garbage") == 0.0);
  CHECK(parse_cgroup2_cpu_max("100000 0") == 0.0);
  CHECK(parse_cgroup2_cpu_max("12x 100000") == 0.0);
  // rounding: a fractional quota rounds up, never below one thread
  CHECK(cpu_budget({.hardware = 8, .cgroup = parse_cgroup2_cpu_max("max 100000")}) == 8);
  CHECK(cpu_budget({.hardware = 8, .cgroup = parse_cgroup2_cpu_max("150000 100000")}) == 2);
  CHECK(cpu_budget({.hardware = 8, .cgroup = parse_cgroup2_cpu_max("50000 100000")}) == 1);
  CHECK(cpu_budget({.hardware = 8, .cgroup = parse_cgroup2_cpu_max("400000 100000")}) == 4);
  CHECK(cpu_budget({.hardware = 2, .cgroup = parse_cgroup2_cpu_max("400000 100000")}) == 2);
}

TEST_CASE("cpu budget: cgroup v1 cfs quota") {
  CHECK(parse_cgroup1_quota("-1", "100000") == 0.0);
  CHECK(parse_cgroup1_quota("-1\n", "100000\n") == 0.0);
  CHECK(parse_cgroup1_quota("200000\n", "100000\n") == doctest::Approx(2.0));
  CHECK(parse_cgroup1_quota("50000", "100000") == doctest::Approx(0.5));
  CHECK(parse_cgroup1_quota("", "") == 0.0);
  CHECK(parse_cgroup1_quota("50000", "") == 0.0);
  CHECK(cpu_budget({.hardware = 16, .cgroup = parse_cgroup1_quota("300000", "100000")}) == 3);
}

TEST_CASE("cpu budget: SLURM_CPUS_PER_TASK and OMP_NUM_THREADS values") {
  CHECK(parse_cpu_count(nullptr) == 0);
  CHECK(parse_cpu_count("") == 0);
  CHECK(parse_cpu_count("4") == 4);
  CHECK(parse_cpu_count(" 3\n") == 3);
  CHECK(parse_cpu_count("0") == 0);
  CHECK(parse_cpu_count("-2") == 0);
  CHECK(parse_cpu_count("two") == 0);
  CHECK(parse_cpu_count("4,2") == 4);  // nested OMP levels: the outer one
}

TEST_CASE("cpu budget: the smallest limit wins") {
  CHECK(cpu_budget({}) == 1);
  CHECK(cpu_budget({.hardware = 64}) == 64);
  CHECK(cpu_budget({.hardware = 64, .affinity = 8}) == 8);
  CHECK(cpu_budget({.hardware = 64, .affinity = 8, .cgroup = 4.0}) == 4);
  CHECK(cpu_budget({.hardware = 64, .affinity = 8, .cgroup = 4.0, .slurm = 2}) == 2);
  CHECK(cpu_budget({.hardware = 64, .affinity = 8, .cgroup = 4.0, .slurm = 2, .omp = 1}) == 1);
  CHECK(cpu_budget({.hardware = 64, .affinity = 8, .slurm = 16, .omp = 32}) == 8);
  CHECK(cpu_budget({.hardware = 4, .omp = 8}) == 4);  // OMP_NUM_THREADS does not raise it
}

TEST_CASE("cpu budget: cgroup files, nested and v1") {
  SUBCASE("v2: the tightest quota on the path to the root") {
    FakeRoot r;
    r.write("proc/self/cgroup", "0::/job/step\n");
    r.write("sys/fs/cgroup/job/cpu.max", "300000 100000\n");
    r.write("sys/fs/cgroup/job/step/cpu.max", "max 100000\n");
    CHECK(read_cpu_limits(r.dir.string()).cgroup == doctest::Approx(3.0));
    r.write("sys/fs/cgroup/job/step/cpu.max", "150000 100000\n");
    CHECK(read_cpu_limits(r.dir.string()).cgroup == doctest::Approx(1.5));
  }
  SUBCASE("v2 in a container: only the mount root") {
    FakeRoot r;
    r.write("proc/self/cgroup", "0::/\n");
    r.write("sys/fs/cgroup/cpu.max", "200000 100000\n");
    CHECK(read_cpu_limits(r.dir.string()).cgroup == doctest::Approx(2.0));
  }
  SUBCASE("v1") {
    FakeRoot r;
    r.write("proc/self/cgroup", "5:memory:/x\n3:cpu,cpuacct:/slurm/job1\n");
    r.write("sys/fs/cgroup/cpu,cpuacct/slurm/job1/cpu.cfs_quota_us", "100000\n");
    r.write("sys/fs/cgroup/cpu,cpuacct/slurm/job1/cpu.cfs_period_us", "100000\n");
    r.write("sys/fs/cgroup/cpu,cpuacct/slurm/cpu.cfs_quota_us", "-1\n");
    r.write("sys/fs/cgroup/cpu,cpuacct/slurm/cpu.cfs_period_us", "100000\n");
    CHECK(read_cpu_limits(r.dir.string()).cgroup == doctest::Approx(1.0));
  }
  SUBCASE("no cgroup files") {
    FakeRoot r;
    CHECK(read_cpu_limits(r.dir.string()).cgroup == 0.0);
  }
}

TEST_CASE("cpu budget: environment") {
  FakeRoot empty;  // no cgroup limit whatever this machine has
  {
    ScopedEnv slurm("SLURM_CPUS_PER_TASK", "1");
    ScopedEnv omp("OMP_NUM_THREADS", nullptr);
    const CpuLimits l = read_cpu_limits(empty.dir.string());
    CHECK(l.slurm == 1);
    CHECK(l.omp == 0);
    CHECK(cpu_budget(l) == 1);
  }
  {
    ScopedEnv slurm("SLURM_CPUS_PER_TASK", nullptr);
    ScopedEnv omp("OMP_NUM_THREADS", "1");
    const CpuLimits l = read_cpu_limits(empty.dir.string());
    CHECK(l.slurm == 0);
    CHECK(l.omp == 1);
    CHECK(cpu_budget(l) == 1);
  }
}

TEST_CASE("cpu budget: affinity mask") {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  REQUIRE(sched_getaffinity(0, sizeof mine, &mine) == 0);
  const CpuLimits l = read_cpu_limits();
  CHECK(l.affinity == CPU_COUNT(&mine));
  CHECK(l.hardware >= 1);
  CHECK(default_num_threads() >= 1);
  CHECK(default_num_threads() <= std::max(l.hardware, 1));
  CHECK(default_num_threads() <= l.affinity);

  // On a thread pinned to one CPU (sched_getaffinity(0) is the calling thread's mask).
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mine)) ++cpu;
  int pinned_affinity = -1, pinned_budget = -1;
  std::thread([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) return;
    const CpuLimits p = read_cpu_limits();
    pinned_affinity = p.affinity;
    pinned_budget = cpu_budget(p);
  }).join();
  CHECK(pinned_affinity == 1);
  CHECK(pinned_budget == 1);
}

TEST_CASE("cpu budget: --threads overrides the default") {
  set_num_threads(3);
  CHECK(num_threads() == 3);
  set_num_threads(0);
  CHECK(num_threads() == default_num_threads());
}
