// Audio sources through the slots of one batched encoding plan (codec/batch.h): the one items
// loop of `mimi encode --batch N` and of the dataset worker's `--batch N`. Each source is opened
// when a slot is free (a MonoSource: read, downmixed, resampled), read ahead of its slot on a pool
// of reader threads (read_ahead.h), and handed back with its codes, or with the failure that
// ended it, normalized the same way for both callers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>

#include "app/engine_io/pipeline.h"
#include "codec/engine.h"

namespace mimi::app {

// One source to encode: a file (or "-") or a span or channel of it; `tag` is the caller's name for
// it (an index into its own list), handed back with its result.
struct SourceSpec {
  size_t tag = 0;
  std::string path;
  AudioSpan span;
};

struct SourceCodes {
  size_t tag = 0;
  Codes codes;
  int64_t samples = 0;                   // at the model rate
  int source_rate = 0, source_channels = 0;
  std::string shortfall;                 // why the source held less than its header promised ("" if it did not)
};

struct SourceFailure {
  size_t tag = 0;
  enum Stage { Open, Read } stage = Open;
  // As the source (or the engine) threw it; a source that ended without a sample is
  // Error(Input) "PATH: no audio samples" ("stdin" for "-"), with its shortfall.
  std::exception_ptr error;
  std::string shortfall;
};

struct BatchedSources {
  // The next source to open, false when there is none. It may handle a failure of its own (a
  // source it will not hand out) and go on to the next.
  std::function<bool(SourceSpec&)> next;
  std::function<void(SourceCodes&&)> done;       // as each source's codes are complete
  std::function<void(SourceFailure&&)> failed;   // may rethrow: the run stops
};

// Encodes every source `io.next` hands out with `slots` streams at once (each source's codes are
// exactly those it gets alone) and `readers` reader threads (0: read between steps). Errors other
// than a source's own propagate (device, memory).
void encode_sources(Engine& eng, int n_q, int slots, int readers, const BatchedSources& io);

}  // namespace mimi::app
