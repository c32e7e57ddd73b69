#include "support/golden.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "codec/error.h"
#include "codec/prng_weights.h"

namespace mimi::test {

// The copy of the golden data: $MIMI_TEST_DATA_DIR (test binaries run from elsewhere, e.g. a
// prebuilt bundle on a GPU machine), else the source tree's tests/data.
std::string data_dir() {
  const char* env = std::getenv("MIMI_TEST_DATA_DIR");
  return env && *env ? env : MIMI_TEST_DATA_DIR;
}

std::vector<std::string> case_files(const std::string& config) {
  std::vector<std::string> out;
  const auto dir = std::filesystem::path(data_dir()) / config / "cases";
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string reference_weights_path(const std::string& config, Dialect dialect) {
  static std::map<std::string, std::string> paths;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = config + "." + dialect_name(dialect);
  auto it = paths.find(key);
  if (it != paths.end()) return it->second;
  const auto dir = std::filesystem::temp_directory_path() / ("mimi-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / (key + ".safetensors")).string();
  const GeneratedWeights w = generate_prng_weights(test_config(config), 1);
  write_prng_weights(path, w, dialect, {{"config", config}, {"seed", "1"}});
  paths[key] = path;
  static struct Cleanup {
    std::filesystem::path d;
    ~Cleanup() {
      std::error_code ec;
      if (!d.empty()) std::filesystem::remove_all(d, ec);
    }
  } cleanup;
  cleanup.d = dir;
  return path;
}

std::shared_ptr<const Model> reference_model(const std::string& config, Dialect dialect) {
  static std::map<std::string, std::shared_ptr<const Model>> models;
  const std::string key = config + "." + dialect_name(dialect);
  auto it = models.find(key);
  if (it != models.end()) return it->second;
  const std::string path = reference_weights_path(config, dialect);
  auto m = load_model(SafetensorsFile::open(path), test_config(config));
  models[key] = m;
  return m;
}

StageError compare_stage(const float* got, int64_t n_got, const float* golden, int64_t n_golden) {
  StageError e;
  e.count = n_golden;
  e.shape_ok = n_got == n_golden;
  if (!e.shape_ok) return e;
  for (int64_t i = 0; i < n_golden; ++i) e.max_ref = std::max(e.max_ref, double(std::fabs(golden[i])));
  const double tol = 1e-4 * e.max_ref + 1e-5;
  for (int64_t i = 0; i < n_golden; ++i) {
    const double d = std::fabs(double(got[i]) - double(golden[i]));
    if (!(d <= e.max_abs)) e.max_abs = d;  // also catches NaN
  }
  e.worst_ratio = std::isnan(e.max_abs) ? INFINITY : e.max_abs / tol;
  return e;
}

CodeReport compare_codes(const std::vector<int32_t>& got, const std::vector<int32_t>& golden,
                         const std::vector<float>& margin, int n_q, int64_t F) {
  CodeReport r;
  r.total = int64_t(n_q) * F;
  const int groups[2][2] = {{0, std::min(1, n_q)}, {1, n_q}};
  for (int64_t f = 0; f < F; ++f)
    for (const auto& g : groups) {
      int first = -1, diffs = 0;
      for (int k = g[0]; k < g[1]; ++k)
        if (got[size_t(k * F + f)] != golden[size_t(k * F + f)]) {
          if (first < 0) first = k;
          ++diffs;
        }
      if (first < 0) continue;
      if (margin[size_t(first * F + f)] < 1e-4f) {
        r.near_tie_flips += diffs;
      } else {
        ++r.hard_mismatches;
        if (r.first_hard.empty())
          r.first_hard = "codebook " + std::to_string(first) + ", frame " + std::to_string(f) + ": got " +
                         std::to_string(got[size_t(first * F + f)]) + ", expected " +
                         std::to_string(golden[size_t(first * F + f)]) + " (margin " +
                         std::to_string(margin[size_t(first * F + f)]) + ")";
      }
    }
  return r;
}

const Kernels& cpu_as_device() {
  static const Kernels k = [] {
    Kernels t = kernels_for(Device{});
    t.host_memory = false;
    t.resblock = nullptr;
    return t;
  }();
  return k;
}

std::string gpu_device_or_skip(const std::string& what) {
  for (const char* d : {"cuda", "hip"}) {
    try {
      kernels_for(Device::parse(d));
      return d;
    } catch (const Error&) {
    }
  }
  std::printf("SKIPPED: no CUDA or HIP device; %s did not run on a GPU\n", what.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

}  // namespace mimi::test
