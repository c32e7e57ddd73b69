// Captured plan steps: on a backend with graphs (CUDA, HIP, the emulated device), a plan's step
// runs on the plan's own stream, and a step in the steady state is captured once into a graph
// and then replayed, one launch instead of hundreds.
//
// What makes a replay exact: everything a step's kernels read that changes from step to step
// lives in device memory, not in the captured arguments. The step's input and output buffers
// are the plan's own (uploaded before and downloaded after the captured work); the RoPE
// positions are read from a device array (kernels/ops.h rope), and on the GPU with the step's
// segment table (kernels/ops.h WindowSegment); attention gets positions relative to the cached
// window, or reads its keys by absolute position from a ring; a conv's context is copied, not swapped, into its buffer. What is left
// in the arguments is the step's shape, which is the key: the frames of every slot (0 = idle).
// A slot is steady once its stream has started (the conv contexts are filled) and its key/value
// window is full; until then its steps run uncaptured, since the window's length and the
// contexts' first fill are host-side decisions. A step is captured the second time its key is
// seen (a one-off shape, such as a file's last chunk, costs no capture) and replayed after.
//
// Lifecycle: built with the plan (a stream; nothing on backends without graphs) -> run() per
// step -> destroyed with the plan (graphs, then the stream). Graphs are bounded per plan (LRU,
// kMaxGraphs); the plans themselves live in the engine's bounded cache.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <type_traits>
#include <vector>

#include "codec/device.h"

namespace mimi {

// Host memory a step's transfers go through: page-locked on a backend with graphs, so its copies
// run at DMA speed, asynchronously, inside the captured step (a replay copies what the buffer
// holds then); nullptr on the other backends, whose plans copy as before.
std::shared_ptr<void> pinned_alloc(const Kernels& k, size_t bytes);

// The host side of a device buffer that a step fills from the host or hands back to it. On a
// backend with graphs: page-locked memory (pinned_alloc), copied asynchronously on the plan's
// stream inside the step's work, so the copies are captured with it and run at DMA speed; the
// host reads an output after StepGraphs::wait() for its step. On a host-memory backend: the
// device buffer itself (no copy), unless `own_host` (an output that must outlive the next step
// while steps are pipelined: then a copy into a host vector). Otherwise (the GPU plans' code path
// on the CPU, in tests): a host vector and synchronous copies.
// Plans keep two of each (one per step in flight), so the host fills the next step's inputs and
// reads the last step's outputs while the device computes (EncodePlan::submit/collect).
template <class T>
class Staged {
 public:
  void allocate(const Kernels& k, T* device, size_t n, bool own_host = false) {
    k_ = &k;
    dev_ = device;
    if ((pinned_ = pinned_alloc(k, n * sizeof(T)))) host_ = static_cast<T*>(pinned_.get());
    else if (k.host_memory && !own_host) host_ = device;
    else plain_.assign(n, T{}), host_ = plain_.data();
  }
  T* host() const { return host_; }
  void to_device(size_t n) const {  // host()[0, n) -> the device buffer
    if (pinned_) k_->graphs->copy_to_device_async(dev_, host_, n * sizeof(T));
    else if (host_ != dev_) {
      if constexpr (std::is_same_v<T, float>) k_->upload(dev_, host_, n);
      else k_->upload_i32(dev_, host_, n);
    }
  }
  void to_host(size_t n) const {  // the device buffer [0, n) -> host()
    if (pinned_) k_->graphs->copy_to_host_async(host_, dev_, n * sizeof(T));
    else if (host_ != dev_) {
      if constexpr (std::is_same_v<T, float>) k_->download(host_, dev_, n);
      else k_->download_i32(host_, dev_, n);
    }
  }

 private:
  const Kernels* k_ = nullptr;
  T* dev_ = nullptr;
  T* host_ = nullptr;
  std::shared_ptr<void> pinned_;
  std::vector<T> plain_;
};

struct GraphStats {
  uint64_t captured = 0;    // steps captured into a graph (each one also ran, by its replay)
  uint64_t replayed = 0;    // steps that replayed a graph captured earlier
  uint64_t uncaptured = 0;  // steps run op by op on a backend with graphs
  void add(const GraphStats& o) {
    captured += o.captured;
    replayed += o.replayed;
    uncaptured += o.uncaptured;
  }
};

class StepGraphs {
 public:
  static constexpr size_t kMaxGraphs = 16;  // 8 step shapes x the 2 staging sets

  explicit StepGraphs(const Kernels& k);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Runs one step's device work: `work` submits it (ops only: no synchronous copies, no host
  // reads of device memory, and host-side effects that a replay may skip must not matter).
  // With graphs, `work` runs on this plan's stream: replayed from the graph of `key` when there
  // is one, captured when `steady` and the key is seen the second time, else run op by op.
  void run(const std::vector<int64_t>& key, bool steady, const std::function<void()>& work);

  // Waits for this plan's stream (every step submitted so far, work and copies).
  void synchronize();
  // Step bookkeeping for two steps in flight: mark(i) after submitting a step whose transfers use
  // staging set i; wait(i) blocks until that step's work and copies are done (the steps queued
  // after it keep running). Without streams both do nothing (the work ran when it was submitted).
  void mark(int set);
  void wait(int set);

  void set_enabled(bool on) { enabled_ = on; }  // off: every step op by op (still on the stream)
  void set_stats(GraphStats* sink) { sink_ = sink; }  // counts also go there (nullptr: only here)
  const GraphStats& stats() const { return stats_; }

 private:
  struct Entry {
    std::vector<int64_t> key;
    int seen = 0;
    void* graph = nullptr;
  };
  void count(uint64_t GraphStats::*field);

  const GraphOps* ops_;
  void* stream_ = nullptr;
  void* events_[2] = {nullptr, nullptr};  // per staging set, created on first use
  bool enabled_ = true;
  std::list<Entry> entries_;  // most recently used first, at most kMaxGraphs with a graph
  GraphStats stats_;
  GraphStats* sink_ = nullptr;
};

}  // namespace mimi
