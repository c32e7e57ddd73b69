// Engine behaviour around the golden numbers: frame counts, argument errors, the plan cache,
// determinism, codebook prefixes, and devices that are asked for but missing.
#include <doctest/doctest.h>

#include <cmath>

#include "codec/error.h"
#include "support/golden.h"

using namespace mimi;
using namespace mimi::test;

namespace {

std::vector<float> tone(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = 0.3f * std::sin(0.01f * float(i)) + 0.05f * std::sin(0.37f * float(i));
  return v;
}

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  FAIL("expected an Error");
  return ErrorKind::Internal;
}

}  // namespace

TEST_CASE("engine: frame count is ceil(T / 1920), output is 1920 F samples") {
  Engine engine(reference_model("tiny", Dialect::Moshi));
  for (auto [T, F] : {std::pair<int64_t, int64_t>{1, 1}, {1919, 1}, {1920, 1}, {1921, 2}, {48123, 26}}) {
    CAPTURE(T);
    const auto pcm = tone(T);
    const Codes c = engine.encode(pcm.data(), T, 8);
    CHECK(c.frames == F);
    CHECK(c.n_q == 8);
    CHECK(c.data.size() == size_t(8 * F));
    CHECK(engine.decode(c).size() == size_t(1920 * F));
  }
}

TEST_CASE("engine: argument errors are errors, not crashes") {
  Engine engine(reference_model("tiny", Dialect::Moshi));
  const auto pcm = tone(4000);
  CHECK(kind_of([&] { engine.encode(pcm.data(), 0, 8); }) == ErrorKind::Usage);
  CHECK(kind_of([&] { engine.encode(pcm.data(), 4000, 0); }) == ErrorKind::Usage);
  CHECK(kind_of([&] { engine.encode(pcm.data(), 4000, 9); }) == ErrorKind::Usage);
  Codes c = engine.encode(pcm.data(), 4000, 4);
  CHECK(kind_of([&] { engine.decode(c, 5); }) == ErrorKind::Usage);
  c.data[3] = 64;  // bins = 64
  CHECK(kind_of([&] { engine.decode(c); }) == ErrorKind::Input);
  c.data[3] = -1;
  CHECK(kind_of([&] { engine.decode(c); }) == ErrorKind::Input);
  CHECK(kind_of([] { Device::parse("tpu"); }) == ErrorKind::Usage);
  CHECK(kind_of([] { Device::parse("cpu:1"); }) == ErrorKind::Usage);
}

TEST_CASE("engine: a device that is asked for and missing is an error") {
  // Index 63 exists on no machine (an emulated or a real GPU build has devices 0..n-1).
  EngineOptions opts;
  opts.device = Device::parse("cuda:63");
  CHECK(kind_of([&] { Engine e(reference_model("tiny", Dialect::Moshi), opts); }) == ErrorKind::Device);
  opts.device = Device::parse("hip:63");
  CHECK(kind_of([&] { Engine e(reference_model("tiny", Dialect::Moshi), opts); }) == ErrorKind::Device);
}

TEST_CASE("engine: fewer codebooks encode to the first rows, decode from the first rows") {
  Engine engine(reference_model("tiny", Dialect::Moshi));
  const auto pcm = tone(30000);
  const Codes all = engine.encode(pcm.data(), 30000, 8);
  for (int n : {1, 4, 7}) {
    const Codes some = engine.encode(pcm.data(), 30000, n);
    CHECK(std::equal(some.data.begin(), some.data.end(), all.data.begin()));
    CHECK(engine.decode(all, n) == engine.decode(some));
  }
}

TEST_CASE("plans: repeated runs are bit-identical; the cache is bounded and can be off") {
  EngineOptions opts;
  opts.plan_cache_capacity = 2;
  opts.with_chunk_frames(0);  // one plan per signal length, so lengths exercise the cache
  Engine engine(reference_model("tiny", Dialect::Moshi), opts);
  const auto a = tone(5000), b = tone(9000), c = tone(13000);
  const Codes first = engine.encode(a.data(), 5000, 8);
  CHECK(engine.encode_cache().misses() == 1);
  CHECK(engine.encode(a.data(), 5000, 8).data == first.data);  // same plan, run again
  CHECK(engine.encode_cache().hits() == 1);
  engine.encode(b.data(), 9000, 8);
  engine.encode(c.data(), 13000, 8);  // 3 lengths, capacity 2: the oldest goes
  CHECK(engine.encode_cache().size() == 2);
  CHECK(engine.encode(a.data(), 5000, 8).data == first.data);  // rebuilt, same result
  CHECK(engine.encode_cache().misses() == 4);
  engine.encode(a.data(), 5000, 4);  // n_q is part of the key
  CHECK(engine.encode_cache().misses() == 5);

  EngineOptions off;
  off.plan_cache_capacity = 0;
  off.with_chunk_frames(0);  // same chunking as `engine`: only the caching differs
  Engine uncached(reference_model("tiny", Dialect::Moshi), off);
  CHECK(uncached.encode(a.data(), 5000, 8).data == first.data);
  CHECK(uncached.encode(a.data(), 5000, 8).data == first.data);
  CHECK(uncached.encode_cache().hits() == 0);
  CHECK(uncached.encode_cache().size() <= 1);
  const auto out1 = uncached.decode(first), out2 = engine.decode(first);
  CHECK(out1 == out2);
}

TEST_CASE("engine: chunked encoding and incremental feeding give the one-chunk result") {
  EngineOptions whole;
  whole.with_chunk_frames(0);
  Engine ref(reference_model("tiny-window", Dialect::Moshi), whole);
  const auto pcm = tone(100000);
  const Codes expect = ref.encode(pcm.data(), 100000, 8);
  for (int64_t chunk : {1, 3, 64}) {
    EngineOptions eo;
    eo.with_chunk_frames(chunk);
    Engine e(reference_model("tiny-window", Dialect::Moshi), eo);
    CHECK(e.encode(pcm.data(), 100000, 8).data == expect.data);
    EncoderSession s(e, 8);
    for (int64_t i = 0; i < 100000; i += 777) s.feed(pcm.data() + i, std::min<int64_t>(777, 100000 - i));
    CHECK(s.finish().data == expect.data);
    CHECK(e.encode_cache().size() == 1);  // one plan (chunk length) for every input length
  }
}

TEST_CASE("plans: the naive reference device agrees with the CPU backend") {
  EngineOptions ro;
  ro.device = Device::parse("ref");
  Engine ref(reference_model("tiny-window", Dialect::Moshi), ro);
  Engine cpu(reference_model("tiny-window", Dialect::Moshi));
  const auto pcm = tone(20000);
  const Codes a = ref.encode(pcm.data(), 20000, 8), b = cpu.encode(pcm.data(), 20000, 8);
  CHECK(a.data == b.data);
  const auto ya = ref.decode(a), yb = cpu.decode(a);
  double mx = 0, diff = 0;
  for (size_t i = 0; i < ya.size(); ++i) {
    mx = std::max(mx, double(std::fabs(ya[i])));
    diff = std::max(diff, double(std::fabs(ya[i] - yb[i])));
  }
  CHECK(diff <= 1e-4 * mx + 1e-5);
}
