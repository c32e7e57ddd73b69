// A progress bar on stderr, drawn only when stderr is a terminal and the input is long enough
// to be worth it; silent with -q. Updates at most ten times a second.
#pragma once

#include <cstdint>
#include <string>

namespace mimi::app {

// Seconds on the monotonic clock (for durations).
double monotonic_seconds();

class Progress {
 public:
  // total: the amount of work in any unit (0 = unknown: no bar); seconds: audio length
  Progress(std::string label, int64_t total, double seconds, bool enabled);
  ~Progress();
  void update(int64_t done);
  void finish();

 private:
  std::string label_;
  int64_t total_;
  bool active_;
  double last_ = 0;
};

}  // namespace mimi::app
