// The eighteenth probe's findings (issue 26: ~136 situations, 4 BAD), each swept as the class it
// belongs to:
//   - workers started together on one output with other settings (--n-q, another plan): the check
//     of dataset.json and its writing are one step for all of them, and a live worker's settings
//     are never replaced under it (one of them is refused, exit 2; never two models in one output);
//   - a number computed from the user's numbers is checked before it becomes an int (a tiny
//     --shard-hours over a long corpus was one shard), and a time in a manifest is bounded (1e300
//     seconds was a key of INT64_MIN);
//   - an audio container that cannot hold the rate asked for is a usage error before the output
//     exists (exit 2), never libsndfile's "Format not recognised" (exit 5) after it was begun.
#include <doctest/doctest.h>
#include <signal.h>
#include <sndfile.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "app/dataset/dataset_json.h"
#include "app/dataset/plan.h"
#include "codec/error.h"
#include "support/cli.h"

using namespace mimi::test;
using nlohmann::json;

namespace {

json settings(int n_q, const std::string& plan = "p1", const std::string& weights = "w1") {
  return {{"format", "mimi-dataset"}, {"tool_version", MIMI_VERSION}, {"plan_sha256", plan}, {"n_q", n_q},
          {"weights_fingerprint", weights}, {"config_fingerprint", "c1"}, {"sample_rate", 24000},
          {"frame_rate", 12.5}, {"codebook_size", 2048}};
}

// A worker in another process that agreed with (or wrote) `want` and lives on until killed.
pid_t bound_worker(const std::string& out, const json& want) {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(p[0]);
    char ok = 'n';
    try {
      mimi::app::dataset::ensure_dataset_json(out, want);
      ok = 'y';
    } catch (...) {
    }
    if (::write(p[1], &ok, 1) != 1) ::_exit(1);
    while (true) ::pause();
  }
  ::close(p[1]);
  char ok = 0;
  REQUIRE(::read(p[0], &ok, 1) == 1);
  ::close(p[0]);
  REQUIRE(ok == 'y');
  return pid;
}

void end(pid_t pid) {
  ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
}

}  // namespace

TEST_CASE("classes: a live worker's dataset.json is never replaced under it; a dead one's that recorded nothing is") {
  Sandbox box("clsp18bind");
  // every setting that binds an output, changed one at a time, against a worker holding to the first
  const std::vector<std::pair<const char*, json>> other = {
      {"n_q", settings(4)}, {"plan", settings(8, "p2")}, {"weights", settings(8, "p1", "w2")}};
  int round = 0;
  for (const auto& [what, theirs] : other) {
    CAPTURE(what);
    const std::string out = (box / ("o" + std::to_string(round++))).string();
    fs::create_directories(out);
    const pid_t a = bound_worker(out, settings(8));
    // A second worker with other settings is refused while the first lives (it was replaced, and
    // the first went on recording under settings dataset.json no longer said).
    bool refused = false;
    try {
      mimi::app::dataset::ensure_dataset_json(out, theirs);
    } catch (const mimi::Error& e) {
      refused = true;
      CHECK((e.kind() == mimi::ErrorKind::Usage || e.kind() == mimi::ErrorKind::Weights));
    }
    CHECK(refused);
    CHECK(json::parse(slurp(fs::path(out) / "dataset.json")) == settings(8));
    // one with the same settings joins it
    CHECK_NOTHROW(mimi::app::dataset::ensure_dataset_json(out, settings(8)));
    end(a);
    // this process holds to it now (it agreed above): other settings are refused still
    CHECK_THROWS_AS(mimi::app::dataset::ensure_dataset_json(out, theirs), mimi::Error);
    CHECK(json::parse(slurp(fs::path(out) / "dataset.json")) == settings(8));
  }
  // Nobody alive holds it and nothing was recorded: the settings bind nothing and are replaced.
  const std::string out = (box / "dead").string();
  fs::create_directories(out);
  end(bound_worker(out, settings(8)));
  CHECK_NOTHROW(mimi::app::dataset::ensure_dataset_json(out, settings(4)));
  CHECK(json::parse(slurp(fs::path(out) / "dataset.json")).at("n_q") == 4);
}

TEST_CASE("classes: workers started together with other --n-q: one is refused, dataset.json says what every .done says") {
  Sandbox box("clsp18race");
  fs::create_directories(box / "c");
  for (int i = 0; i < 4; ++i)
    write_wav(box / ("c/u" + std::to_string(i) + ".wav"), tone(9600 + 2400 * i, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan c -o P --shards 2 -q").code == 0);
  std::mt19937 rng(test_seed());
  for (int round = 0; round < 6; ++round) {
    CAPTURE(round);
    const int qa = 8, qb = 1 + int(rng() % 7);  // (tiny: n_q 8)
    // both at once, each on its own shard; the one started second varies
    const std::string a = "mimi dataset encode --plan P --shard 0/2 -o o -q --n-q " + std::to_string(qa);
    const std::string b = "mimi dataset encode --plan P --shard 1/2 -o o -q --n-q " + std::to_string(qb);
    const std::string both = round % 2 ? "(" + a + "; echo A$? >> rc) & (" + b + "; echo B$? >> rc) & wait"
                                       : "(" + b + "; echo B$? >> rc) & (" + a + "; echo A$? >> rc) & wait";
    REQUIRE(box.sh("rm -rf o rc && mkdir o && { " + both + "; }").code == 0);
    const std::string rc = box.get("rc");
    CAPTURE(rc);
    const int ok = int(rc.find("A0") != std::string::npos) + int(rc.find("B0") != std::string::npos);
    CHECK(ok == 1);  // never both: the shards would hold codes of two n_q under one dataset.json
    CHECK(((rc.find("A2") != std::string::npos) || (rc.find("B2") != std::string::npos)));
    const int n_q = json::parse(box.get("o/dataset.json")).at("n_q").get<int>();
    for (const char* d : {"o/shards/shard-00000.done", "o/shards/shard-00001.done"})
      if (fs::exists(box / d)) CHECK(json::parse(box.get(d)).at("n_q").get<int>() == n_q);
    CHECK(box.sh("mimi dataset verify o -q").code == 3);  // (one shard is not done: not a damaged output)
  }
}

TEST_CASE("classes: numbers that become counts and keys are checked in range first") {
  Sandbox box("clsp18num");
  write_wav(box / "a.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  std::mt19937 rng(test_seed());
  // the shard count of --shard-hours: exact where it is 99999 or less, a usage error past it
  for (int k = 0; k < 10; ++k) {
    const double seconds = std::pow(10.0, 2 + int(rng() % 7));              // 1e2 .. 1e8 s
    const double hours = std::pow(10.0, -6 + int(rng() % 9));               // 1e-6 .. 1e2 h
    const double want = std::ceil(seconds / 3600.0 / hours - 1e-9);
    if (want > 50 && want <= 99999) continue;  // (a plan of many thousand shards: slow, and nothing new)
    CAPTURE(seconds);
    CAPTURE(hours);
    box.put("m.jsonl", "{\"path\":\"a.wav\",\"duration\":" + std::to_string(seconds) + "}\n");
    char h[64];
    std::snprintf(h, sizeof h, "%.17g", hours);
    const Run r = box.sh(std::string("rm -rf P && mimi dataset plan m.jsonl -o P -q --shard-hours ") + h);
    check_sane(r);
    if (want > 99999) {
      CHECK(r.code == 2);
      CHECK(r.err.find("more than 99999 shards") != std::string::npos);
    } else {
      CHECK(r.code == 0);
      CHECK(json::parse(box.get("P/plan.json")).at("shards").get<int>() == int(std::max(1.0, want)));
    }
  }
  // A time in a manifest, as a number or as text, in every field: in range, or said to be out of it.
  for (const char* field : {"start", "end", "duration", "offset"}) {
    for (const std::string& v : {std::string("1e300"), std::string("1e19"), std::string("9.3e15"), std::string("1000000001"),
                                 std::string("\"1e30\""), std::string("\"99999999999999999999\"")}) {
      CAPTURE(field);
      CAPTURE(v);
      box.put("m.jsonl", std::string("{\"path\":\"a.wav\",\"") + field + "\":" + v + "}\n");
      const Run r = box.sh("rm -rf P && mimi dataset plan m.jsonl -o P -q --shards 1");
      check_sane(r);
      CHECK(r.code == 3);
      CHECK(r.err.find("out of range") != std::string::npos);
    }
  }
  box.put("segments", "u1 a 0 1e300\nu2 a 1e19 -1\n");
  box.put("wav.scp", "a a.wav\n");
  const Run seg = box.sh("rm -rf P && mimi dataset plan wav.scp segments -o P -q --shards 1");
  CHECK(seg.code == 3);
  CHECK(seg.err.find("out of range") != std::string::npos);
  // the largest time allowed plans (its key is its milliseconds, not INT64_MIN; a file not there
  // yet is planned, its length unknown)
  box.put("m.jsonl", "{\"path\":\"later.wav\",\"start\":0.5,\"end\":1000000000}\n");
  REQUIRE(box.sh("rm -rf P && mimi dataset plan m.jsonl -o P -q --shards 1").code == 0);
  CHECK(box.sh("grep -c '\"later_500-1000000000000\"' P/shard-00000.jsonl").out == "1\n");
}

TEST_CASE("classes: an audio container is asked only for rates it can hold; the others are exit 2 before the output exists") {
  Sandbox box("clsp18rate");
  write_wav(box / "a.wav", tone(12000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode a.wav -o a.mimi -q").code == 0);
  std::mt19937 rng(test_seed());
  std::vector<int> rates = {1000, 65535, 65536, 65540, 199999, 200000, 200001, 255999, 256000, 655350, 655351, 768000};
  for (int k = 0; k < 10; ++k) rates.push_back(1000 + int(rng() % 767001));
  for (const int rate : rates) {
    for (const char* ext : {"wav", "flac", "ogg"}) {
      CAPTURE(rate);
      CAPTURE(ext);
      const Run r = box.sh("rm -f o." + std::string(ext) + " && mimi decode a.mimi -o o." + ext + " -q --sample-rate " +
                           std::to_string(rate));
      check_sane(r);
      CHECK((r.code == 0 || r.code == 2));
      if (r.code == 2) {
        CHECK(r.err.find("cannot hold") != std::string::npos);
        CHECK(!fs::exists(box / ("o." + std::string(ext))));
        CHECK(box.sh("ls -A | grep -c mimi-tmp").out == "0\n");
      } else {
        WavInfo info;
        REQUIRE(audio_opens(box / ("o." + std::string(ext)), &info));
        CHECK(info.rate == rate);
      }
    }
  }
}

TEST_CASE("classes: --shard I/N is digits, a slash and digits; any other spelling of a number is refused") {
  const mimi::app::dataset::EnvLookup none = [](const char*) -> std::optional<std::string> { return std::nullopt; };
  std::mt19937 rng(test_seed());
  for (int k = 0; k < 40; ++k) {
    const int n = 1 + int(rng() % 50), i = int(rng() % n);
    CHECK(mimi::app::dataset::resolve_shard(std::to_string(i) + "/" + std::to_string(n), n, none) == i);
    CHECK(mimi::app::dataset::resolve_shard("0" + std::to_string(i) + "/" + std::to_string(n), n, none) == i);
    for (const char* dec : {"-", "+", " ", "\t", "0x", "\xef\xbc\x91"}) {  // (the last: a fullwidth digit)
      const std::string I = std::to_string(i), N = std::to_string(n);
      for (const std::string& spec : {dec + I + "/" + N, I + "/" + dec + N, I + dec + "/" + N, I + "/" + N + dec}) {
        CAPTURE(spec);
        CHECK_THROWS_AS(mimi::app::dataset::resolve_shard(spec, n, none), mimi::Error);
      }
    }
  }
}
