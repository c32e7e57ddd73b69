// The nineteenth probe's findings (issue 26: 197 situations, 5 BAD), each swept as the class it
// belongs to:
//   - a directory walk plans or reports every name it lists: a folder that can be listed but not
//     searched, or a path past PATH_MAX, was dropped in silence (exit 0);
//   - a finished shard's index and errors file are held to digests in its .done, as its tar is:
//     any change to them makes the shard not done for the worker and status, as verify fails it
//     (verify failed it forever while status said done), and verify states the index's real totals;
//   - what no reader takes is never written: --recover of a token file with no good frame is
//     exit 3 in every output format (convert wrote a 0-frame file, exit 0);
//   - the prepared-weights cache is written only for a weights file whose timestamps would show a
//     further change (on whole-second file systems a replacement within the second was unseen).
#include <doctest/doctest.h>
#include <sndfile.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "codec/prepared_weights.h"
#include "support/cli.h"

using namespace mimi::test;
using nlohmann::json;

namespace {

std::string fault_env(const std::string& op, const std::string& path, int err) {
  return "ASAN_OPTIONS=verify_asan_link_order=0 LD_PRELOAD=" + std::string(MIMI_FAULT_INJECT_LIB) + " MIMI_FAULT_OP=" + op +
         " MIMI_FAULT_PATH=" + path + " MIMI_FAULT_ERRNO=" + std::to_string(err) + " ";
}

std::vector<std::string> planned_paths(const Sandbox& box, const std::string& plan) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(box / plan))
    if (e.path().filename().string().rfind("shard-", 0) == 0)
      for (const std::string& l : lines_of(slurp(e.path()))) v.push_back(json::parse(l).at("path").get<std::string>());
  return v;
}

}  // namespace

TEST_CASE("classes: a directory walk plans or names every audio file under it") {
  Sandbox box("clsp19walk");
  std::mt19937 rng(test_seed());
  const std::string root = (box / "c").string();
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    REQUIRE(box.sh("rm -rf c P").code == 0);
    // a random tree: folders d0..d3, some nested, audio in each
    std::vector<std::string> files;
    for (int d = 0; d < 4; ++d) {
      const std::string dir = "c/d" + std::to_string(d) + (rng() % 2 ? "/e" + std::to_string(d) : "");
      fs::create_directories(box / dir);
      for (int k = 0; k <= int(rng() % 3); ++k) {
        files.push_back(dir + "/f" + std::to_string(k) + ".wav");
        write_wav(box / files.back(), tone(2400, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
      }
    }
    // one folder that cannot be searched (its entries' lstat fails: EACCES, as for a r-- folder
    // seen by its non-owner), and one audio file deeper than PATH_MAX
    const std::string blind = "d" + std::to_string(rng() % 4) + "/";
    std::string deep = "c/deep", steps;
    while (deep.size() < 4200) {
      const std::string part(200, char('a' + rng() % 26));
      deep += "/" + part, steps += " && mkdir " + part + " && cd " + part;
    }
    // (built a folder at a time: no path given to mkdir or cp is past PATH_MAX)
    REQUIRE(box.sh("f=$PWD/" + files[0] + " && mkdir c/deep && cd c/deep" + steps + " && cp \"$f\" x.wav").code == 0);
    files.push_back(deep + "/x.wav");
    const Run r = box.sh(fault_env("stat", "c/" + blind, 13) + "mimi dataset plan c -o P --shards 1 --skip-bad");
    check_sane(r);
    REQUIRE(r.code == 0);
    const std::vector<std::string> planned = planned_paths(box, "P");
    const std::string skipped = box.get("P/skipped.txt");
    for (const std::string& f : files) {
      CAPTURE(f);
      const std::string abs = (box / f).string();
      const bool is_planned = std::count(planned.begin(), planned.end(), abs) > 0;
      // reported: the file, or a folder above it, named in skipped.txt
      bool reported = false;
      for (fs::path p = fs::path(abs); p.string().size() > root.size(); p = p.parent_path())
        reported = reported || skipped.find(p.string() + ":") != std::string::npos;
      CHECK((is_planned || reported));
      CHECK(!(is_planned && reported));
    }
    // without --skip-bad, the same walk is a bad manifest (exit 3), never a smaller plan
    CHECK(box.sh(fault_env("stat", "c/" + blind, 13) + "mimi dataset plan c -o P2 --shards 1 -q").code == 3);
    CHECK(!fs::exists(box / "P2/plan.json"));
  }
}

TEST_CASE("classes: any change to a finished shard's index or errors file: not done, encoded again, verify agrees") {
  Sandbox box("clsp19idx");
  fs::create_directories(box / "c");
  for (int i = 0; i < 4; ++i)
    write_wav(box / ("c/u" + std::to_string(i) + ".wav"), tone(4800 + 2400 * i, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  box.put("c/bad.wav", "RIFF not audio");  // an item recorded as an error: the errors file has a line
  REQUIRE(box.sh("mimi dataset plan c -o P --shards 1 -q").code == 0);
  REQUIRE(box.sh("mimi dataset encode --plan P --shard 0/1 -o ref -q").code == 0);
  const std::string sh = "o/shards/shard-00000";
  const std::string index = box.get("ref/shards/shard-00000.index.jsonl"), errors = box.get("ref/shards/shard-00000.errors.jsonl");
  REQUIRE(lines_of(errors).size() == 1);
  std::mt19937 rng(test_seed());
  struct Damage {
    std::string file, what, bytes;
  };
  std::vector<Damage> damages;
  auto lines = lines_of(index);
  std::vector<std::string> rev(lines.rbegin(), lines.rend());
  std::string reordered;
  for (const std::string& l : rev) reordered += l + "\n";
  damages.push_back({"index", "lines reordered", reordered});
  damages.push_back({"index", "last newline cut", index.substr(0, index.size() - 1)});
  damages.push_back({"index", "a line appended", index + lines[0] + "\n"});
  damages.push_back({"errors", "a blank line appended", errors + "\n"});
  damages.push_back({"errors", "emptied", ""});
  for (int k = 0; k < 6; ++k) {  // one byte changed anywhere (a digit, a quote, a key's letter)
    const bool in_index = k % 2 == 0;
    std::string b = in_index ? index : errors;
    const size_t at = rng() % (b.size() - 1);
    b[at] = b[at] == '1' ? '2' : char(b[at] ^ 0x01);
    damages.push_back({in_index ? "index" : "errors", "byte " + std::to_string(at) + " changed", b});
  }
  for (const Damage& d : damages) {
    CAPTURE(d.file);
    CAPTURE(d.what);
    REQUIRE(box.sh("rm -rf o && cp -r ref o").code == 0);
    box.put(sh + (d.file == "index" ? ".index.jsonl" : ".errors.jsonl"), d.bytes);
    const Run todo = box.sh("mimi dataset status o --todo --format ranges");
    CHECK(todo.code == 0);
    CHECK(todo.out == "0\n");
    const Run v = box.sh("mimi dataset verify o");
    CHECK(v.code == 3);
    // totals stated as "the index has N" are the index's, every line summed
    int64_t frames = 0, samples = 0;
    for (const std::string& l : lines_of(box.get(sh + ".index.jsonl"))) {
      const json j = json::parse(l, nullptr, false);
      if (j.is_object() && j.contains("frames") && j["frames"].is_number_unsigned()) frames += j["frames"].get<int64_t>();
      if (j.is_object() && j.contains("samples") && j["samples"].is_number_unsigned()) samples += j["samples"].get<int64_t>();
    }
    for (auto [k, n] : {std::pair{"'frames'", frames}, std::pair{"'samples'", samples}})
      for (size_t at = v.err.find(k); at != std::string::npos; at = v.err.find(k, at + 1)) {
        const size_t has = v.err.find("the index has ", at);
        if (has == std::string::npos || v.err.find('\n', at) < has) continue;
        CHECK(std::stoll(v.err.substr(has + 14)) == n);
      }
    const Run w = box.sh("mimi dataset encode --plan P --shard 0/1 -o o");
    CHECK(w.code == 0);
    CHECK(w.err.find("already done") == std::string::npos);
    CHECK(box.get(sh + ".tar") == box.get("ref/shards/shard-00000.tar"));
    CHECK(box.get(sh + ".index.jsonl") == index);
    CHECK(box.get(sh + ".errors.jsonl") == errors);
    CHECK(box.sh("mimi dataset verify o -q").code == 0);
  }
}

TEST_CASE("classes: --recover of a token file with no good frame writes nothing, in every output format") {
  Sandbox box("clsp19rec");
  write_wav(box / "a.wav", tone(24000 * 3, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode a.wav -o a.mimi -q && mimi convert a.mimi -o a.txt -q").code == 0);
  const std::string mimi = box.get("a.mimi"), text = box.get("a.txt");
  std::mt19937 rng(test_seed());
  // cuts of the .mimi and of the text form at random places, the first chunk's start included
  std::vector<std::pair<std::string, std::string>> cuts;
  const uint32_t hlen = uint32_t(uint8_t(mimi[8])) | uint32_t(uint8_t(mimi[9])) << 8 | uint32_t(uint8_t(mimi[10])) << 16;
  for (size_t at : {size_t(12 + hlen + 4), size_t(12 + hlen + 10), size_t(12 + hlen + 20)}) cuts.push_back({"mimi", mimi.substr(0, at)});
  for (int k = 0; k < 4; ++k) cuts.push_back({"mimi", mimi.substr(0, 12 + hlen + 4 + rng() % (mimi.size() - hlen - 16))});
  cuts.push_back({"txt", text.substr(0, text.find('\n') / 2)});
  for (int k = 0; k < 3; ++k) cuts.push_back({"txt", text.substr(0, rng() % text.size())});
  for (const auto& [ext, bytes] : cuts) {
    box.put("cut." + ext, bytes);
    CAPTURE(ext);
    CAPTURE(bytes.size());
    // what decode --recover makes of it decides: frames to recover, or none (exit 3)
    const Run dec = box.sh("rm -f d.wav && mimi decode cut." + ext + " -o d.wav --recover -q");
    check_sane(dec);
    CHECK((dec.code == 0 || dec.code == 3));
    for (const char* to : {"mimi", "txt", "npy", "safetensors"}) {
      CAPTURE(to);
      const std::string out = std::string("o.") + to;
      const Run r = box.sh("rm -f " + out + " && mimi convert cut." + ext + " -o " + out + " --recover -q");
      check_sane(r);
      CHECK(r.code == dec.code);
      if (r.code == 0) CHECK(box.sh("mimi convert " + out + " -o back.txt -f -q").code == 0);  // readable back
      else CHECK(!fs::exists(box / out));
    }
  }
}

TEST_CASE("classes: a weights file is cached only once its timestamps would show a further change") {
  // the rule, over identities of both kinds of file system
  std::mt19937_64 rng(test_seed());
  const int64_t s = 1000000000;
  for (int k = 0; k < 200; ++k) {
    const int64_t now = (int64_t(1700000000) + int64_t(rng() % 100000000)) * s + int64_t(rng() % s);
    const bool coarse = k % 2 == 0;
    const int64_t age = int64_t(rng() % (3 * s));  // how long before `now` the file last changed
    int64_t changed = now - age;
    if (coarse) changed = changed / s * s;  // whole seconds
    else if (changed % s == 0) changed += 1;
    mimi::SourceIdentity id;
    id.mtime_ns = changed - (rng() % 2 ? 0 : (coarse ? s : 1000));
    id.ctime_ns = changed;
    CAPTURE(coarse);
    CAPTURE(now - changed);
    CHECK(id.settled(now) == (now - changed >= (coarse ? 2 * s : s / 10)));
  }
  // and in a run: right after a change nothing is cached (the run reads the file), later it is
  Sandbox box("clsp19settle");
  write_wav(box / "a.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mkdir w && mimi gen-weights --config tiny -o w/m.safetensors -q").code == 0);
  const std::string enc = "MIMI_CACHE_DIR=$PWD/cache mimi encode a.wav -o x.mimi -f -v --weights w/m.safetensors";
  for (int k = 0; k < 3; ++k) {
    const std::string count = "ls cache 2>/dev/null | grep -c mimipw";
    REQUIRE(box.sh("touch w/m.safetensors").code == 0);
    const std::string before = box.sh(count).out;
    const Run now = box.sh(enc);
    CHECK(now.code == 0);
    CHECK(now.err.find("not cached this run") != std::string::npos);
    CHECK(box.sh(count).out == before);
    REQUIRE(box.sh("sleep 0.15").code == 0);
    const Run later = box.sh(enc);
    CHECK(later.err.find("weights prepared into") != std::string::npos);
  }
}
