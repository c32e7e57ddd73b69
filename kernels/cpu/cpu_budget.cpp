// The default thread count: the CPUs this process may actually use, not the machine's cores.
// Running more compute threads than that (a Slurm task given 2 of 64 cores, a container with
// a 2-CPU quota, taskset) time-slices them against each other and every parallel region waits
// for its slowest, descheduled thread.
#include "kernels/cpu/cpu_budget.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace mimi::cpu {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A whole decimal integer (surrounding blanks allowed), else nothing.
bool parse_int(std::string_view s, long long& out) {
  s = trim(s);
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void keep_min(double& cur, double v) {
  if (v > 0 && (cur <= 0 || v < cur)) cur = v;
}

// The tightest quota on `dir` and every cgroup above it up to `mount` (a parent's limit
// applies to its children; inside a container the path may not exist below the mount, then
// only the mount's own files count).
template <class Read>
double walk_up(const std::string& mount, std::string path, Read read_at) {
  double best = 0;
  for (;;) {
    keep_min(best, read_at(mount + path));
    if (path.empty() || path == "/") break;
    const size_t slash = path.find_last_of('/');
    path = slash == std::string::npos ? std::string() : path.substr(0, slash);
  }
  return best;
}

double cgroup_cpus(const std::string& root) {
  std::istringstream lines(read_text(root + "/proc/self/cgroup"));
  double best = 0;
  for (std::string line; std::getline(lines, line);) {
    // "hierarchy-id:controllers:path"; v2 is "0::path"
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      keep_min(best, walk_up(root + "/sys/fs/cgroup", path, [](const std::string& dir) {
                 return parse_cgroup2_cpu_max(read_text(dir + "/cpu.max"));
               }));
      continue;
    }
    bool has_cpu = false;
    std::istringstream names(controllers);
    for (std::string n; std::getline(names, n, ',');) has_cpu |= n == "cpu";
    if (!has_cpu) continue;
    for (const char* mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpuacct,cpu"}) {
      keep_min(best, walk_up(root + mount, path, [](const std::string& dir) {
                 return parse_cgroup1_quota(read_text(dir + "/cpu.cfs_quota_us"), read_text(dir + "/cpu.cfs_period_us"));
               }));
    }
  }
  return best;
}

int affinity_cpus() {
  for (int n = 1024; n <= (1 << 16); n *= 2) {  // masks wider than cpu_set_t's 1024 CPUs
    cpu_set_t* set = CPU_ALLOC(n);
    const size_t size = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(size, set);
    const int rc = sched_getaffinity(0, size, set);
    const int count = rc == 0 ? CPU_COUNT_S(size, set) : 0;
    CPU_FREE(set);
    if (rc == 0) return count;
    if (errno != EINVAL) return 0;
  }
  return 0;
}

}  // namespace

double parse_cgroup2_cpu_max(std::string_view s) {
  s = trim(s);
  const size_t sp = s.find(' ');
  if (sp == std::string_view::npos) return 0;
  long long quota = 0, period = 0;
  if (!parse_int(s.substr(sp + 1), period) || period <= 0) return 0;
  if (!parse_int(s.substr(0, sp), quota) || quota <= 0) return 0;  // "max": no limit
  return double(quota) / double(period);
}

double parse_cgroup1_quota(std::string_view quota_us, std::string_view period_us) {
  long long quota = 0, period = 0;
  if (!parse_int(quota_us, quota) || quota <= 0) return 0;  // -1: no limit
  if (!parse_int(period_us, period) || period <= 0) return 0;
  return double(quota) / double(period);
}

int parse_cpu_count(const char* value) {
  if (!value) return 0;
  std::string_view s(value);
  s = s.substr(0, s.find(','));  // OMP_NUM_THREADS="4,2": the outer level
  long long n = 0;
  if (!parse_int(s, n) || n <= 0) return 0;
  return int(std::min<long long>(n, 1 << 20));
}

int cpu_budget(const CpuLimits& l) {
  int n = 0;
  auto limit = [&](int v) {
    if (v > 0 && (n == 0 || v < n)) n = v;
  };
  limit(l.hardware);
  limit(l.affinity);
  if (l.cgroup > 0) limit(int(std::min(std::ceil(l.cgroup - 1e-9), double(1 << 20))));
  limit(l.slurm);
  limit(l.omp);
  return std::max(n, 1);
}

CpuLimits read_cpu_limits(const std::string& root) {
  CpuLimits l;
  l.hardware = int(std::thread::hardware_concurrency());
  l.affinity = affinity_cpus();
  l.cgroup = cgroup_cpus(root);
  l.slurm = parse_cpu_count(std::getenv("SLURM_CPUS_PER_TASK"));
  l.omp = parse_cpu_count(std::getenv("OMP_NUM_THREADS"));
  return l;
}

int default_num_threads() {
  static const int n = cpu_budget(read_cpu_limits());
  return n;
}

}  // namespace mimi::cpu
