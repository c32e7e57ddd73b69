// The twentieth probe's findings (issue 26: 201 situations, 7 BAD), each swept as the class it
// belongs to:
//   - a prepared-weights entry that is not a regular file (a FIFO: every run hung) is passed over;
//   - two `dataset plan` runs into one folder: one plan is made, the other refused (both exited 0
//     and their shard files mixed);
//   - every count a journal record carries is held to the item's own members in the tar on
//     resume (a samples value edited went into the index and .done);
//   - a segment with no sample at its file's rate is a bad entry at plan time (the worker said it
//     began past the end of the audio);
//   - the same bytes give the same outcome by file and through a pipe: what follows a WAV's data
//     chunk, and what follows a .mimi's end record in --stream, are judged as the file readers
//     judge them;
//   - an output is never derived beside an input that is not a file (/dev/stdin wrote
//     /dev/stdin.mimi).
#include <doctest/doctest.h>
#include <sndfile.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "support/cli.h"

using namespace mimi::test;
using nlohmann::json;

TEST_CASE("classes: a prepared-weights entry that is not a regular file is passed over, never waited on") {
  Sandbox box("clsp20fifo");
  write_wav(box / "a.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mkdir w && mimi gen-weights --config tiny -o w/m.safetensors -q && sleep 0.15").code == 0);
  REQUIRE(box.sh("mimi encode a.wav -o ref.mimi -q --no-cache --weights w/m.safetensors").code == 0);
  REQUIRE(box.sh("MIMI_CACHE_DIR=$PWD/learn mimi encode a.wav -o x.mimi -f -q --weights w/m.safetensors").code == 0);
  const std::string key = box.sh("ls learn").out.substr(0, box.sh("ls learn").out.size() - 1);
  REQUIRE(key.rfind("weights-", 0) == 0);
  for (const std::string& make : {"mkfifo c/" + key, "mkdir c/" + key, "ln -s ../learn/" + key + " c/" + key,
                                  "ln -s /dev/zero c/" + key, "ln -s c/" + key + " c/" + key}) {
    CAPTURE(make);
    REQUIRE(box.sh("rm -rf c && mkdir c && " + make).code == 0);
    const Run r = box.sh("MIMI_CACHE_DIR=$PWD/c mimi encode a.wav -o y.mimi -f -q --weights w/m.safetensors", 30);
    check_sane(r);
    CHECK(r.code == 0);
    CHECK(box.get("y.mimi") == box.get("ref.mimi"));
  }
}

TEST_CASE("classes: plans made at once into one folder: one is made whole, the other refused") {
  Sandbox box("clsp20plan");
  fs::create_directories(box / "c");
  for (int i = 0; i < 24; ++i)
    write_wav(box / ("c/u" + std::to_string(i) + ".wav"), tone(2400 * (1 + i % 5), 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  std::mt19937 rng(test_seed());
  for (int round = 0; round < 8; ++round) {
    CAPTURE(round);
    const int a = 2 + int(rng() % 3), b = 5 + int(rng() % 3);
    const std::string pa = "mimi dataset plan c -o P -q --shards " + std::to_string(a);
    const std::string pb = "mimi dataset plan c -o P -q --shards " + std::to_string(b);
    REQUIRE(box.sh("rm -rf P rc && { (" + pa + "; echo A$? >> rc) & (" + pb + "; echo B$? >> rc) & wait; }").code == 0);
    const std::string rc = box.get("rc");
    CAPTURE(rc);
    CHECK(int(rc.find("A0") != std::string::npos) + int(rc.find("B0") != std::string::npos) == 1);
    const json plan = json::parse(box.get("P/plan.json"));
    const int n = plan.at("shards").get<int>();
    CHECK((n == a || n == b));
    CHECK(box.sh("ls P | grep -c '^shard-'").out == std::to_string(n) + "\n");
    for (int s = 0; s < n; ++s) {  // every shard file is the plan's own (a worker takes it)
      char name[32];
      std::snprintf(name, sizeof name, "P/shard-%05d.jsonl", s);
      const std::string text = box.get(name);
      CHECK(box.sh("sha256sum " + std::string(name) + " | cut -c1-64").out == plan.at("shard_sha256").at(size_t(s)).get<std::string>() + "\n");
      (void)text;
    }
  }
}

TEST_CASE("classes: every count of a journal record is held to the tar on resume") {
  Sandbox box("clsp20jour");
  fs::create_directories(box / "c");
  std::string m;
  for (int i = 1; i <= 4; ++i) {
    write_wav(box / ("c/g" + std::to_string(i) + ".wav"), tone(12000 * i, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
    m += "{\"path\":\"c/g" + std::to_string(i) + ".wav\"}\n";
  }
  box.put("c/z.wav", "not audio\n");
  m += "{\"path\":\"c/z.wav\",\"duration\":9}\n";  // (the last: its error stops the run with the rest journaled)
  box.put("m.jsonl", m);
  REQUIRE(box.sh("mimi dataset plan m.jsonl -o P --shards 1 -q").code == 0);
  REQUIRE(box.sh("mimi dataset encode --plan P --shard 0/1 -o ref -q --max-errors 1").code == 0);
  REQUIRE(box.sh("mimi dataset encode --plan P --shard 0/1 -o part -q --max-errors 0").code == 3);
  const std::string journal = box.get("part/shards/shard-00000.journal");
  std::mt19937 rng(test_seed());
  std::vector<std::string> lines = lines_of(journal);
  int edits = 0;
  for (size_t li = 1; li < lines.size(); ++li) {
    json j = json::parse(lines[li], nullptr, false);
    if (!j.is_object() || !j.contains("samples")) continue;
    for (const char* field : {"samples", "frames"}) {
      CAPTURE(li);
      CAPTURE(field);
      json e = j;
      e[field] = e[field].get<int64_t>() + 1 + int64_t(rng() % 3);
      std::string text;
      for (size_t k = 0; k < lines.size(); ++k) text += (k == li ? e.dump() : lines[k]) + "\n";
      REQUIRE(box.sh("rm -rf o && cp -r part o").code == 0);
      box.put("o/shards/shard-00000.journal", text);
      const Run w = box.sh("mimi dataset encode --plan P --shard 0/1 -o o -q --max-errors 1");
      check_sane(w);
      CHECK(w.code == 0);
      CHECK(box.get("o/shards/shard-00000.tar") == box.get("ref/shards/shard-00000.tar"));
      CHECK(box.get("o/shards/shard-00000.index.jsonl") == box.get("ref/shards/shard-00000.index.jsonl"));
      CHECK(box.sh("mimi dataset verify o -q").code == 0);
      ++edits;
    }
  }
  CHECK(edits >= 6);
}

TEST_CASE("classes: a segment with no sample at its file's rate is a bad entry when planned") {
  Sandbox box("clsp20seg");
  std::mt19937 rng(test_seed());
  for (int rate : {8000, 22050, 24000, 44100}) {
    write_wav(box / "f.wav", tone(rate * 2, 1, rate), rate, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
    for (int k = 0; k < 4; ++k) {
      const double start = 0.1 + double(rng() % 1000) / 1000.0;
      const double len = (0.05 + double(rng() % 40) / 100.0) / rate;  // under half a sample
      char line[256];
      std::snprintf(line, sizeof line, "{\"path\":\"f.wav\",\"start\":%.9f,\"end\":%.9f}\n", start, start + len);
      const long long n = std::llround((start + len) * rate) - std::llround(start * rate);
      CAPTURE(rate);
      CAPTURE(line);
      box.put("m.jsonl", line);
      const Run r = box.sh("rm -rf P && mimi dataset plan m.jsonl -o P --shards 1 -q");
      check_sane(r);
      if (n < 1) {
        CHECK(r.code == 3);
        CHECK(r.err.find("holds no sample") != std::string::npos);
      } else {
        CHECK(r.code == 0);
      }
    }
  }
}

TEST_CASE("classes: the same bytes, the same outcome by file and through a pipe (WAV trailers, .mimi after its end)") {
  Sandbox box("clsp20pipe");
  write_wav(box / "a.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  write_wav(box / "b.wav", tone(48000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  const std::string a = box.get("a.wav"), b = box.get("b.wav");
  auto chunk = [](const std::string& id, const std::string& body) {
    return id + le32(uint32_t(body.size())) + body + (body.size() % 2 ? std::string(1, '\0') : "");
  };
  const std::vector<std::pair<std::string, std::string>> trailers = {
      {"a second WAV", b},
      {"one junk byte", "X"},
      {"zeros", std::string(100, '\0')},
      {"a LIST chunk", chunk("LIST", "INFOISFT" + le32(0))},
      {"a second fmt chunk", a.substr(12, 24)},
      {"a second data chunk", chunk("data", std::string(8, '\0'))},
      {"a RIFF header", "RIFF" + le32(4) + "WAVE"},
      {"a bare RIFF", "RIFF"},
      {"an odd chunk", chunk("abcd", "xyz")}};
  for (const auto& [what, tail] : trailers) {
    CAPTURE(what);
    box.put("t.wav", a + tail);
    const Run f = box.sh("rm -f f.txt p.txt s.txt && mimi encode t.wav -o f.txt -q");
    const Run p = box.sh("cat t.wav | mimi encode - -o p.txt -q");
    const Run s = box.sh("mimi encode - -o s.txt -q < t.wav");
    check_sane(f);
    check_sane(p);
    CHECK(f.code == p.code);
    CHECK(f.code == s.code);
    if (f.code == 0 && p.code == 0) CHECK(box.get("f.txt") == box.get("p.txt"));
  }
  // a .mimi with bytes after its end record: decode, --stream, and through a pipe agree
  REQUIRE(box.sh("mimi encode a.wav -o a.mimi -q && mimi encode b.wav -o b.mimi -q").code == 0);
  const std::string am = box.get("a.mimi");
  for (const std::string& tail : {box.get("b.mimi"), std::string("X"), std::string(24, '\0'), am.substr(am.size() - 24)}) {
    CAPTURE(tail.size());
    box.put("t.mimi", am + tail);
    const Run d = box.sh("rm -f d*.wav && mimi decode t.mimi -o d1.wav -q");
    const Run st = box.sh("mimi decode --stream t.mimi -o d2.wav -q");
    const Run pp = box.sh("cat t.mimi | mimi decode --stream - -o d3.wav -q");
    CHECK(d.code == 3);
    CHECK(st.code == 3);
    CHECK(pp.code == 3);
    CHECK(!fs::exists(box / "d2.wav"));
    const Run rec = box.sh("mimi decode --stream t.mimi -o d4.wav -q --recover");
    CHECK(rec.code == 0);
  }
}

TEST_CASE("classes: no output is derived beside an input that is not a file") {
  Sandbox box("clsp20dev");
  write_wav(box / "a.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode a.wav -o a.mimi -q").code == 0);
  for (const std::string& cmd : {"mimi encode /dev/stdin < a.wav", "mimi encode <(cat a.wav)", "mimi encode /proc/self/fd/0 < a.wav",
                                 "mimi decode /dev/stdin < a.mimi", "mimi decode <(cat a.mimi)", "mimi encode /dev/fd/3 3< a.wav"}) {
    CAPTURE(cmd);
    const Run r = box.sh(cmd + " -q");
    check_sane(r);
    CHECK(r.code == 2);
    CHECK(r.err.find("give -o") != std::string::npos);
  }
  CHECK(!fs::exists("/dev/stdin.mimi"));
  CHECK(!fs::exists("/dev/stdin.wav"));
  // given an output, such inputs are fine
  CHECK(box.sh("mimi encode /dev/stdin -o x.mimi -q < a.wav && cmp x.mimi a.mimi").code == 0);
}
