// Reading ahead of the slots: while a batched plan computes a step, the next samples of every
// open input are read, decoded, downmixed and resampled on a pool of threads, so the device (a
// GPU at hundreds of times real time) does not wait for file reading between steps. Each input
// keeps at most `ahead` samples (one chunk of its slot) ready: constant memory per input.
//
// Lifecycle: a ReaderPool for the run -> one ReadAhead per open input (its source must outlive
// it) -> read() by the slot, chunk after chunk -> destroyed when the input ends or fails (waits
// for a fetch in flight). A pool of 0 threads reads inside read(), as a plain reader would.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mimi::app {

class ReaderPool {
 public:
  explicit ReaderPool(int threads);
  ~ReaderPool();  // finishes the tasks already submitted
  ReaderPool(const ReaderPool&) = delete;
  ReaderPool& operator=(const ReaderPool&) = delete;
  int threads() const { return int(workers_.size()); }
  void submit(std::function<void()> task);  // runs on one of the threads (threads() > 0)

 private:
  void work();
  std::vector<std::thread> workers_;
  std::deque<std::function<void()>> tasks_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

class ReadAhead {
 public:
  // next(block): the source's next samples (possibly none yet); false once it has ended. It may
  // throw; the exception reaches the reader after the samples delivered before it.
  using Next = std::function<bool(std::vector<float>&)>;
  ReadAhead(Next next, ReaderPool& pool, int64_t ahead);
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Up to n samples into dst (at least one unless the source has ended: then 0).
  int64_t read(float* dst, int64_t n);

 private:
  void fetch();                 // one call of next_, on a pool thread (or inline without threads)
  void schedule(std::unique_lock<std::mutex>&);  // another fetch, if more is wanted and none is in flight

  Next next_;
  ReaderPool& pool_;
  int64_t ahead_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<float>> blocks_;  // fetched, not yet read; the first from used_ on
  size_t used_ = 0;
  int64_t ready_ = 0;  // samples in blocks_
  bool ended_ = false, in_flight_ = false, closing_ = false;
  std::exception_ptr error_;
};

}  // namespace mimi::app
