// The slots' positions around a step and the pipelined steps in flight (codec/plan_flight.h).
#include "codec/plan_flight.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "codec/error.h"

namespace mimi::plan_detail {

int free_set(const std::deque<StepInFlight>& flight) {
  if (flight.size() >= 2) throw Error(ErrorKind::Usage, "a plan holds at most two steps in flight: collect one first");
  return flight.empty() ? 0 : 1 - flight.back().set;
}

StepInFlight collect_flight(std::deque<StepInFlight>& flight, StepGraphs& graphs, std::vector<int64_t>& offset,
                            std::vector<int64_t>& frames) {
  if (flight.empty()) throw Error(ErrorKind::Usage, "collect() without a step in flight");
  StepInFlight f = std::move(flight.front());
  flight.pop_front();
  graphs.wait(f.set);
  offset = f.offset;
  frames = f.frames;
  return f;
}

int64_t lay_out_slots(const int64_t* frames, int slots, int64_t max_frames, const char* plan,
                      std::vector<int64_t>& out_offset, std::vector<int64_t>& out_frames) {
  for (int s = 0; s < slots; ++s)
    if (frames[s] < 0 || frames[s] > max_frames)
      throw Error(ErrorKind::Usage, std::string(plan) + " plan takes 0.." + std::to_string(max_frames) +
                                        " frames per slot and step, got " + std::to_string(frames[s]));
  int64_t total = 0;
  for (int s = 0; s < slots; ++s) {
    out_offset[size_t(s)] = total;
    out_frames[size_t(s)] = frames[s];
    total += frames[s];
  }
  return total;
}

void check_none_in_flight(const std::deque<StepInFlight>& flight, const char* what) {
  if (!flight.empty())
    throw Error(ErrorKind::Usage, std::string(what) + " with " + std::to_string(flight.size()) +
                                      " pipelined step(s) in flight: collect them first");
}

void discard_flight(std::deque<StepInFlight>& flight, StepGraphs& graphs) noexcept {
  if (flight.empty()) return;
  flight.clear();
  try {
    graphs.synchronize();
  } catch (...) {  // the error that stopped the runner has been reported; the stream's state is its own
  }
}

bool stage_slots(const std::vector<TransformerState*>& tf, const std::vector<int64_t>& frames, int64_t ds,
                 int64_t max_frames, const Config& c, int32_t* positions) {
  bool steady = true;
  for (size_t s = 0; s < tf.size(); ++s) {
    const TransformerState& st = *tf[s];
    if (st.pos > int64_t(INT32_MAX) - max_frames * ds)
      throw Error(ErrorKind::Input, "a stream longer than 2^31 transformer steps (about 2.7 years of audio)");
    positions[s] = int32_t(st.pos);
    if (frames[s] > 0) steady = steady && st.pos > 0 && st.cached == c.context - 1;
  }
  return steady;
}

int64_t stage_segments(const std::vector<int64_t>& frames, const std::vector<int64_t>& offsets, int64_t ds,
                       const int32_t* positions, WindowSegment* table) {
  int64_t n = 0;
  for (size_t s = 0; s < frames.size(); ++s)
    if (frames[s] > 0)  // int32: a step's columns are bounded by the plan's buffers, positions by stage_slots
      table[n++] = {int32_t(offsets[s] * ds), int32_t(frames[s] * ds), positions[s], int32_t(s)};
  return n;
}

int64_t common_frames(const std::vector<int64_t>& frames) {
  int64_t n = 0;
  for (int64_t f : frames)
    if (f > 0 && n > 0 && f != n) return 0;
    else if (f > 0) n = f;
  return n;
}

void advance_slots(const std::vector<TransformerState*>& tf, const std::vector<int64_t>& frames, int64_t ds,
                   const Config& c) {
  for (size_t s = 0; s < tf.size(); ++s) {
    if (frames[s] == 0) continue;
    tf[s]->cached = std::min<int64_t>(c.context - 1, tf[s]->cached + frames[s] * ds);
    tf[s]->pos += frames[s] * ds;
  }
}

}  // namespace mimi::plan_detail
