#include "app/sys/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace mimi::app {

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {
constexpr double kMinSeconds = 30;  // shorter inputs finish before a bar helps
}  // namespace

Progress::Progress(std::string label, int64_t total, double seconds, bool enabled)
    : label_(std::move(label)), total_(total), active_(enabled && total > 0 && seconds >= kMinSeconds && isatty(2)) {}

Progress::~Progress() { finish(); }

void Progress::update(int64_t done) {
  if (!active_) return;
  const double t = monotonic_seconds();
  if (t - last_ < 0.1 && done < total_) return;
  last_ = t;
  const double f = std::min(1.0, double(done) / double(total_));
  const int width = 30, fill = int(f * width);
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%", label_.c_str(), fill, "==============================", width - fill, "",
               int(f * 100));
  std::fflush(stderr);
}

void Progress::finish() {
  if (!active_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  active_ = false;
}

}  // namespace mimi::app
