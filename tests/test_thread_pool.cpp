// The CPU kernels' worker teams (kernels/cpu/thread_pool.h): every chunk exactly once, for any
// chunk and thread count (degenerate ones too); nested loops inline; an exception reaches the
// caller and the team goes on; several callers at once, each with its own team; a child of
// fork() runs loops; idle workers sleep. Also run under ThreadSanitizer (scripts/test-tsan.sh).
// No timing here.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/threads.h"

using namespace mimi::cpu;

namespace {

// Runs run_parallel(chunks, threads) and returns how often each chunk ran.
std::vector<int> counts(int64_t chunks, int threads) {
  std::vector<std::atomic<int>> seen(size_t(std::max<int64_t>(chunks, 0)));
  auto body = [&](int64_t c) { seen[size_t(c)].fetch_add(1); };
  run_parallel(chunks, threads, ChunkFn(body));
  std::vector<int> out;
  for (auto& s : seen) out.push_back(s.load());
  return out;
}

// The state letter of a thread of this process (/proc/self/task/TID/stat, 3rd field).
char thread_state(const std::string& tid) {
  std::ifstream f("/proc/self/task/" + tid + "/stat");
  std::string line;
  std::getline(f, line);
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

// The thread ids of this process's pool workers (named mimi-worker).
std::vector<std::string> worker_tids() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    const std::string tid = e.path().filename().string();
    std::ifstream comm("/proc/self/task/" + tid + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name == "mimi-worker") out.push_back(tid);
  }
  return out;
}

}  // namespace

TEST_CASE("thread pool: every chunk runs exactly once, any chunk and thread count") {
  for (int threads : {0, 1, 2, 3, 4, 8, 33})
    for (int64_t chunks : {0, 1, 2, 3, 7, 64, 1000}) {
      CAPTURE(threads);
      CAPTURE(chunks);
      const std::vector<int> c = counts(chunks, threads);
      for (size_t i = 0; i < c.size(); ++i) REQUIRE(c[i] == 1);
    }
  CHECK(counts(-5, 4).empty());
}

TEST_CASE("thread pool: the same team serves many loops in a row") {
  for (int rep = 0; rep < 2000; ++rep) {
    std::atomic<int64_t> sum{0};
    auto body = [&](int64_t c) { sum.fetch_add(c + 1); };
    run_parallel(17, 3, ChunkFn(body));
    REQUIRE(sum.load() == 17 * 18 / 2);
  }
  CHECK(team_workers() >= 2);
}

TEST_CASE("thread pool: parallel_for covers [0, n) in grain-sized pieces") {
  set_num_threads(3);
  for (int64_t n : {1, 5, 100, 1023})
    for (int64_t grain : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hit(static_cast<size_t>(n));
      parallel_for(n, grain, [&](int64_t b, int64_t e) {
        REQUIRE(b < e);
        for (int64_t i = b; i < e; ++i) hit[size_t(i)].fetch_add(1);
      });
      for (auto& h : hit) REQUIRE(h.load() == 1);
    }
  set_num_threads(0);
}

TEST_CASE("thread pool: a loop inside a chunk runs inline, on that chunk's thread") {
  std::atomic<int> inner_total{0}, foreign{0};
  auto outer = [&](int64_t) {
    const auto me = std::this_thread::get_id();
    auto inner = [&](int64_t) {
      inner_total.fetch_add(1);
      if (std::this_thread::get_id() != me) foreign.fetch_add(1);
    };
    run_parallel(10, 4, ChunkFn(inner));
  };
  run_parallel(8, 4, ChunkFn(outer));
  CHECK(inner_total.load() == 80);
  CHECK(foreign.load() == 0);
}

TEST_CASE("thread pool: an exception reaches the caller; the team goes on") {
  for (int threads : {1, 2, 4}) {
    CAPTURE(threads);
    std::atomic<int> ran{0};
    auto body = [&](int64_t c) {
      ran.fetch_add(1);
      if (c == 5) throw std::runtime_error("chunk 5");
    };
    CHECK_THROWS_WITH_AS(run_parallel(50, threads, ChunkFn(body)), "chunk 5", std::runtime_error);
    CHECK(ran.load() >= 6);  // the chunks before the throw, at least (the rest may be skipped)
    const std::vector<int> c = counts(40, threads);
    for (int v : c) CHECK(v == 1);
  }
}

TEST_CASE("thread pool: an exception thrown on a worker reaches the caller") {
  // chunks throw only off the caller's thread, and last a little, so that workers take some
  const auto caller = std::this_thread::get_id();
  int from_worker = 0;
  for (int attempt = 0; attempt < 50 && from_worker == 0; ++attempt) {
    auto body = [&](int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (std::this_thread::get_id() != caller) throw std::runtime_error("worker");
    };
    try {
      run_parallel(64, 2, ChunkFn(body));
    } catch (const std::runtime_error& e) {
      if (std::string(e.what()) == "worker") ++from_worker;
    }
  }
  CHECK(from_worker == 1);
}

TEST_CASE("thread pool: the call returns only once every chunk has finished") {
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<std::atomic<int>> done(16);
    auto body = [&](int64_t c) {
      std::this_thread::sleep_for(std::chrono::microseconds(500 * (c % 4)));
      done[size_t(c)].store(1);
    };
    run_parallel(16, 3, ChunkFn(body));
    for (auto& d : done) REQUIRE(d.load() == 1);
  }
}

TEST_CASE("thread pool: several callers at once, each with its own team") {
  std::vector<std::thread> callers;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&bad, t] {
      for (int rep = 0; rep < 300; ++rep) {
        std::vector<int> c = counts(13 + t, 3);
        for (int v : c)
          if (v != 1) bad.fetch_add(1);
      }
      if (team_workers() < 1) bad.fetch_add(1000);
    });
  for (auto& c : callers) c.join();  // each caller's team is stopped and joined at its exit
  CHECK(bad.load() == 0);
}

TEST_CASE("thread pool: a child of fork() runs loops on a team of its own") {
#if defined(__SANITIZE_THREAD__)
  return;  // ThreadSanitizer ends a child that starts threads after a multi-threaded fork
#endif
  const std::vector<int> before = counts(64, 4);  // the parent's team exists and has workers
  REQUIRE(team_workers() >= 1);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // the parent's workers do not exist here: the child must start workers of its own (with the
    // parent's team reused, the caller would do every chunk alone and no thread would appear)
    const std::vector<int> c = counts(64, 4);
    bool ok = c.size() == 64;
    for (int v : c) ok = ok && v == 1;
    int threads = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++threads;
    _exit(!ok ? 1 : threads < 2 ? 2 : 0);
  }
  int status = 0;
  for (int waited = 0; waited < 300 && waitpid(pid, &status, WNOHANG) == 0; ++waited)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (waitpid(pid, &status, WNOHANG) == 0) {  // still running after 30 s: hung
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL("the child of fork() hung in a parallel loop");
  }
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(counts(64, 4).size() == 64);  // and the parent's team still works
}

TEST_CASE("thread pool: idle workers sleep (they do not spin forever)") {
  auto nothing = [](int64_t) {};
  run_parallel(8, 3, ChunkFn(nothing));  // make sure the team exists
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // far past the spin bound
  // every worker of this process's teams: named mimi-worker; all should be asleep ('S')
  int workers = 0, awake = 0;
  for (int tries = 0; tries < 20; ++tries) {
    workers = awake = 0;
    for (const std::string& tid : worker_tids()) {
      ++workers;
      if (thread_state(tid) == 'R') ++awake;
    }
    if (awake == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(workers >= 2);
  CHECK(awake == 0);
}

TEST_CASE("thread pool: workers take no asynchronous signals, and the synchronous ones stay open") {
  auto nothing = [](int64_t) {};
  run_parallel(8, 3, ChunkFn(nothing));
  int workers = 0;
  for (const std::string& tid : worker_tids()) {
    ++workers;
    std::ifstream status("/proc/self/task/" + tid + "/status");
    unsigned long long blocked = 0;
    for (std::string line; std::getline(status, line);)
      if (line.rfind("SigBlk:", 0) == 0) blocked = std::stoull(line.substr(7), nullptr, 16);
    const auto is_blocked = [&](int sig) { return (blocked >> (sig - 1)) & 1; };
    CAPTURE(tid);
    CHECK(is_blocked(SIGINT));
    CHECK(is_blocked(SIGTERM));
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) CHECK_FALSE(is_blocked(sig));
  }
  CHECK(workers >= 2);
}
