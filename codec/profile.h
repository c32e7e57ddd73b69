// Optional per-stage timing and FLOP counting for plans (off unless a Profile is attached).
#pragma once

#include <chrono>
#include <map>
#include <string>

namespace mimi {

struct StageStats {
  double seconds = 0;
  double flops = 0;
};

struct Profile {
  std::map<std::string, StageStats> stages;
  void clear() { stages.clear(); }
  double total_seconds() const {
    double s = 0;
    for (const auto& [k, v] : stages) s += v.seconds;
    return s;
  }
  double total_flops() const {
    double f = 0;
    for (const auto& [k, v] : stages) f += v.flops;
    return f;
  }
};

// Times the scope into profile->stages[name] (no-op with a null profile).
class StageTimer {
 public:
  StageTimer(Profile* p, std::string name) : p_(p), name_(std::move(name)) {
    if (p_) t0_ = std::chrono::steady_clock::now();
  }
  ~StageTimer() {
    if (p_) p_->stages[name_].seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  void add_flops(double f) {
    if (p_) p_->stages[name_].flops += f;
  }

 private:
  Profile* p_;
  std::string name_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace mimi
