// How many CPUs this process may use: the default for the kernels' thread count.
#pragma once

#include <string>
#include <string_view>

namespace mimi::cpu {

// Every limit found; 0 = none. CPU counts, not cores of the machine: a quota of 1.5 CPUs
// (cgroup) is kept as 1.5 here and rounded by cpu_budget().
struct CpuLimits {
  int hardware = 0;           // std::thread::hardware_concurrency()
  int affinity = 0;           // CPUs in sched_getaffinity's mask
  double cgroup = 0;          // CFS quota / period (cgroup v2 cpu.max, v1 cfs_quota_us / cfs_period_us)
  int slurm = 0;              // SLURM_CPUS_PER_TASK
  int omp = 0;                // OMP_NUM_THREADS, when the user set it (its first level)
};

// The smallest of the limits set, at least 1. A fractional quota rounds up: 2 threads under a
// 1.5-CPU quota run 75% of each period, still more work than 1 thread all of it.
int cpu_budget(const CpuLimits& limits);

// Parsers; 0 when the value says "no limit" or is malformed.
double parse_cgroup2_cpu_max(std::string_view cpu_max);                     // "max 100000", "150000 100000"
double parse_cgroup1_quota(std::string_view quota_us, std::string_view period_us);  // "-1", "100000"
int parse_cpu_count(const char* value);  // SLURM_CPUS_PER_TASK "4"; OMP_NUM_THREADS "4" or "4,2"

// Reads the limits of the calling process. `root` prefixes the /proc and /sys paths (tests
// point it at a fake tree); the environment and the affinity mask are the process's own.
CpuLimits read_cpu_limits(const std::string& root = "");

// cpu_budget(read_cpu_limits()), computed once: what --threads 0 means.
int default_num_threads();

}  // namespace mimi::cpu
