// The seventeenth probe's findings (issue 26: 120 situations, 5 BAD), each swept as the class it
// belongs to:
//   - a finished shard is done only if its tar holds the bytes its record says: damage anywhere in
//     it (a header, codes, an item record, padding, the end blocks) makes the worker encode it
//     again and status list it, as verify fails it;
//   - in the hub cache without refs/main, the newest snapshot with a weights entry decides: one
//     that does not read is the error (exit 4), never an older snapshot in its place;
//   - a wav.scp path is the rest of the line, as Kaldi reads it (spaces, tabs, quotes);
//   - a name given twice (path and path_hex, id and id_hex) must say one name, or the entry is bad;
//   - a failure of the machine after an input's failure exits 75: the run stopped, repeat it.
#include <doctest/doctest.h>
#include <sndfile.h>

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cli.h"

using namespace mimi::test;

namespace {

std::string hex_of(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) h += d[c >> 4], h += d[c & 15];
  return h;
}

}  // namespace

TEST_CASE("classes: a finished shard whose tar was damaged in place is not done: status lists it, the worker redoes it") {
  Sandbox box("clsp17tar");
  fs::create_directories(box / "c");
  for (int i = 0; i < 3; ++i)
    write_wav(box / ("c/u" + std::to_string(i) + ".wav"), tone(12000 + 4800 * i, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan c -o P --shards 1 -q && mimi dataset encode --plan P --shard 0/1 -o ref -q").code == 0);
  const std::string want = box.get("ref/shards/shard-00000.tar");
  REQUIRE(want.size() >= 4096);
  // Offsets in every part of the tar: the first header, the first .npy's header and codes, the
  // first item record, padding, a later member, the end blocks; and the last byte.
  const unsigned seed = test_seed();
  std::vector<size_t> offsets = {0, 148, 512, 600, 1100, 1600, want.size() / 2, want.size() - 1030, want.size() - 1};
  for (int k = 0; k < 4; ++k) offsets.push_back((seed * 2654435761u + unsigned(k) * 40503u) % want.size());
  for (const size_t at : offsets) {
    CAPTURE(at);
    std::string bad = want;
    bad[at] = char(bad[at] ^ 0x01);
    REQUIRE(box.sh("rm -rf o && cp -r ref o").code == 0);
    box.put("o/shards/shard-00000.tar", bad);
    const Run todo = box.sh("mimi dataset status o --todo --format ranges");
    CHECK(todo.code == 0);
    CHECK(todo.out == "0\n");
    CHECK(todo.err.find("tar_sha256") != std::string::npos);  // says why
    CHECK(box.sh("mimi dataset verify o").code == 3);
    const Run w = box.sh("mimi dataset encode --plan P --shard 0/1 -o o");
    CHECK(w.code == 0);
    CHECK(w.err.find("already done") == std::string::npos);
    CHECK(w.err.find("encoding the shard again") != std::string::npos);
    CHECK(box.get("o/shards/shard-00000.tar") == want);
    CHECK(box.sh("mimi dataset verify o -q").code == 0);
    CHECK(box.sh("mimi dataset status o --todo --format ranges").out.empty());
  }
}

TEST_CASE("classes: without refs/main, the newest snapshot with a weights entry decides, broken or not") {
  Sandbox box("clsp17snap");
  write_wav(box / "a.wav", tone(4800, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  const std::string repo = "hub/models--kyutai--mimi";
  REQUIRE(box.sh("mkdir -p " + repo + "/snapshots/old " + repo + "/snapshots/new && mimi gen-weights --config tiny -o " +
                 repo + "/snapshots/old/model.safetensors -q && touch -d '2020-01-01' " + repo + "/snapshots/old")
              .code == 0);
  const std::string run = "env -u MIMI_WEIGHTS HF_HUB_CACHE=$PWD/hub mimi encode a.wav -o x.mimi -f -q";
  const std::string nw = repo + "/snapshots/new/";
  for (const char* name : {"model.safetensors", "tokenizer-e351c8d8-checkpoint125.safetensors"}) {
    // every way the newest snapshot's weights entry can fail to be a readable file
    for (const std::string& make : {"ln -s ../../blobs/missing " + nw + name, "ln -s " + std::string(name) + " " + nw + name,
                                    "mkdir " + nw + name, "ln -s /dev/null/x " + nw + name}) {
      CAPTURE(make);
      REQUIRE(box.sh("rm -rf " + nw + " && mkdir " + nw + " && " + make + " && touch " + nw).code == 0);
      const Run r = box.sh(run);
      CHECK(r.code == 4);
      CHECK(r.err.find("snapshots/new") != std::string::npos);
    }
  }
  // a newest snapshot holding other files of the repository only is passed over
  REQUIRE(box.sh("rm -rf " + nw + " && mkdir " + nw + " && echo {} > " + nw + "config.json && touch " + nw).code == 0);
  CHECK(box.sh(run).code == 0);
}

TEST_CASE("classes: a wav.scp path is the rest of its line, whatever it holds") {
  Sandbox box("clsp17scp");
  fs::create_directories(box / "c");
  const std::vector<std::string> names = {"two words.wav", "three  spaced words.wav", "tab\there.wav", "'quoted' name.wav",
                                          "trailing -.wav", "a|b.wav", "semi;colon & amp.wav"};
  std::string scp;
  for (size_t i = 0; i < names.size(); ++i) {
    write_wav(box / ("c/" + names[i]), tone(4800 + 2400 * int(i), 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
    scp += "rec" + std::to_string(i) + (i % 2 ? "\t" : " ") + "c/" + names[i] + "\n";
  }
  box.put("wav.scp", scp);
  const Run r = box.sh("mimi dataset plan wav.scp -o P --shards 1 -q");
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  REQUIRE(box.sh("mimi dataset encode --plan P --shard 0/1 -o o -q").code == 0);
  const Run s = box.sh("mimi dataset status o --format json");
  CHECK(nlohmann::json::parse(s.out)["shards"][0]["done_items"].get<size_t>() == names.size());
  CHECK(box.sh("mimi dataset verify o -q").code == 0);
  // a piped entry is still refused, saying what it is
  box.put("p/wav.scp", "rec0 sox c/x.wav -t wav - |\n");
  const Run p = box.sh("mimi dataset plan p/wav.scp -o P2 --shards 1");
  CHECK(p.code == 3);
  CHECK(p.err.find("piped entry") != std::string::npos);
  // and an id without a path
  for (const std::string& line : {std::string("rec0\n"), std::string("rec0   \n"), std::string("rec0\t\n")}) {
    box.put("q/wav.scp", line);
    const Run q = box.sh("mimi dataset plan q/wav.scp -o P3 --shards 1");
    CAPTURE(line);
    CHECK(q.code == 3);
    CHECK(q.err.find("expected '<id> <path>'") != std::string::npos);
  }
}

TEST_CASE("classes: a name given twice, as text and as hex, must be one name, or the entry is bad") {
  Sandbox box("clsp17hex");
  fs::create_directories(box / "c");
  const std::string latin = std::string("caf\xe9.wav"), plain = "b.wav";
  write_wav(box / ("c/" + latin), tone(4800, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  write_wav(box / ("c/" + plain), tone(7200, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  const std::string lossy = "caf\xef\xbf\xbd.wav";  // put_path's text form of the Latin-1 name
  struct Case {
    std::string fields;
    bool good;
  };
  const std::vector<Case> cases = {
      {R"("path_hex": ")" + hex_of("c/" + latin) + R"(")", true},
      {R"("path": "c/)" + lossy + R"(", "path_hex": ")" + hex_of("c/" + latin) + R"(")", true},
      {R"("path": "c/b.wav", "path_hex": ")" + hex_of("c/" + plain) + R"(")", true},
      {R"("path": "c/b.wav", "path_hex": ")" + hex_of("c/" + latin) + R"(")", false},
      {R"("path": "c/)" + lossy + R"(", "path_hex": ")" + hex_of("c/" + plain) + R"(")", false},
      {R"("path": 7, "path_hex": ")" + hex_of("c/" + plain) + R"(")", false},
      {R"("audio_filepath": "c/b.wav", "audio_filepath_hex": ")" + hex_of("c/" + latin) + R"(")", false},
      {R"("path": "c/b.wav", "id": "x", "id_hex": ")" + hex_of("y") + R"(")", false},
      {R"("path": "c/b.wav", "id": "y", "id_hex": ")" + hex_of("y") + R"(")", true},
      {R"("path": "c/b.wav", "id": 5, "id_hex": ")" + hex_of("5") + R"(")", false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.fields);
    box.put("m.jsonl", "{" + c.fields + "}\n");
    const Run r = box.sh("rm -rf P && mimi dataset plan m.jsonl -o P --shards 1");
    if (c.good) {
      CHECK(r.code == 0);
    } else {
      CHECK(r.code == 3);
      CHECK(r.err.find("m.jsonl:1") != std::string::npos);
    }
  }
}

TEST_CASE("classes: a failure of the machine after an input's failure exits 75, the run being cut short") {
  Sandbox box("clsp17env");
  write_wav(box / "good.wav", tone(4800, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  write_wav(box / "after.wav", tone(4800, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  box.put("bad.wav", "not audio at all");
  // /proc/self/mem reads fail with EIO: the machine's failure, as a failing disk's
  for (const std::string& flags : {std::string(""), std::string(" --batch 2")}) {
    CAPTURE(flags);
    const Run r = box.sh("mimi encode bad.wav /proc/self/mem after.wav -o outs/ -f" + flags);
    CHECK(r.code == 75);
    CHECK(r.err.find("bad.wav") != std::string::npos);  // the earlier failure is still reported
    const Run g = box.sh("mimi encode good.wav bad.wav after.wav -o outs2/ -f" + flags);
    CHECK(g.code == 3);  // without the machine failing: the first failure's code
  }
}

TEST_CASE("classes: --json records of a batch come in input order, as one by one, whatever finishes first") {
  Sandbox box("clsp17order");
  // a long input first, so that later ones finish before it; a bad one and a stereo one among them
  write_wav(box / "long.wav", tone(24000 * 12, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  for (int i = 0; i < 4; ++i)
    write_wav(box / ("s" + std::to_string(i) + ".wav"), tone(2400 * (i + 1), 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  write_wav(box / "st.wav", tone(4800, 2, 24000), 24000, 2, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  box.put("bad.wav", "not audio");
  const auto fields = [](const std::string& out) {
    std::vector<std::string> v;
    std::istringstream s(out);
    for (std::string line; std::getline(s, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      v.push_back(j.value("input", "") + "|" + j.value("status", "") + "|" + j.value("output", "") + "|" +
                  std::to_string(j.value("frames", 0)));
    }
    return v;
  };
  const std::string ins = "long.wav s0.wav bad.wav s1.wav st.wav s2.wav s3.wav";
  for (const std::string& extra : {std::string(""), std::string(" --split-channels")}) {
    CAPTURE(extra);
    const Run one = box.sh("mimi encode " + ins + " -o e/ -f --json -q" + extra);
    CHECK(one.code == 3);
    for (const char* b : {"2", "3", "8"}) {
      CAPTURE(b);
      const Run r = box.sh("mimi encode " + ins + " -o e/ -f --json -q --batch " + std::string(b) + extra);
      CHECK(r.code == 3);
      CHECK(fields(r.out) == fields(one.out));
    }
  }
  // decode: files of another codebook count are decoded in a later pass, their records in place
  REQUIRE(box.sh("mimi encode long.wav s0.wav s1.wav -o e/ -f -q && mimi encode s2.wav -o e/ -f -q --n-q 4").code == 0);
  const std::string dins = "e/long.mimi e/s2.mimi bad.wav e/s0.mimi e/s1.mimi";
  const Run one = box.sh("mimi decode " + dins + " -o d/ -f --json -q");
  CHECK(one.code == 3);
  for (const char* b : {"2", "4"}) {
    const Run r = box.sh("mimi decode " + dins + " -o d/ -f --json -q --batch " + std::string(b));
    CAPTURE(b);
    CHECK(r.code == 3);
    CHECK(fields(r.out) == fields(one.out));
  }
}

TEST_CASE("classes: a number in a JSON Lines manifest may be text, with one grammar for every field") {
  Sandbox box("clsp17num");
  fs::create_directories(box / "c");
  write_wav(box / "c/st.wav", tone(24000 * 2, 2, 24000), 24000, 2, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  box.put("ref.jsonl", R"({"path": "c/st.wav", "channel": 1, "duration": 1.5})" "\n");
  REQUIRE(box.sh("mimi dataset plan ref.jsonl -o R --shards 1 -q").code == 0);
  const std::string want = box.get("R/shard-00000.jsonl");
  for (const std::string& f : {std::string(R"("channel": "1", "duration": 1.5)"), std::string(R"("channel": 1, "duration": "1.5")"),
                               std::string(R"("channel": "1", "duration": "1.50")")}) {
    CAPTURE(f);
    box.put("m.jsonl", R"({"path": "c/st.wav", )" + f + "}\n");
    REQUIRE(box.sh("rm -rf P && mimi dataset plan m.jsonl -o P --shards 1 -q").code == 0);
    CHECK(box.get("P/shard-00000.jsonl") == want);
  }
  for (const std::string& c : {"\"-1\"", "\"1.0\"", "\" 1\"", "\"x\"", "\"\"", "\"9999999\"", "\"2\"", "1.5"}) {
    CAPTURE(c);
    box.put("m.jsonl", R"({"path": "c/st.wav", "channel": )" + c + "}\n");
    const Run r = box.sh("rm -rf P && mimi dataset plan m.jsonl -o P --shards 1");
    CHECK(r.code == 3);
    CHECK(r.err.find("m.jsonl:1") != std::string::npos);
  }
}
