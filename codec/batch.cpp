// The batch runner (codec/batch.h): a queue of signals over the slots of one plan.
#include "codec/batch.h"

#include <algorithm>

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

int64_t batch_chunk(const Engine& e, int slots) {
  if (slots < 1) throw Error(ErrorKind::Usage, "a batch needs at least one slot, got " + std::to_string(slots));
  if (e.options().chunk_frames < 1)
    throw Error(ErrorKind::Usage, "batched coding runs in chunks: the engine's chunk_frames must be > 0");
  return e.options().chunk_frames;
}

void fail(const ItemFailed& failed, size_t id, std::exception_ptr e) {
  if (!failed) std::rethrow_exception(e);
  failed(id, e);
}

struct EncodeSlot {
  bool busy = false;
  PcmItem item;
  int64_t frames = 0;                     // pushed so far
  std::vector<float> chunk;               // the next push's samples [chunk * frame_size]
  std::vector<std::vector<int32_t>> rows;  // codes so far, per codebook
};

// Reads the slot's next chunk; returns its frames (0: the signal has ended), the last partial
// frame zero-padded. A read that throws, or a signal with no samples at all, fails the item.
int64_t fill(EncodeSlot& sl, int64_t chunk, int64_t fs) {
  const int64_t want = chunk * fs;
  sl.chunk.resize(size_t(want));
  int64_t have = 0;
  while (have < want) {
    const int64_t got = sl.item.read(sl.chunk.data() + have, want - have);
    if (got < 0 || got > want - have) throw Error(ErrorKind::Internal, "a batch item's read returned " + std::to_string(got));
    if (got == 0) break;
    have += got;
  }
  if (have == 0 && sl.frames == 0) throw Error(ErrorKind::Input, "cannot encode an empty signal (0 samples)");
  const int64_t n = (have + fs - 1) / fs;
  std::fill(sl.chunk.begin() + have, sl.chunk.begin() + n * fs, 0.0f);
  return n;
}

}  // namespace

void encode_batch(Engine& engine, int n_q, int slots, const std::function<bool(PcmItem&)>& next,
                  const std::function<void(const PcmItem&, Codes&&)>& done, const ItemFailed& failed) {
  const int64_t chunk = batch_chunk(engine, slots), fs = engine.config().frame_size();
  EncodePlan& plan = engine.encode_plan(chunk, n_q, slots);
  plan.reset();
  std::vector<EncodeSlot> slot(static_cast<size_t>(slots));
  std::vector<const float*> pcm(static_cast<size_t>(slots));
  std::vector<int64_t> frames(static_cast<size_t>(slots));
  bool queue_open = true;
  auto finish = [&](EncodeSlot& sl) {
    Codes c{n_q, sl.frames, {}};
    c.data.reserve(size_t(n_q) * size_t(sl.frames));
    for (const auto& r : sl.rows) c.data.insert(c.data.end(), r.begin(), r.end());
    sl.busy = false;
    done(sl.item, std::move(c));
  };
  for (;;) {
    int busy = 0;
    for (int s = 0; s < slots; ++s) {
      EncodeSlot& sl = slot[size_t(s)];
      frames[size_t(s)] = 0;
      while (!sl.busy && queue_open) {  // refill: the next signal that has samples
        PcmItem item;
        if (!next(item)) {
          queue_open = false;
          break;
        }
        sl.busy = true;
        sl.item = std::move(item);
        sl.frames = 0;
        sl.rows.assign(size_t(n_q), {});
        plan.reset(s);
        try {
          frames[size_t(s)] = fill(sl, chunk, fs);
        } catch (...) {
          sl.busy = false;
          fail(failed, sl.item.id, std::current_exception());
        }
      }
      if (!sl.busy) continue;
      if (frames[size_t(s)] == 0 && sl.frames > 0) {  // a signal carried over from the last step
        try {
          frames[size_t(s)] = fill(sl, chunk, fs);
        } catch (...) {
          sl.busy = false;
          fail(failed, sl.item.id, std::current_exception());
          --s;  // the slot is free: refill it in this step
          continue;
        }
        if (frames[size_t(s)] == 0) {  // it ended on a chunk boundary
          finish(sl);
          --s;
          continue;
        }
      }
      pcm[size_t(s)] = sl.chunk.data();
      ++busy;
    }
    if (busy == 0) return;
    plan.step(pcm.data(), frames.data());
    const int64_t F = int64_t(plan.codes().size()) / n_q;
    for (int s = 0; s < slots; ++s) {
      EncodeSlot& sl = slot[size_t(s)];
      const int64_t n = frames[size_t(s)], o = plan.slot_offset(s);
      if (n == 0) continue;
      for (int k = 0; k < n_q; ++k) {
        auto row = plan.codes().begin() + k * F + o;
        sl.rows[size_t(k)].insert(sl.rows[size_t(k)].end(), row, row + n);
      }
      sl.frames += n;
      if (n < chunk) finish(sl);  // a short chunk is the last one
    }
  }
}

void decode_batch(Engine& engine, int n_q, int slots, const std::function<bool(CodesItem&)>& next,
                  const std::function<void(const CodesItem&, const float*, int64_t)>& samples,
                  const std::function<void(const CodesItem&)>& done, const ItemFailed& failed) {
  const int64_t chunk = batch_chunk(engine, slots), fs = engine.config().frame_size();
  const int bins = engine.config().bins;
  DecodePlan& plan = engine.decode_plan(chunk, n_q, slots);
  plan.reset();
  struct DecodeSlot {
    bool busy = false;
    CodesItem item;
    int64_t next = 0;            // the next frame to push
    std::vector<int32_t> chunk;  // its codes [n_q, n]
  };
  std::vector<DecodeSlot> slot(static_cast<size_t>(slots));
  std::vector<const int32_t*> codes(static_cast<size_t>(slots));
  std::vector<int64_t> frames(static_cast<size_t>(slots));
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
  bool queue_open = true;
  for (;;) {
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
        sl = {true, item, 0, {}};
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
    }
    if (busy == 0) return;
    plan.step(codes.data(), frames.data());
    const Buffer& y = plan.output();
    for (int s = 0; s < slots; ++s) {
      DecodeSlot& sl = slot[size_t(s)];
      const int64_t n = frames[size_t(s)];
      if (n == 0) continue;
      samples(sl.item, y.ptr() + plan.slot_offset(s) * fs, n * fs);
      sl.next += n;
      if (sl.next == sl.item.codes->frames) {
        sl.busy = false;
        done(sl.item);
      }
    }
  }
}

}  // namespace mimi
