#include "app/engine_io/read_ahead.h"

#include <algorithm>
#include <system_error>

#include "codec/error.h"

namespace mimi::app {

ReaderPool::ReaderPool(int threads) {
  try {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  } catch (const std::system_error& e) {
    // a thread that cannot be created (EAGAIN: memory or thread limits): the ones already running
    // are stopped and joined, or destroying them joinable would end the process (std::terminate)
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    throw Error(errno_kind(e.code().value(), ErrorKind::Internal),
                std::string("cannot start a reader thread: ") + e.what() + " (a failure of the machine; run again)");
  }
}

ReaderPool::~ReaderPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ReaderPool::submit(std::function<void()> task) {
  {
    std::lock_guard lk(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ReaderPool::work() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();  // never throws: ReadAhead::fetch keeps its source's exception
  }
}

ReadAhead::ReadAhead(Next next, ReaderPool& pool, int64_t ahead)
    : next_(std::move(next)), pool_(pool), ahead_(std::max<int64_t>(ahead, 1)) {}

ReadAhead::~ReadAhead() {
  std::unique_lock lk(mu_);
  closing_ = true;
  cv_.wait(lk, [&] { return !in_flight_; });
}

void ReadAhead::fetch() {
  std::vector<float> block;
  bool more = true;
  std::exception_ptr error;
  try {
    more = next_(block);
  } catch (...) {
    error = std::current_exception();
  }
  std::unique_lock lk(mu_);
  in_flight_ = false;
  if (error) {
    // moved, not copied: this thread drops its last reference under the lock, so the reader that
    // rethrows it never races this thread's release (ThreadSanitizer cannot see libstdc++'s
    // atomic reference counts: it reported the worker's release as racing the reader's what())
    error_ = std::move(error);
  } else {
    ready_ += int64_t(block.size());
    if (!block.empty()) blocks_.push_back(std::move(block));
    ended_ = !more;
  }
  if (pool_.threads() > 0) schedule(lk);
  cv_.notify_all();  // under the lock: once it is released, this object may be gone
}

void ReadAhead::schedule(std::unique_lock<std::mutex>&) {
  if (in_flight_ || closing_ || ended_ || error_ || ready_ >= ahead_) return;
  in_flight_ = true;
  pool_.submit([this] { fetch(); });
}

int64_t ReadAhead::read(float* dst, int64_t n) {
  std::unique_lock lk(mu_);
  while (ready_ == 0 && !ended_ && !error_) {
    if (pool_.threads() == 0) {  // no threads: read here, like a plain reader
      in_flight_ = true;
      lk.unlock();
      fetch();
      lk.lock();
    } else {
      schedule(lk);
      cv_.wait(lk, [&] { return !in_flight_ || ready_ > 0; });
    }
  }
  if (ready_ == 0 && error_) std::rethrow_exception(error_);
  int64_t k = 0;
  while (k < n && ready_ > 0) {
    std::vector<float>& b = blocks_.front();
    const int64_t take = std::min<int64_t>(n - k, int64_t(b.size() - used_));
    std::copy_n(b.begin() + int64_t(used_), take, dst + k);
    k += take;
    used_ += size_t(take);
    ready_ -= take;
    if (used_ == b.size()) {
      blocks_.pop_front();
      used_ = 0;
    }
  }
  if (pool_.threads() > 0) schedule(lk);  // the next chunk, while the caller computes this one
  return k;
}

}  // namespace mimi::app
