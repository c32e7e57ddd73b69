// Optional per-stage timing and FLOP counting for plans (off unless a Profile is attached).
// On the CPU a stage's time is the host clock around it. On a GPU the host clock would time only
// the launches (the work is asynchronous), so with `device` set a stage is timed by two timing
// events on the current stream, and resolve() (after the run) adds the device time between them.
#pragma once

#include <chrono>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "codec/device.h"

namespace mimi {

struct StageStats {
  double seconds = 0;
  double flops = 0;
};

struct Profile {
  std::map<std::string, StageStats> stages;
  const GraphOps* device = nullptr;  // set: time stages with device events (resolve() after the run)

  struct Pending {
    std::string stage;
    void* begin;
    void* end;
  };
  std::vector<Pending> pending;  // recorded events whose times are not in `stages` yet

  Profile() = default;
  Profile(const Profile& o) : stages(o.stages), device(o.device) {}  // a copy never owns events
  Profile& operator=(const Profile& o) {
    if (this != &o) release(), stages = o.stages, device = o.device;
    return *this;
  }
  ~Profile() { release(); }

  void clear() { release(), stages.clear(); }
  // Waits for the recorded events and adds their device times to the stages.
  void resolve() {
    for (const Pending& p : pending) stages[p.stage].seconds += device->event_elapsed_ms(p.begin, p.end) / 1000.0;
    release();
  }
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

 private:
  void release() {
    for (const Pending& p : pending) device->event_destroy(p.begin), device->event_destroy(p.end);
    pending.clear();
  }
};

// Times the scope into profile->stages[name] (no-op with a null profile).
class StageTimer {
 public:
  StageTimer(Profile* p, std::string name) : p_(p), name_(std::move(name)) {
    if (!p_) return;
    if (p_->device) {
      begin_ = p_->device->timing_event_create();
      p_->device->event_record_current(begin_);
    } else {
      t0_ = std::chrono::steady_clock::now();
    }
  }
  ~StageTimer() {
    if (!p_) return;
    if (p_->device) {
      void* end = nullptr;
      try {  // a destructor must not throw (this may run while an error unwinds the plan)
        end = p_->device->timing_event_create();
        p_->device->event_record_current(end);
        p_->pending.push_back({name_, begin_, end});
      } catch (...) {  // the stage's time is unknown, not zero
        p_->device->event_destroy(begin_), p_->device->event_destroy(end);
        p_->stages[name_].seconds = std::numeric_limits<double>::quiet_NaN();
      }
    } else {
      p_->stages[name_].seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    }
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  void add_flops(double f) {
    if (p_) p_->stages[name_].flops += f;
  }

 private:
  Profile* p_;
  std::string name_;
  std::chrono::steady_clock::time_point t0_;
  void* begin_ = nullptr;
};

}  // namespace mimi
