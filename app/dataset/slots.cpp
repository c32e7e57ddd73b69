#include "app/dataset/entries.h"
#include "app/dataset/slots.h"

#include <map>
#include <memory>

#include "app/dataset/prefetch.h"
#include "app/engine_io/batched_sources.h"
#include "codec/error.h"

namespace mimi::app::dataset {

namespace {
constexpr size_t kPrefetchSamples = size_t(1) << 21;  // ~87 s of 24 kHz audio waiting at most
}  // namespace

void encode_items_batched(Engine& eng, int n_q, int slots, const std::vector<Item>& items,
                          const std::vector<size_t>& order, const std::function<void(size_t, ItemResult&&)>& done,
                          int readers) {
  size_t next = 0;                     // into order: the next item to hand out
  size_t emit = 0;                     // into order: the next result to hand back
  std::map<size_t, ItemResult> ready;  // finished early, by order position
  auto finished = [&](size_t pos, ItemResult&& r) {
    ready.emplace(pos, std::move(r));
    for (auto it = ready.begin(); it != ready.end() && it->first == emit; it = ready.erase(it), ++emit)
      done(order[emit], std::move(it->second));
  };
  // An item's own failure (Error(Input)) is its result, at the stage it happened; anything else
  // (device, memory, the machine) stops the shard.
  auto item_error = [](std::exception_ptr e, const char* stage, ItemResult& r) {
    try {
      std::rethrow_exception(e);
    } catch (const Error& err) {
      if (err.kind() != ErrorKind::Input) throw;
      r.error_stage = stage;
      r.error = err.what();
    }
  };
  encode_sources(eng, n_q, slots, readers,
                 BatchedSources{
                     .next =
                         [&](SourceSpec& spec) {
                           while (next < order.size()) {
                             const size_t pos = next++;
                             const Item& it = items[order[pos]];
                             try {
                               refuse_unless_file(it.path);  // a file replaced by a FIFO since planning would block
                             } catch (...) {
                               ItemResult r;
                               item_error(std::current_exception(), "open", r);
                               finished(pos, std::move(r));
                               continue;
                             }
                             spec.tag = pos;
                             spec.path = it.path;
                             spec.span = AudioSpan{it.start, it.end, it.channel};
                             return true;
                           }
                           return false;
                         },
                     .done =
                         [&](SourceCodes&& c) {
                           ItemResult r;
                           r.audio.samples = c.samples;
                           r.audio.source_rate = c.source_rate;
                           r.audio.source_channels = c.source_channels;
                           r.codes = std::move(c.codes);
                           r.warning = std::move(c.shortfall);
                           finished(c.tag, std::move(r));
                         },
                     .failed =
                         [&](SourceFailure&& f) {
                           ItemResult r;
                           item_error(f.error, f.stage == SourceFailure::Open ? "open" : "read", r);
                           r.warning = std::move(f.shortfall);
                           finished(f.tag, std::move(r));
                         },
                 });
  if (emit != order.size()) throw Error(ErrorKind::Internal, "batched items: results missing");
}

void encode_items(Engine& eng, int n_q, int slots, const std::vector<Item>& items, const std::vector<size_t>& order,
                  const std::function<void(size_t, ItemResult&&)>& done, int readers) {
  if (slots > 1) return encode_items_batched(eng, n_q, slots, items, order, done, readers);
  // One at a time: the streaming encoder, the next items read ahead on the Prefetcher's thread.
  Prefetcher pre(items, order, eng.config().sample_rate, kPrefetchSamples);
  for (size_t i : order) {
    const Item& it = items[i];
    std::unique_ptr<EncoderSession> session;
    ItemResult r;
    for (bool more = true; more;) {
      Piece p = pre.pop();
      if (p.item != i) throw Error(ErrorKind::Internal, "prefetch out of step");
      switch (p.kind) {
        case Piece::Start:
          session = std::make_unique<EncoderSession>(eng, n_q);
          r.audio.source_rate = p.rate;
          r.audio.source_channels = p.channels;
          break;
        case Piece::Data:
          if (!p.pcm.empty()) session->feed(p.pcm.data(), int64_t(p.pcm.size()));
          break;
        case Piece::End:
          r.warning = p.message;
          if (session->samples() == 0) r.error_stage = "read", r.error = it.path + ": no audio samples";
          more = false;
          break;
        case Piece::Fail:
          r.error_stage = p.stage, r.error = p.message;
          more = false;
          break;
      }
    }
    if (r.error.empty()) {
      r.audio.samples = session->samples();
      r.codes = session->finish();
    }
    done(i, std::move(r));
  }
}

}  // namespace mimi::app::dataset
