// app/engine_io/read_ahead.h: what a slot reads through ReadAhead is exactly what the source gave, in
// order, with any read sizes and pool sizes; a source's exception arrives after the samples
// before it; the next chunk is read while nobody asks (that is its point); and an input dropped
// with a fetch in flight waits for it.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "app/engine_io/read_ahead.h"

using mimi::app::ReadAhead;
using mimi::app::ReaderPool;

namespace {

// A source of `total` samples (sample i = i) in blocks of 0..max_block (empty blocks included, as
// a resampler filling up gives); throws at `fail_at` samples when set.
struct FakeSource {
  int64_t total, max_block, fail_at = -1;
  std::atomic<int64_t> given{0};  // read by the test while a reader thread works
  std::atomic<int> calls{0};
  std::atomic<bool> inside{false};  // a call of next() is running
  uint64_t rng = 12345;
  std::chrono::milliseconds delay{0};
  bool next(std::vector<float>& b) {
    ++calls;
    inside = true;
    if (delay.count()) std::this_thread::sleep_for(delay);
    inside = false;
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    int64_t n = int64_t(rng >> 33) % (max_block + 1);
    n = std::min<int64_t>(n, total - given);
    if (fail_at >= 0 && given + n > fail_at) {
      for (int64_t i = given; i < fail_at; ++i) b.push_back(float(i));
      given = fail_at;
      if (!b.empty()) return true;  // the samples before the failure first
      throw std::runtime_error("disk on fire at " + std::to_string(fail_at));
    }
    for (int64_t i = 0; i < n; ++i) b.push_back(float(given + i));
    given += n;
    return given < total;
  }
};

ReadAhead::Next of(FakeSource& s) {
  return [&s](std::vector<float>& b) { return s.next(b); };
}

}  // namespace

TEST_CASE("read ahead: the source's samples in order, for any read size and pool") {
  for (int threads : {0, 1, 3})
    for (int64_t ahead : {1, 100, 5000})
      for (int64_t max_block : {1, 37, 4096}) {
        CAPTURE(threads); CAPTURE(ahead); CAPTURE(max_block);
        ReaderPool pool(threads);
        FakeSource src{10007, max_block};
        std::vector<float> got;
        {
          ReadAhead ra(of(src), pool, ahead);
          uint64_t r = 99;
          std::vector<float> buf(3000);
          for (;;) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            const int64_t n = 1 + int64_t(r >> 33) % 2999;
            const int64_t k = ra.read(buf.data(), n);
            REQUIRE(k >= 0);
            REQUIRE(k <= n);
            if (k == 0) break;
            got.insert(got.end(), buf.begin(), buf.begin() + k);
          }
          CHECK(ra.read(buf.data(), 10) == 0);  // and 0 again after the end
        }
        REQUIRE(got.size() == 10007);
        bool in_order = true;
        for (size_t i = 0; i < got.size(); ++i) in_order = in_order && got[i] == float(i);
        CHECK(in_order);
      }
}

TEST_CASE("read ahead: a source's exception comes after the samples before it") {
  for (int threads : {0, 2}) {
    CAPTURE(threads);
    ReaderPool pool(threads);
    FakeSource src{10000, 300, 2500};
    ReadAhead ra(of(src), pool, 1000);
    std::vector<float> buf(700);
    int64_t total = 0;
    bool threw = false;
    try {
      for (;;) {
        const int64_t k = ra.read(buf.data(), 700);
        for (int64_t i = 0; i < k; ++i) REQUIRE(buf[size_t(i)] == float(total + i));
        total += k;
        REQUIRE(k > 0);
      }
    } catch (const std::runtime_error& e) {
      threw = std::string(e.what()).find("disk on fire") != std::string::npos;
    }
    CHECK(threw);
    CHECK(total == 2500);
    CHECK_THROWS_AS(ra.read(buf.data(), 1), std::runtime_error);  // and again
  }
}

TEST_CASE("read ahead: the next chunk is read while the reader computes") {
  ReaderPool pool(1);
  FakeSource src{1000000, 100};
  ReadAhead ra(of(src), pool, 5000);
  std::vector<float> buf(10);
  REQUIRE(ra.read(buf.data(), 10) > 0);
  // nobody reads now; the pool fills up to 5000 samples ahead (blocks of <= 100: >= 50 calls)
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (src.calls < 50 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(src.calls >= 50);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(src.given <= 5000 + 10 + 100);  // and no further: memory stays bounded per input
}

TEST_CASE("read ahead: an input dropped with a fetch in flight waits for it") {
  ReaderPool pool(2);
  for (int i = 0; i < 5; ++i) {
    FakeSource src{100000, 50};
    src.delay = std::chrono::milliseconds(20);
    auto ra = std::make_unique<ReadAhead>(of(src), pool, 100000);
    std::vector<float> buf(10);
    ra->read(buf.data(), 10);
    // the next fetch is under way (scheduled as the read returned; fetches follow each other)
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!src.inside && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    REQUIRE(src.inside);
    ra.reset();           // it still uses src: the destructor must wait for it
    CHECK_FALSE(src.inside);
    const int calls = src.calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    CHECK(src.calls == calls);  // and nothing ran after the destructor returned
  }
}
