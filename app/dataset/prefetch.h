// Reads, downmixes and resamples the next items of a shard on a thread of its own while the
// current one encodes, handing over model-rate mono blocks through a bounded queue (constant
// memory for any item length).
//
// Descriptors: items open ahead only where the open-file limit, as it stands when the Prefetcher
// is made, leaves room for one beside what the consumer may open at once while it records an item
// (the shard's outputs); otherwise each opens once the consumer waits on an empty queue, holding
// nothing it opened for an output: the run then needs what a strictly sequential run needs, and
// whether it fits a tight `ulimit -n` does not depend on how the two threads happen to interleave
// (it used to: EMFILE on an output or on the next item, by chance).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "app/dataset/manifest.h"

namespace mimi::app::dataset {

struct Piece {
  enum Kind { Start, Data, End, Fail } kind = Data;
  size_t item = 0;             // index into the shard's items
  std::vector<float> pcm;      // Data: [samples] at the model rate
  int rate = 0, channels = 0;  // Start: the source's
  std::string stage, message;  // Fail: why the item cannot be read; End: a warning (or "")
};

class Prefetcher {
 public:
  // Loads items[order[0]], items[order[1]], ... in that order; at most `capacity` samples wait.
  Prefetcher(const std::vector<Item>& items, std::vector<size_t> order, int model_rate, size_t capacity);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;
  // The next piece; rethrows what stopped the reader when it was not an item's fault (no memory).
  Piece pop();

 private:
  void run();
  bool push(Piece p);  // false when stopping
  bool may_open();     // waits until the next item may open (see above); false when stopping

  const std::vector<Item>& items_;
  std::vector<size_t> order_;
  int rate_;
  size_t capacity_, queued_ = 0;
  std::deque<Piece> q_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, consumer_waiting_ = false;
  bool open_ahead_ = true;  // (see above)
  std::exception_ptr fatal_;
  std::thread thread_;
};

}  // namespace mimi::app::dataset
