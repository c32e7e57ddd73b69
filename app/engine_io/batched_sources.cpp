#include "app/engine_io/batched_sources.h"

#include <map>
#include <memory>

#include "app/engine_io/read_ahead.h"
#include "codec/batch.h"
#include "codec/error.h"

namespace mimi::app {

namespace {

// One source being read into a slot.
struct OpenSource {
  SourceSpec spec;
  std::unique_ptr<MonoSource> src;
  std::unique_ptr<ReadAhead> ahead;  // reads src ahead on the reader threads (destroyed first)
  int64_t samples = 0;
  bool read_failed = false;  // the source's own read threw (not the runner after it)

  int64_t read(float* dst, int64_t n) {
    read_failed = true;  // until the source answers: its exception is the item's error as it is
    const int64_t k = ahead->read(dst, n);
    read_failed = false;
    samples += k;
    return k;
  }
};

}  // namespace

void encode_sources(Engine& eng, int n_q, int slots, int readers, const BatchedSources& io) {
  ReaderPool pool(readers);  // declared first: it outlives the open sources
  const int64_t chunk_samples = eng.options().encode_chunk_frames * eng.config().frame_size();
  const int rate = eng.config().sample_rate;
  std::map<size_t, std::unique_ptr<OpenSource>> open;  // by tag
  auto take = [&](size_t tag) {
    auto node = open.extract(tag);
    if (node.empty()) throw Error(ErrorKind::Internal, "batch: item " + std::to_string(tag) + " is not open");
    return std::move(node.mapped());
  };
  encode_batch(
      eng, n_q, slots,
      [&](PcmItem& item) {
        for (SourceSpec spec; io.next(spec); spec = SourceSpec{}) {
          auto s = std::make_unique<OpenSource>();
          try {
            s->src = std::make_unique<MonoSource>(spec.path, rate, spec.span);
          } catch (...) {
            io.failed(SourceFailure{.tag = spec.tag, .stage = SourceFailure::Open, .error = std::current_exception(), .shortfall = {}});
            continue;
          }
          s->ahead = std::make_unique<ReadAhead>([src = s->src.get()](std::vector<float>& b) { return src->next(b); },
                                                 pool, chunk_samples);
          s->spec = std::move(spec);
          OpenSource* p = s.get();
          item.id = p->spec.tag;
          item.read = [p](float* dst, int64_t n) { return p->read(dst, n); };
          if (!open.emplace(item.id, std::move(s)).second)
            throw Error(ErrorKind::Internal, "batch: two open items of one tag");
          return true;
        }
        return false;
      },
      [&](const PcmItem& item, Codes&& codes) {
        const std::unique_ptr<OpenSource> s = take(item.id);
        io.done(SourceCodes{.tag = item.id,
                            .codes = std::move(codes),
                            .samples = s->samples,
                            .source_rate = s->src->source_rate(),
                            .source_channels = s->src->source_channels(),
                            .shortfall = s->src->shortfall()});
      },
      [&](size_t id, std::exception_ptr e) {
        const std::unique_ptr<OpenSource> s = take(id);
        SourceFailure f{.tag = id, .stage = SourceFailure::Read, .error = e, .shortfall = {}};
        // The runner's "empty signal" (its own Error(Input) for a source that gave no sample) in
        // the one-by-one path's words; a reader's error, out of memory or the machine as they are.
        bool empty_signal = false;
        try {
          std::rethrow_exception(e);
        } catch (const Error& err) {
          empty_signal = err.kind() == ErrorKind::Input;
        } catch (...) {
        }
        if (!s->read_failed && s->samples == 0 && empty_signal) {
          const std::string what = s->spec.path == "-" ? "stdin" : s->spec.path;
          f.error = std::make_exception_ptr(Error(ErrorKind::Input, what + ": no audio samples"));
          f.shortfall = s->src->shortfall();
        }
        io.failed(std::move(f));
      });
}

}  // namespace mimi::app
