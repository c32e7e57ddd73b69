#include "codec/step_graph.h"

#include <algorithm>

namespace mimi {

std::shared_ptr<void> pinned_alloc(const Kernels& k, size_t bytes) {
  if (!k.graphs) return nullptr;
  return std::shared_ptr<void>(k.graphs->host_alloc(bytes), k.graphs->host_free);
}

void StepGraphs::synchronize() {
  if (ops_) ops_->stream_synchronize(stream_);
}

void StepGraphs::mark(int set) {
  if (!ops_) return;
  void*& e = events_[set & 1];
  if (!e) e = ops_->event_create();
  ops_->event_record(e, stream_);
}

void StepGraphs::wait(int set) {
  if (ops_ && events_[set & 1]) ops_->event_synchronize(events_[set & 1]);
}

StepGraphs::StepGraphs(const Kernels& k) : ops_(k.graphs) {
  if (ops_) stream_ = ops_->stream_create();
}

StepGraphs::~StepGraphs() {
  if (!ops_) return;
  try {  // steps still in flight (an exception left them) finish before their buffers go
    ops_->stream_synchronize(stream_);
  } catch (...) {
  }
  for (void* e : events_) ops_->event_destroy(e);
  for (Entry& e : entries_) ops_->graph_destroy(e.graph);
  ops_->stream_destroy(stream_);
}

void StepGraphs::count(uint64_t GraphStats::*field) {
  ++(stats_.*field);
  if (sink_) ++(sink_->*field);
}

namespace {
// The thread's ops go to `stream` for the scope (a plan's step), then back to the legacy stream.
class StreamScope {
 public:
  StreamScope(const GraphOps& ops, void* stream) : ops_(ops) { ops_.set_stream(stream); }
  ~StreamScope() { ops_.set_stream(nullptr); }

 private:
  const GraphOps& ops_;
};
}  // namespace

void StepGraphs::run(const std::vector<int64_t>& key, bool steady, const std::function<void()>& work) {
  if (!ops_) {  // a backend without streams
    work();
    return;
  }
  StreamScope scope(*ops_, stream_);
  if (!enabled_ || !steady) {
    count(&GraphStats::uncaptured);
    work();
    return;
  }
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  if (it == entries_.end()) it = entries_.insert(entries_.begin(), Entry{key});
  entries_.splice(entries_.begin(), entries_, it);
  Entry& e = entries_.front();
  if (e.graph) {
    ops_->graph_launch(e.graph, stream_);
    count(&GraphStats::replayed);
    return;
  }
  if (++e.seen < 2) {
    count(&GraphStats::uncaptured);
    work();
  } else {
    ops_->capture_begin(stream_);
    try {
      work();
    } catch (...) {
      ops_->capture_abort(stream_);
      throw;
    }
    e.graph = ops_->capture_end(stream_);
    ops_->graph_launch(e.graph, stream_);  // the capture recorded the work; this runs it
    count(&GraphStats::captured);
  }
  // bounded: keys beyond the most recent kMaxGraphs lose their graph (and their count)
  size_t kept = 0;
  for (auto j = entries_.begin(); j != entries_.end();)
    if (++kept > kMaxGraphs) {
      ops_->graph_destroy(j->graph);
      j = entries_.erase(j);
    } else {
      ++j;
    }
}

}  // namespace mimi
