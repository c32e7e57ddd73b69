#include "app/dataset/entries.h"
#include "app/dataset/slots.h"

#include <algorithm>
#include <map>
#include <memory>

#include "app/engine_io/pipeline.h"
#include "app/engine_io/read_ahead.h"
#include "codec/batch.h"
#include "codec/error.h"

namespace mimi::app::dataset {

namespace {

// One item being read into a slot: the same MonoSource, stages and messages as the Prefetcher.
struct SlotSource {
  size_t index = 0;
  std::unique_ptr<MonoSource> src;
  std::unique_ptr<ReadAhead> ahead;  // reads src ahead on the reader threads (destroyed first)
  ItemResult result;

  int64_t read(float* dst, int64_t n) {
    int64_t k = 0;
    try {
      k = ahead->read(dst, n);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Input) throw;
      result.error_stage = "read";
      result.error = e.what();
      throw;
    }
    result.audio.samples += k;
    return k;
  }
};

}  // namespace

void encode_items_batched(Engine& eng, int n_q, int slots, const std::vector<Item>& items,
                          const std::vector<size_t>& order, int model_rate,
                          const std::function<void(size_t, ItemResult&&)>& done, int readers) {
  ReaderPool pool(readers);  // declared first: it outlives the open items
  const int64_t chunk_samples = eng.options().chunk_frames * eng.config().frame_size();
  size_t next = 0;                                  // into order: the next item to hand out
  size_t emit = 0;                                  // into order: the next result to hand back
  std::map<size_t, std::unique_ptr<SlotSource>> open;  // by order position
  std::map<size_t, ItemResult> ready;               // finished early, by order position
  auto finished = [&](size_t pos, ItemResult&& r) {
    ready.emplace(pos, std::move(r));
    for (auto it = ready.begin(); it != ready.end() && it->first == emit; it = ready.erase(it), ++emit)
      done(order[emit], std::move(it->second));
  };
  encode_batch(
      eng, n_q, slots,
      [&](PcmItem& item) {
        while (next < order.size()) {
          const size_t pos = next++;
          const Item& it = items[order[pos]];
          auto s = std::make_unique<SlotSource>();
          s->index = order[pos];
          try {
            refuse_unless_file(it.path);  // a file replaced by a FIFO since planning would block here
            s->src = std::make_unique<MonoSource>(it.path, model_rate, AudioSpan{it.start, it.end, it.channel});
          } catch (const Error& e) {
            if (e.kind() != ErrorKind::Input) throw;
            ItemResult r;
            r.error_stage = "open";
            r.error = e.what();
            finished(pos, std::move(r));
            continue;
          }
          s->ahead = std::make_unique<ReadAhead>([src = s->src.get()](std::vector<float>& b) { return src->next(b); },
                                                 pool, chunk_samples);
          s->result.audio.source_rate = s->src->source_rate();
          s->result.audio.source_channels = s->src->source_channels();
          SlotSource* p = s.get();
          item.id = pos;
          item.read = [p](float* dst, int64_t n) { return p->read(dst, n); };
          open[pos] = std::move(s);
          return true;
        }
        return false;
      },
      [&](const PcmItem& item, Codes&& codes) {
        std::unique_ptr<SlotSource> s = std::move(open.at(item.id));
        open.erase(item.id);
        s->result.codes = std::move(codes);
        s->result.warning = s->src->shortfall();
        finished(item.id, std::move(s->result));
      },
      [&](size_t id, std::exception_ptr e) {
        std::unique_ptr<SlotSource> s = std::move(open.at(id));
        open.erase(id);
        ItemResult r;
        if (!s->result.error.empty()) {  // the read failed: its stage and message
          r.error_stage = s->result.error_stage;
          r.error = s->result.error;
        } else {
          try {
            std::rethrow_exception(e);
          } catch (const Error& err) {
            if (err.kind() != ErrorKind::Input) throw;
            // the runner's "empty signal": the worker's words for it
            r.error_stage = "read";
            r.error = items[s->index].path + ": no audio samples";
            r.warning = s->src->shortfall();
          }
        }
        finished(id, std::move(r));
      });
  if (emit != order.size()) throw Error(ErrorKind::Internal, "batched items: results missing");
}

}  // namespace mimi::app::dataset
