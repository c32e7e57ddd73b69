// A bounded LRU cache of built plans, keyed by a struct. Capacity 0 switches caching off
// (every request builds a fresh plan that lives until the next request).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <utility>

#include "codec/device.h"
#include "codec/plan.h"

namespace mimi {

enum class Direction { Encode, Decode };

struct PlanKey {
  Device device;
  Direction direction = Direction::Encode;
  int64_t frames = 0;  // the most frames per slot and push
  int n_q = 0;
  int slots = 1;
  bool operator==(const PlanKey&) const = default;
};

template <class Plan>
class PlanCache {
 public:
  explicit PlanCache(size_t capacity) : capacity_(capacity) {}

  size_t capacity() const { return capacity_; }
  size_t size() const { return entries_.size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }
  void set_capacity(size_t c) {
    capacity_ = c;
    trim();
  }
  void clear() { entries_.clear(); }

  // The plan for `key`, built with make() on a miss; most recently used moves to the front.
  Plan& get(const PlanKey& key, const std::function<std::unique_ptr<Plan>()>& make) {
    if (capacity_ > 0)
      for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->first == key) {
          ++hits_;
          entries_.splice(entries_.begin(), entries_, it);
          return *entries_.front().second;
        }
    ++misses_;
    if (capacity_ == 0) entries_.clear();  // off: nothing is reused; the new plan lives until the next call
    entries_.emplace_front(key, make());
    trim(capacity_ == 0 ? 1 : capacity_);
    return *entries_.front().second;
  }

 private:
  void trim(size_t keep) {
    while (entries_.size() > keep) entries_.pop_back();
  }
  void trim() { trim(capacity_); }

  size_t capacity_;
  uint64_t hits_ = 0, misses_ = 0;
  std::list<std::pair<PlanKey, std::unique_ptr<Plan>>> entries_;
};

}  // namespace mimi
