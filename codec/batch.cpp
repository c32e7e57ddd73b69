// The batch runner (codec/batch.h): a queue of signals over the slots of one plan.
#include "codec/batch.h"

#include <algorithm>
#include <deque>
#include <memory>

#include "codec/error.h"

namespace mimi {

std::vector<int64_t> encode_pushes(int64_t samples, int64_t chunk_frames, int64_t frame_size) {
  const int64_t frames = (samples + frame_size - 1) / frame_size;
  const int64_t chunk = chunk_frames > 0 ? chunk_frames : std::max<int64_t>(frames, 1);
  std::vector<int64_t> pushes;
  for (int64_t f = 0; f < frames; f += chunk) pushes.push_back(std::min(chunk, frames - f));
  return pushes;
}

namespace {

// chunk: the engine's encode_chunk_frames or decode_chunk_frames
int64_t batch_chunk(int64_t chunk, int slots) {
  if (slots < 1) throw Error(ErrorKind::Usage, "a batch needs at least one slot, got " + std::to_string(slots));
  if (chunk < 1) throw Error(ErrorKind::Usage, "batched coding runs in chunks: the engine's chunk frames must be > 0");
  return chunk;
}

void fail(const ItemFailed& failed, size_t id, std::exception_ptr e) {
  if (!failed) std::rethrow_exception(e);
  failed(id, e);
}

// One signal being encoded: its codes so far, and how many of its steps are still in flight.
// It is done when its last chunk has been read (ended) and every step with its frames collected.
struct EncodeItem {
  PcmItem item;
  std::vector<std::vector<int32_t>> rows;  // codes so far, per codebook
  int64_t frames = 0;                      // collected so far
  int pending = 0;                         // steps in flight with its frames
  bool ended = false;
  bool closed = false;  // failed, or handed out: nothing more goes to it
};

struct EncodeSlot {
  std::shared_ptr<EncodeItem> cur;  // the signal this slot streams (nullptr: idle)
  int64_t pushed = 0;               // its frames submitted so far
  std::vector<float> chunk;         // the next push's samples [chunk * frame_size]
};

// Reads the slot's next chunk; returns its frames (0: the signal has ended), the last partial
// frame zero-padded. A read that throws, or a signal with no samples at all, fails the item.
int64_t fill(EncodeSlot& sl, int64_t chunk, int64_t fs) {
  const int64_t want = chunk * fs;
  sl.chunk.resize(size_t(want));
  int64_t have = 0;
  while (have < want) {
    const int64_t got = sl.cur->item.read(sl.chunk.data() + have, want - have);
    if (got < 0 || got > want - have) throw Error(ErrorKind::Internal, "a batch item's read returned " + std::to_string(got));
    if (got == 0) break;
    have += got;
  }
  if (have == 0 && sl.pushed == 0) throw Error(ErrorKind::Input, "cannot encode an empty signal (0 samples)");
  const int64_t n = (have + fs - 1) / fs;
  std::fill(sl.chunk.begin() + have, sl.chunk.begin() + n * fs, 0.0f);
  return n;
}

// A submitted step: which item each slot's frames belong to.
template <class Item>
struct StepOwners {
  std::vector<std::shared_ptr<Item>> owner;  // [slots]; nullptr: the slot sat the step out
};

// Drops a plan's steps in flight when the runner leaves by an exception (they are waited for, so
// no staging buffer is in use when the next user of the cached plan starts).
template <class Plan>
struct DiscardOnExit {
  Plan& plan;
  ~DiscardOnExit() { plan.discard(); }
};

}  // namespace

// Pipelined: step k+1 is submitted before step k's codes are collected, so the host hands out
// codes and reads the next chunks while the device computes (codec/plan.h, two steps in flight).
// Which slot takes which signal depends only on the reads, never on a step's results, so the
// chunks each signal pushes are those it pushes alone.
void encode_batch(Engine& engine, int n_q, int slots, const std::function<bool(PcmItem&)>& next,
                  const std::function<void(const PcmItem&, Codes&&)>& done, const ItemFailed& failed) {
  const int64_t chunk = batch_chunk(engine.options().encode_chunk_frames, slots), fs = engine.config().frame_size();
  EncodePlan& plan = engine.encode_plan(chunk, n_q, slots);
  plan.reset();
  DiscardOnExit<EncodePlan> guard{plan};
  std::vector<EncodeSlot> slot(static_cast<size_t>(slots));
  std::vector<const float*> pcm(static_cast<size_t>(slots));
  std::vector<int64_t> frames(static_cast<size_t>(slots));
  std::deque<StepOwners<EncodeItem>> flight;
  bool queue_open = true;
  auto finish_if_complete = [&](EncodeItem& it) {
    if (!it.ended || it.pending > 0 || it.closed) return;
    Codes c{n_q, it.frames, {}};
    c.data.reserve(size_t(n_q) * size_t(it.frames));
    for (const auto& r : it.rows) c.data.insert(c.data.end(), r.begin(), r.end());
    it.closed = true;
    done(it.item, std::move(c));
  };
  auto fail_item = [&](EncodeSlot& sl) {
    std::shared_ptr<EncodeItem> it = std::move(sl.cur);
    it->closed = true;  // its frames still in flight are dropped when they arrive
    fail(failed, it->item.id, std::current_exception());
  };
  auto collect = [&] {  // the oldest step in flight: its codes to their items
    plan.collect();
    StepOwners<EncodeItem> r = std::move(flight.front());
    flight.pop_front();
    const int64_t F = int64_t(plan.codes().size()) / n_q;
    for (int s = 0; s < slots; ++s) {
      if (!r.owner[size_t(s)]) continue;
      EncodeItem& it = *r.owner[size_t(s)];
      const int64_t n = plan.slot_frames(s), o = plan.slot_offset(s);
      --it.pending;
      if (!it.closed) {
        for (int k = 0; k < n_q; ++k) {
          auto row = plan.codes().begin() + k * F + o;
          it.rows[size_t(k)].insert(it.rows[size_t(k)].end(), row, row + n);
        }
        it.frames += n;
      }
      finish_if_complete(it);
    }
  };
  for (;;) {
    StepOwners<EncodeItem> owners;
    owners.owner.resize(size_t(slots));
    int busy = 0;
    for (int s = 0; s < slots; ++s) {
      EncodeSlot& sl = slot[size_t(s)];
      frames[size_t(s)] = 0;
      while (!sl.cur && queue_open) {  // refill: the next signal that has samples
        PcmItem item;
        if (!next(item)) {
          queue_open = false;
          break;
        }
        sl.cur = std::make_shared<EncodeItem>();
        sl.cur->item = std::move(item);
        sl.cur->rows.assign(size_t(n_q), {});
        sl.pushed = 0;
        plan.reset(s);
        try {
          frames[size_t(s)] = fill(sl, chunk, fs);
        } catch (...) {
          fail_item(sl);
        }
      }
      if (!sl.cur) continue;
      if (frames[size_t(s)] == 0 && sl.pushed > 0) {  // a signal carried over from the last step
        try {
          frames[size_t(s)] = fill(sl, chunk, fs);
        } catch (...) {
          fail_item(sl);
          --s;  // the slot is free: refill it in this step
          continue;
        }
        if (frames[size_t(s)] == 0) {  // it ended on a chunk boundary
          sl.cur->ended = true;
          finish_if_complete(*sl.cur);
          sl.cur.reset();
          --s;
          continue;
        }
      }
      pcm[size_t(s)] = sl.chunk.data();
      owners.owner[size_t(s)] = sl.cur;
      ++sl.cur->pending;
      sl.pushed += frames[size_t(s)];
      if (frames[size_t(s)] < chunk) {  // a short chunk is the last one: the slot is free next step
        sl.cur->ended = true;
        sl.cur.reset();
      }
      ++busy;
    }
    if (busy == 0) break;
    plan.submit(pcm.data(), frames.data());
    flight.push_back(std::move(owners));
    if (flight.size() == 2) collect();  // step k's codes while step k+1 computes
  }
  while (!flight.empty()) collect();
}

void decode_batch(Engine& engine, int n_q, int slots, const std::function<bool(CodesItem&)>& next,
                  const std::function<void(const CodesItem&, const float*, int64_t)>& samples,
                  const std::function<void(const CodesItem&)>& done, const ItemFailed& failed) {
  const int64_t chunk = batch_chunk(engine.options().decode_chunk_frames, slots), fs = engine.config().frame_size();
  const int bins = engine.config().bins;
  DecodePlan& plan = engine.decode_plan(chunk, n_q, slots);
  plan.reset();
  DiscardOnExit<DecodePlan> guard{plan};
  struct DecodeItem {
    CodesItem item;
    bool last = false;  // its last chunk is in the step that names it
  };
  struct DecodeSlot {
    CodesItem item;
    bool busy = false;
    int64_t next = 0;            // the next frame to push
    std::vector<int32_t> chunk;  // its codes [n_q, n]
  };
  std::vector<DecodeSlot> slot(static_cast<size_t>(slots));
  std::vector<const int32_t*> codes(static_cast<size_t>(slots));
  std::vector<int64_t> frames(static_cast<size_t>(slots));
  std::deque<StepOwners<DecodeItem>> flight;
  // Checked when a slot takes the item, so that bad codes fail only their item.
  auto check = [&](const Codes* c) {
    if (!c) throw Error(ErrorKind::Input, "no frames to decode");
    engine.check_codes(*c, n_q);
    for (int k = 0; k < n_q; ++k)  // all values now, so that bad codes fail their item alone
      for (int64_t f = 0; f < c->frames; ++f) {
        const int32_t v = c->data[size_t(k * c->frames + f)];
        if (v < 0 || v >= bins)
          throw Error(ErrorKind::Input, "code " + std::to_string(v) + " at codebook " + std::to_string(k) + ", frame " +
                                            std::to_string(f) + " is outside [0, " + std::to_string(bins) + ")");
      }
  };
  auto collect = [&] {  // the oldest step in flight: its samples to their items
    plan.collect();
    StepOwners<DecodeItem> r = std::move(flight.front());
    flight.pop_front();
    const float* y = plan.output().ptr();
    for (int s = 0; s < slots; ++s) {
      if (!r.owner[size_t(s)]) continue;
      const DecodeItem& it = *r.owner[size_t(s)];
      samples(it.item, y + plan.slot_offset(s) * fs, plan.slot_frames(s) * fs);
      if (it.last) done(it.item);
    }
  };
  bool queue_open = true;
  for (;;) {
    StepOwners<DecodeItem> owners;
    owners.owner.resize(size_t(slots));
    int busy = 0;
    for (int s = 0; s < slots; ++s) {
      DecodeSlot& sl = slot[size_t(s)];
      while (!sl.busy && queue_open) {
        CodesItem item;
        if (!next(item)) {
          queue_open = false;
          break;
        }
        try {
          check(item.codes);
        } catch (...) {
          fail(failed, item.id, std::current_exception());
          continue;
        }
        sl.item = item;
        sl.busy = true;
        sl.next = 0;
        plan.reset(s);
      }
      frames[size_t(s)] = 0;
      if (!sl.busy) continue;
      ++busy;
      const Codes& c = *sl.item.codes;
      const int64_t n = std::min(chunk, c.frames - sl.next);
      sl.chunk.resize(size_t(n_q) * size_t(n));
      for (int k = 0; k < n_q; ++k)  // the first n_q codebooks of frames [next, next + n)
        std::copy_n(c.data.begin() + k * c.frames + sl.next, n, sl.chunk.begin() + k * n);
      frames[size_t(s)] = n;
      codes[size_t(s)] = sl.chunk.data();
      sl.next += n;
      owners.owner[size_t(s)] = std::make_shared<DecodeItem>(DecodeItem{sl.item, sl.next == c.frames});
      if (sl.next == c.frames) sl.busy = false;  // its codes are no longer read: the slot is free
    }
    if (busy == 0) break;
    plan.submit(codes.data(), frames.data());
    flight.push_back(std::move(owners));
    if (flight.size() == 2) collect();  // step k's samples while step k+1 computes
  }
  while (!flight.empty()) collect();
}

}  // namespace mimi
