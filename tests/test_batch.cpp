// Batched == alone, bitwise: signals of mixed lengths encoded (decoded) through the slots of one
// batched plan (codec/batch.h) give exactly the codes (samples) each gets from Engine::encode
// (Engine::decode) alone on the same backend, for any slot count (fewer slots than signals, so
// slots are refilled mid-queue, and more slots than signals, so some sit idle), and any chunk
// size. On the CPU backend, the GPU plans' code path on the CPU, and (batch gpu) the GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <map>

#include "codec/batch.h"
#include "codec/error.h"
#include "support/golden.h"

using namespace mimi;
using namespace mimi::test;

namespace {

// A deterministic test signal: two tones and noise, different for every (length, seed).
std::vector<float> signal(int64_t n, uint32_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const float noise = float(int32_t(s >> 8) - (1 << 23)) / float(1 << 23);
    x[size_t(i)] = 0.3f * std::sin(0.013f * float(i) * float(1 + seed % 7)) + 0.2f * std::sin(0.0021f * float(i)) +
                   0.1f * noise;
  }
  return x;
}

struct Setup {
  std::shared_ptr<const Model> model;
  Device device;
  const Kernels* kernels = nullptr;  // a test kernel table, or nullptr for the device's own
};

// Encodes and decodes `lengths` (samples) alone and through batches of each slot count, with
// the engine's chunk of `chunk` frames; every result must be bitwise the lone one.
void check_batched(const Setup& su, const std::vector<int64_t>& lengths, int n_q, int64_t chunk,
                   std::initializer_list<int> slot_counts) {
  EngineOptions o;
  o.device = su.device;
  o.kernels = su.kernels;
  o.with_chunk_frames(chunk);
  Engine engine(su.model, o);
  std::vector<std::vector<float>> pcm;
  std::vector<Codes> alone;
  std::vector<std::vector<float>> alone_out;
  for (size_t i = 0; i < lengths.size(); ++i) {
    pcm.push_back(signal(lengths[i], uint32_t(i + 1)));
    alone.push_back(engine.encode(pcm.back().data(), lengths[i], n_q));
    alone_out.push_back(engine.decode(alone.back(), n_q));
  }
  for (int slots : slot_counts) {
    CAPTURE(slots);
    CAPTURE(chunk);
    size_t queued = 0;
    std::vector<int64_t> pos(pcm.size(), 0);
    std::map<size_t, Codes> got;
    encode_batch(engine, n_q, slots,
                 [&](PcmItem& it) {
                   if (queued == pcm.size()) return false;
                   const size_t i = queued++;
                   // reads of odd sizes, to show the chunks do not depend on them
                   it = {i, [&, i](float* dst, int64_t n) {
                           const int64_t k = std::min({n, lengths[i] - pos[i], int64_t(997 + 31 * i)});
                           std::copy_n(pcm[i].data() + pos[i], k, dst);
                           pos[i] += k;
                           return k;
                         }};
                   return true;
                 },
                 [&](const PcmItem& it, Codes&& c) { got[it.id] = std::move(c); });
    REQUIRE(got.size() == lengths.size());
    for (size_t i = 0; i < lengths.size(); ++i) {
      CAPTURE(i);
      CAPTURE(lengths[i]);
      CHECK(got[i].n_q == alone[i].n_q);
      CHECK(got[i].frames == alone[i].frames);
      CHECK(got[i].data == alone[i].data);  // exact
    }
    queued = 0;
    std::map<size_t, std::vector<float>> out;
    std::map<size_t, int> ended;
    decode_batch(engine, n_q, slots,
                 [&](CodesItem& it) {
                   if (queued == alone.size()) return false;
                   it = {queued, &alone[queued]};
                   ++queued;
                   return true;
                 },
                 [&](const CodesItem& it, const float* y, int64_t n) {
                   out[it.id].insert(out[it.id].end(), y, y + n);
                 },
                 [&](const CodesItem& it) { ++ended[it.id]; });
    REQUIRE(out.size() == lengths.size());
    for (size_t i = 0; i < lengths.size(); ++i) {
      CAPTURE(i);
      CHECK(ended[i] == 1);
      REQUIRE(out[i].size() == alone_out[i].size());
      CHECK(std::memcmp(out[i].data(), alone_out[i].data(), out[i].size() * sizeof(float)) == 0);  // bitwise
    }
  }
}

// The plans' pipelined steps (two in flight, codec/plan.h): a script of steps over 3 slots
// (frames per slot, 0 = sitting out, a short chunk, a slot reset mid-way) run with step() and
// then as the batch runner runs it (submit k+1, then collect k) give every step the same codes,
// columns and samples, bitwise; the misuses are usage errors.
void check_pipelined(const Device& d, const Kernels* kernels) {
  const auto model = reference_model("tiny-window", Dialect::Moshi);
  const int64_t fs = model->cfg.frame_size(), chunk = 2;
  const int n_q = 8, slots = 3;
  EngineOptions o;  // plans from engines, which place the model on the device
  o.device = d;
  o.kernels = kernels;
  o.with_chunk_frames(chunk);
  Engine one(model, o), two(model, o);
  std::vector<std::vector<int64_t>> script = {{2, 2, 2}, {2, 0, 2}, {1, 2, 2}, {2, 2, 0}, {0, 2, 2},
                                              {2, 1, 2}, {2, 2, 2}, {0, 0, 1}, {2, 2, 2}};
  for (int i = 0; i < 8; ++i) script.push_back({2, 2, 2});  // steady: captured and replayed from each staging set
  const int reset_before = 5;  // slot 0 starts a new signal at this step
  std::vector<std::vector<float>> pcm;  // [step][slot]: chunk frames of samples
  for (size_t i = 0; i < script.size() * slots; ++i) pcm.push_back(signal(chunk * fs, uint32_t(100 + i)));
  auto ptrs = [&](size_t step) {
    std::vector<const float*> p;
    for (int s = 0; s < slots; ++s) p.push_back(pcm[step * slots + size_t(s)].data());
    return p;
  };
  struct Result {
    std::vector<int32_t> codes;
    std::vector<int64_t> offset, frames;
    std::vector<float> samples;
  };
  auto read_enc = [&](const EncodePlan& p) {
    Result r{p.codes(), {}, {}, {}};
    for (int s = 0; s < slots; ++s) r.offset.push_back(p.slot_offset(s)), r.frames.push_back(p.slot_frames(s));
    return r;
  };
  auto read_dec = [&](const DecodePlan& p) {
    Result r{{}, {}, {}, {p.output().ptr(), p.output().ptr() + p.output().size()}};
    for (int s = 0; s < slots; ++s) r.offset.push_back(p.slot_offset(s)), r.frames.push_back(p.slot_frames(s));
    return r;
  };
  // one step at a time
  std::vector<Result> want_enc, want_dec;
  EncodePlan& e1 = one.encode_plan(chunk, n_q, slots);
  DecodePlan& d1 = one.decode_plan(chunk, n_q, slots);
  std::vector<std::vector<std::vector<int32_t>>> step_codes;  // [step][slot]: [n_q, frames] for decoding
  for (size_t i = 0; i < script.size(); ++i) {
    if (int(i) == reset_before) e1.reset(0), d1.reset(0);
    e1.step(ptrs(i).data(), script[i].data());
    want_enc.push_back(read_enc(e1));
    const int64_t F = int64_t(e1.codes().size()) / n_q;
    std::vector<std::vector<int32_t>> per_slot(slots);
    std::vector<const int32_t*> cp;
    for (int s = 0; s < slots; ++s) {
      for (int q = 0; q < n_q; ++q)
        for (int64_t f = 0; f < script[i][size_t(s)]; ++f)
          per_slot[size_t(s)].push_back(e1.codes()[size_t(q * F + e1.slot_offset(s) + f)]);
      cp.push_back(per_slot[size_t(s)].data());
    }
    d1.step(cp.data(), script[i].data());
    want_dec.push_back(read_dec(d1));
    step_codes.push_back(std::move(per_slot));
  }
  // pipelined: submit step i, then collect step i - 1
  EncodePlan& e2 = two.encode_plan(chunk, n_q, slots);
  DecodePlan& d2 = two.decode_plan(chunk, n_q, slots);
  for (size_t i = 0; i <= script.size(); ++i) {
    CAPTURE(i);
    if (i < script.size()) {
      if (int(i) == reset_before) e2.reset(0), d2.reset(0);  // a slot reset with a step in flight
      std::vector<const int32_t*> cp;
      for (int s = 0; s < slots; ++s) cp.push_back(step_codes[i][size_t(s)].data());
      e2.submit(ptrs(i).data(), script[i].data());
      d2.submit(cp.data(), script[i].data());
      for (int s = 0; s < slots; ++s) {
        std::vector<float>& x = pcm[i * slots + size_t(s)];
        std::fill(x.begin(), x.end(), 9.0f);
      }
      CHECK(e2.in_flight() == (i == 0 ? 1 : 2));
    }
    if (i == 0) continue;
    e2.collect();
    d2.collect();
    const Result ge = read_enc(e2), gd = read_dec(d2);
    CHECK(ge.codes == want_enc[i - 1].codes);
    CHECK(ge.offset == want_enc[i - 1].offset);
    CHECK(ge.frames == want_enc[i - 1].frames);
    CHECK(gd.offset == want_dec[i - 1].offset);
    REQUIRE(gd.samples.size() == want_dec[i - 1].samples.size());
    CHECK(std::memcmp(gd.samples.data(), want_dec[i - 1].samples.data(), gd.samples.size() * sizeof(float)) == 0);
  }
  CHECK(e2.in_flight() == 0);
  const Kernels& k = kernels ? *kernels : kernels_for(d);
  if (k.graphs) {  // both staging sets' graphs captured, then replayed, while pipelined
    CHECK(e2.graph_stats().captured == 2);
    CHECK(e2.graph_stats().replayed >= 4);
    CHECK(d2.graph_stats().captured == 2);
    CHECK(d2.graph_stats().replayed >= 4);
  }
  // misuse: a third step in flight, collect() with none, step() or bind_input() with one in flight
  const std::vector<float> x = signal(chunk * fs, 7);
  const std::vector<const float*> xs(slots, x.data());
  const std::vector<int64_t> full(slots, chunk);
  CHECK_THROWS_AS(e2.collect(), Error);
  e2.submit(xs.data(), full.data());
  e2.submit(xs.data(), full.data());
  CHECK_THROWS_AS(e2.submit(xs.data(), full.data()), Error);
  CHECK(e2.in_flight() == 2);
  CHECK_THROWS_AS(e2.step(xs.data(), full.data()), Error);
  CHECK_THROWS_AS(e2.bind_input(x.data(), chunk * fs), Error);
  e2.discard();  // what the runner does when it stops on an error
  CHECK(e2.in_flight() == 0);
  e2.reset();
  e2.step(ptrs(0).data(), script[0].data());  // ptrs(0) now holds 9.0s: compare with the other plan
  e1.reset();
  e1.step(ptrs(0).data(), script[0].data());
  CHECK(e2.codes() == e1.codes());
}

// Lengths around frame and chunk edges, and long enough to cross tiny-window's 5-step window.
std::vector<int64_t> edge_lengths(int64_t fs, int64_t chunk) {
  return {1, fs - 1, fs, fs + 1, chunk * fs, chunk * fs + 7, 3 * chunk * fs + fs / 2, 11 * fs + 3, 2 * fs};
}

void tiny_cases(const Device& d, const Kernels* k) {
  for (const char* config : {"tiny-window", "tiny"}) {
    CAPTURE(config);
    const Setup su{reference_model(config, Dialect::Moshi), d, k};
    const int64_t fs = su.model->cfg.frame_size();
    check_batched(su, edge_lengths(fs, 4), 8, 4, {1, 2, 3, 12});
    check_batched(su, edge_lengths(fs, 1), 3, 1, {4});  // one frame per step: the streaming case
  }
}


}  // namespace

TEST_CASE("batch: encode_pushes is EncoderSession's chunking") {
  CHECK(encode_pushes(1, 4, 10) == std::vector<int64_t>{1});
  CHECK(encode_pushes(40, 4, 10) == std::vector<int64_t>{4});
  CHECK(encode_pushes(41, 4, 10) == std::vector<int64_t>{4, 1});
  CHECK(encode_pushes(95, 4, 10) == std::vector<int64_t>{4, 4, 2});
  CHECK(encode_pushes(95, 0, 10) == std::vector<int64_t>{10});
}

TEST_CASE("batch: tiny configs on the CPU backend") { tiny_cases(Device{}, nullptr); }

TEST_CASE("batch: tiny configs through the GPU plans' code path on the CPU") {
  tiny_cases(Device{}, &cpu_as_device());
}

TEST_CASE("batch: full config on the CPU backend") {
  const Setup su{reference_model("full", Dialect::Moshi), Device{}, nullptr};
  const int64_t fs = su.model->cfg.frame_size();
  check_batched(su, {5 * fs + 100, 1, 12 * fs, 9 * fs + 1}, 8, 8, {3});
  check_batched(su, {3 * fs + 5, 2 * fs, fs}, 32, 1, {3});  // 6 columns batched, 2 alone
}

TEST_CASE("batch: a slot that sits steps out mid-stream, and a slot reset on its own, change nothing") {
  const auto model = reference_model("tiny-window", Dialect::Moshi);
  const Kernels& k = kernels_for(Device{});
  const int64_t fs = model->cfg.frame_size(), chunk = 2;
  const int n_q = 8;
  // a signal's codes pushed alone through a one-slot plan, chunk by chunk
  auto alone = [&](const std::vector<float>& x) {
    EncodePlan p(*model, k, chunk, n_q);
    std::vector<std::vector<int32_t>> pieces;
    for (int64_t f = 0; f * fs < int64_t(x.size()); f += chunk) {
      p.push(x.data() + f * fs, chunk);
      pieces.push_back(p.codes());
    }
    return pieces;
  };
  const std::vector<float> a = signal(12 * fs, 1), b = signal(12 * fs, 2), c = signal(8 * fs, 3);
  const auto ra = alone(a), rb = alone(b), rc = alone(c);
  EncodePlan plan(*model, k, chunk, n_q, 2);
  // slot 0: a, then (reset) c; slot 1: b, sitting out every third step
  size_t ia = 0, ib = 0, ic = 0;
  for (int step = 0; ia + ic < ra.size() + rc.size() || ib < rb.size(); ++step) {
    const bool b_turn = step % 3 != 2 && ib < rb.size();
    const bool on_c = ia == ra.size();
    if (on_c && ic == 0) plan.reset(0);
    const bool s0 = on_c ? ic < rc.size() : true;
    const float* pcm[2] = {on_c ? c.data() + int64_t(ic) * chunk * fs : a.data() + int64_t(ia) * chunk * fs,
                           b.data() + int64_t(ib) * chunk * fs};
    const int64_t frames[2] = {s0 ? chunk : 0, b_turn ? chunk : 0};
    plan.step(pcm, frames);
    const int64_t F = frames[0] + frames[1];
    auto slot_codes = [&](int s) {
      std::vector<int32_t> out;
      for (int q = 0; q < n_q; ++q)
        for (int64_t f = 0; f < frames[s]; ++f) out.push_back(plan.codes()[size_t(q * F + plan.slot_offset(s) + f)]);
      return out;
    };
    CAPTURE(step);
    if (s0) CHECK(slot_codes(0) == (on_c ? rc[ic++] : ra[ia++]));
    if (b_turn) CHECK(slot_codes(1) == rb[ib++]);
  }
}

TEST_CASE("batch: pipelined plan steps (two in flight) give what step() gives") {
  check_pipelined(Device{}, nullptr);
  check_pipelined(Device{}, &cpu_as_device());
}

TEST_CASE("batch: a slot count or chunk the runner cannot use is a usage error") {
  const Setup su{reference_model("tiny", Dialect::Moshi), Device{}, nullptr};
  EngineOptions o;
  o.with_chunk_frames(0);
  Engine one_chunk(su.model, o);
  auto none = [](PcmItem&) { return false; };
  auto ignore = [](const PcmItem&, Codes&&) {};
  CHECK_THROWS_AS(encode_batch(one_chunk, 8, 2, none, ignore), Error);
  Engine engine(su.model);
  CHECK_THROWS_AS(encode_batch(engine, 8, 0, none, ignore), Error);
  CHECK_NOTHROW(encode_batch(engine, 8, 2, none, ignore));  // an empty queue: nothing to do
}

TEST_CASE("batch: a failing item fails alone; the others finish as if alone") {
  const Setup su{reference_model("tiny-window", Dialect::Moshi), Device{}, nullptr};
  EngineOptions o;
  o.with_chunk_frames(3);
  Engine engine(su.model, o);
  const int64_t fs = su.model->cfg.frame_size();
  const std::vector<float> a = signal(7 * fs + 5, 1), b = signal(4 * fs, 2);
  const Codes alone_a = engine.encode(a.data(), int64_t(a.size()), 8), alone_b = engine.encode(b.data(), int64_t(b.size()), 8);
  // items: a, empty, one that throws after 4 frames, b
  size_t queued = 0;
  std::vector<int64_t> pos(4, 0);
  std::map<size_t, Codes> got;
  std::map<size_t, std::string> why;
  const ItemFailed record_failure = [&](size_t id, std::exception_ptr e) {  // its message, by item
    try {
      std::rethrow_exception(e);
    } catch (const Error& err) {
      why[id] = err.what();
    }
  };
  encode_batch(
      engine, 8, 2,
      [&](PcmItem& it) {
        if (queued == 4) return false;
        const size_t i = queued++;
        it = {i, [&, i](float* dst, int64_t n) -> int64_t {
                const std::vector<float>& x = i == 0 ? a : b;
                if (i == 1) return 0;
                if (i == 2 && pos[i] >= 4 * fs) throw Error(ErrorKind::Input, "item 2: truncated");
                const int64_t k = std::min(n, int64_t(x.size()) - pos[i]);
                std::copy_n(x.data() + pos[i], k, dst);
                pos[i] += k;
                return k;
              }};
        return true;
      },
      [&](const PcmItem& it, Codes&& c) { got[it.id] = std::move(c); },
      record_failure);
  CHECK(got.size() == 2);
  CHECK(got[0].data == alone_a.data);
  CHECK(got[3].data == alone_b.data);
  CHECK(why.size() == 2);
  CHECK(why[1].find("empty") != std::string::npos);
  CHECK(why[2].find("truncated") != std::string::npos);
  // decode: codes outside the codebooks fail their item only
  Codes bad = alone_b;
  bad.data[5] = 5000;
  const std::vector<const Codes*> items{&alone_a, &bad, &alone_b};
  queued = 0;
  std::map<size_t, std::vector<float>> out;
  why.clear();
  decode_batch(
      engine, 8, 2,
      [&](CodesItem& it) {
        if (queued == items.size()) return false;
        it = {queued, items[queued]};
        ++queued;
        return true;
      },
      [&](const CodesItem& it, const float* y, int64_t n) { out[it.id].insert(out[it.id].end(), y, y + n); },
      [](const CodesItem&) {},
      record_failure);
  CHECK(out.size() == 2);
  CHECK(out[0] == engine.decode(alone_a, 8));
  CHECK(out[2] == engine.decode(alone_b, 8));
  CHECK(why[1].find("outside") != std::string::npos);
}

TEST_CASE("batch gpu: tiny and full configs on the GPU") {
  const Device d = Device::parse(gpu_device_or_skip("the batch tests"));
  tiny_cases(d, nullptr);
  check_pipelined(d, nullptr);
  const Setup su{reference_model("full", Dialect::Moshi), d, nullptr};
  const int64_t fs = su.model->cfg.frame_size();
  check_batched(su, {2 * fs + 100, fs, 3 * fs + 1}, 8, 2, {2});
}
