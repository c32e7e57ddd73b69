// The open-file limit against --batch (issue B4 of the fourth probe): `--batch N` sizes its slots
// to what `ulimit -n` holds (app/sys/file_io.cpp, batch_slots). A slot of the pipelined batch runners
// holds up to two items open (the one being read and the one whose last step is still in flight);
// counting one per slot opened twice the limit's worth of inputs, so every run (and every rerun of
// a requeued dataset task) failed with EMFILE, exit 75 "run again", without progress.
// Swept: ulimit -n 16..128 (step 12) x --batch {8, 32, 200} x {encode of 40 inputs, dataset
// encode of a 40-item plan}. Every outcome is 0 with the outputs of the one-by-one run, or a
// failure that is not a loop: a 75 must be followed by reruns (same limit) that make progress.
#include <doctest/doctest.h>
#include <sndfile.h>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "support/cli.h"

using namespace mimi::test;

namespace {

std::vector<float> sine(double hz, int64_t frames, int rate) {
  std::vector<float> v(static_cast<size_t>(frames));
  for (int64_t i = 0; i < frames; ++i) v[size_t(i)] = float(0.3 * std::sin(2 * M_PI * hz * double(i) / rate));
  return v;
}

// The files of a listing whose names end with `ext` (path -> entry).
Listing only(const Listing& l, const std::string& ext) {
  Listing r;
  for (const auto& [p, e] : l)
    if (p.size() >= ext.size() && p.compare(p.size() - ext.size(), ext.size(), ext) == 0) r[p] = e;
  return r;
}

// Lines of a file (0 when absent): the dataset journal's progress.
size_t lines_of(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return 0;
  const std::string s = slurp(p);
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

constexpr int kItems = 40;

}  // namespace

TEST_CASE("classes: --batch under every open-file limit completes or fails without a loop") {
  Sandbox box("clsfds");
  std::string list;
  std::string files;
  for (int i = 0; i < kItems; ++i) {
    const std::string name = "in/a" + std::to_string(100 + i) + ".wav";
    fs::create_directories(box / "in");
    // 0.1 .. 0.3 s, so that items end in different steps
    write_wav(box / name, sine(200 + 7 * i, 2400 + 240 * (i % 21), 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
    list += name + "\n";
    files += " " + name;
  }
  box.put("list.txt", list);
  REQUIRE(box.sh("mimi dataset plan list.txt -o plan --shards 1 -q").code == 0);
  // the references: one by one, no limit
  REQUIRE(box.sh("mimi encode" + files + " -o ref/ -q").code == 0);
  REQUIRE(box.sh("mimi dataset encode --plan plan --shard 0/1 -o dref -q").code == 0);
  const Listing ref = only(list_tree(box / "ref"), ".mimi");
  REQUIRE(ref.size() == size_t(kItems));
  const Listing dref = list_tree(box / "dref");
  const std::vector<std::string> dfiles = {"shards/shard-00000.tar", "shards/shard-00000.index.jsonl",
                                           "shards/shard-00000.errors.jsonl"};
  for (const std::string& f : dfiles) REQUIRE(dref.count(f) == 1);

  for (int limit = 16; limit <= 128; limit += 12) {
    for (int batch : {8, 32, 200}) {
      const std::string lim = "ulimit -n " + std::to_string(limit) + "; ";
      const std::string b = " --batch " + std::to_string(batch);
      // encode: -f so that a rerun redoes what the last one wrote
      {
        CAPTURE(limit);
        CAPTURE(batch);
        const std::string cmd = lim + "mimi encode" + files + " -o e/ -f -q" + b;
        REQUIRE(box.sh("rm -rf e").code == 0);
        Run r = box.sh(cmd);
        check_sane(r);
        size_t made = only(list_tree(box / "e"), ".mimi").size();
        for (int again = 0; r.code == 75 && again < 3; ++again) {  // "run again": it must get further
          Run r2 = box.sh(cmd);
          check_sane(r2);
          const size_t made2 = only(list_tree(box / "e"), ".mimi").size();
          CHECK_MESSAGE((r2.code == 0 || made2 > made), "encode: exit 75 again without progress (", made2,
                        " outputs): ", r2.err);
          if (r2.code != 0 && made2 <= made) break;
          r = r2;
          made = made2;
        }
        if (r.code == 0) {
          CHECK_MESSAGE(only(list_tree(box / "e"), ".mimi") == ref, "encode outputs differ from one by one");
        } else {
          CHECK_MESSAGE(r.code != 75, "encode: still 75 after reruns: ", r.err);
          CHECK_MESSAGE(contains_ci(r.err, "open-file limit"), "a failure that does not name the limit: ", r.code,
                        " ", r.err);
        }
      }
      // dataset encode: a requeued task reruns in place
      {
        CAPTURE(limit);
        CAPTURE(batch);
        const std::string cmd = lim + "mimi dataset encode --plan plan --shard 0/1 -o d -q" + b;
        REQUIRE(box.sh("rm -rf d").code == 0);
        Run r = box.sh(cmd);
        check_sane(r);
        size_t journal = lines_of(box / "d/shards/shard-00000.journal");
        for (int again = 0; r.code == 75 && again < 3; ++again) {
          Run r2 = box.sh(cmd);
          check_sane(r2);
          const size_t j2 = lines_of(box / "d/shards/shard-00000.journal");
          CHECK_MESSAGE((r2.code == 0 || j2 > journal), "dataset encode: exit 75 again at journal ", j2, ": ", r2.err);
          if (r2.code != 0 && j2 <= journal) break;
          r = r2;
          journal = j2;
        }
        if (r.code == 0) {
          const Listing got = list_tree(box / "d");
          for (const std::string& f : dfiles) {
            CAPTURE(f);
            CHECK((got.count(f) == 1 && got.at(f) == dref.at(f)));
          }
        } else {
          CHECK_MESSAGE(r.code != 75, "dataset encode: still 75 after reruns: ", r.err);
          CHECK_MESSAGE(contains_ci(r.err, "open-file limit"), "a failure that does not name the limit: ", r.code,
                        " ", r.err);
        }
      }
    }
  }
}

// Whether a one-by-one dataset run fits a tight `ulimit -n` was decided by how its two threads
// interleaved: the item read ahead (and the reader's own count of /proc/self/fd) opened while the
// writer recorded the previous item, and at the limit one of them got EMFILE (exit 75): on some
// tries only where items read fast (up to 1 in 2 with the machine busy), on every try where they
// read slowly. Now each limit gives one outcome, the same for items that read fast (WAV at the
// model's rate) or slowly (FLAC, stereo, 44.1 kHz: decoded and resampled, so that the reader still
// holds the next one open while the writer records the last), on every try with both cores kept
// busy by this process, with the same bytes as an unlimited run.
TEST_CASE("classes: a dataset run under a tight open-file limit has one outcome per limit, however busy the machine") {
  Sandbox box("clsfdsdet");
  for (int i = 0; i < 4; ++i) {
    fs::create_directories(box / "fast");
    fs::create_directories(box / "slow");
    write_wav(box / ("fast/x" + std::to_string(i) + ".wav"), sine(300 + 50 * i, 4800 * (i + 1), 24000), 24000, 1,
              SF_FORMAT_WAV | SF_FORMAT_PCM_16);
    std::vector<float> st;
    for (float v : sine(300 + 50 * i, 44100 * (2 + i), 44100)) st.insert(st.end(), {v, -v});
    write_wav(box / ("slow/x" + std::to_string(i) + ".flac"), st, 44100, 2, SF_FORMAT_FLAC | SF_FORMAT_PCM_16);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> load;
  for (int t = 0; t < 2; ++t)
    load.emplace_back([&] {
      volatile double x = 1;
      while (!stop.load(std::memory_order_relaxed)) x = x * 1.0000001 + 1e-9;
    });
  int lowest_ok[2] = {0, 0};
  for (const int kind : {0, 1}) {
    const std::string dir = kind == 0 ? "fast" : "slow";
    REQUIRE(box.sh("rm -rf p ref; mimi dataset plan " + dir + " -o p --shards 1 -q && mimi dataset encode --plan p --shard 0/1 -o ref -q").code == 0);
    const std::string want = box.get("ref/shards/shard-00000.tar");
    for (int n = 5; n <= 12 && lowest_ok[kind] == 0; ++n)
      for (const char* batch : {"", " --batch 3"}) {
        int first = -1;
        for (int attempt = 0; attempt < 8; ++attempt) {
          const Run r = box.sh("rm -rf o; (ulimit -n " + std::to_string(n) +
                               "; mimi dataset encode --plan p --shard 0/1 -o o -q" + batch + ")");
          CAPTURE(dir);
          CAPTURE(n);
          CAPTURE(batch);
          CAPTURE(attempt);
          if (first < 0) first = r.code;
          CHECK_MESSAGE(r.code == first, r.err);
          CHECK((r.code == 0 || r.code == 75));
          if (r.code == 0) CHECK(box.get("o/shards/shard-00000.tar") == want);
        }
        if (first == 0 && *batch == 0) lowest_ok[kind] = n;
      }
  }
  stop = true;
  for (std::thread& t : load) t.join();
  CHECK(lowest_ok[0] > 5);  // the sweep started below what the run needs, and reached it
  CHECK(lowest_ok[0] == lowest_ok[1]);
}
