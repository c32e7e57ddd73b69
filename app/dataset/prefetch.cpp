#include "app/dataset/entries.h"
#include "app/dataset/prefetch.h"

#include "app/engine_io/pipeline.h"
#include "app/sys/file_io.h"
#include "codec/error.h"

namespace mimi::app::dataset {

Prefetcher::Prefetcher(const std::vector<Item>& items, std::vector<size_t> order, int model_rate, size_t capacity)
    : items_(items), order_(std::move(order)), rate_(model_rate), capacity_(capacity) {
  // Decided once, here, on the consumer's thread before the reader starts: a count taken later
  // would race with the descriptors both threads open (the count's own listing among them). What
  // the consumer opens at once while it records an item: dataset.json's lock (kept from the first
  // record on), the temporary of an output written whole, and its directory to sync; beside them
  // the item read ahead. (The count includes its own listing: one short, never one over.)
  constexpr long long kConsumerOpens = 3;
  open_ahead_ = open_file_room() > kConsumerOpens;
  thread_ = std::thread([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool Prefetcher::push(Piece p) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stop_ || q_.empty() || queued_ + p.pcm.size() <= capacity_; });
  if (stop_) return false;
  queued_ += p.pcm.size();
  q_.push_back(std::move(p));
  cv_.notify_all();
  return true;
}

Piece Prefetcher::pop() {
  std::unique_lock<std::mutex> lock(mu_);
  if (q_.empty() && !fatal_) {
    consumer_waiting_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !q_.empty() || fatal_; });
    consumer_waiting_ = false;
  }
  if (q_.empty()) std::rethrow_exception(fatal_);
  Piece p = std::move(q_.front());
  q_.pop_front();
  queued_ -= p.pcm.size();
  cv_.notify_all();
  return p;
}

bool Prefetcher::may_open() {
  if (open_ahead_) return true;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stop_ || (q_.empty() && consumer_waiting_); });
  return !stop_;
}

namespace {
Piece piece(Piece::Kind k, size_t item) {
  Piece p;
  p.kind = k;
  p.item = item;
  return p;
}
}  // namespace

void Prefetcher::run() {
  try {
    for (size_t idx : order_) {
      const Item& it = items_[idx];
      const char* stage = "open";
      try {
        refuse_unless_file(it.path);  // a file replaced by a FIFO since planning would block here
        if (!may_open()) return;
        Piece end = piece(Piece::End, idx);
        {
          MonoSource src(it.path, rate_, AudioSpan{it.start, it.end, it.channel});
          Piece start = piece(Piece::Start, idx);
          start.rate = src.source_rate();
          start.channels = src.source_channels();
          if (!push(std::move(start))) return;
          stage = "read";
          for (std::vector<float> pcm; src.next(pcm);) {
            Piece d = piece(Piece::Data, idx);
            d.pcm = std::move(pcm);
            if (!push(std::move(d))) return;
          }
          end.message = src.shortfall();
        }  // closed before the consumer hears of the end (and records the item, opening outputs)
        if (!push(std::move(end))) return;
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::Input) throw;
        Piece f = piece(Piece::Fail, idx);
        f.stage = stage;
        f.message = e.what();
        if (!push(std::move(f))) return;
      }
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    fatal_ = std::current_exception();
    cv_.notify_all();
  }
}

}  // namespace mimi::app::dataset
