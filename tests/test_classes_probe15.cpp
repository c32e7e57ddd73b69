// The fourteenth probe's open finding and the fifteenth probe's findings (issue 26), each swept as
// the class it belongs to:
//   - a set of files published together appears whole or not at all: `dataset plan` wrote its
//     shard lists in place, so a full disk or a signal while planning left shard lists without a
//     plan.json (and, replanning, over an earlier plan). Now every failure while writing, at every
//     file, leaves the folder exactly as it was, earlier plan included; a signal during the
//     publishing renames is held back until the plan is whole; a SIGKILL's leftovers are swept.
#include <doctest/doctest.h>
#include <signal.h>
#include <sndfile.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cli.h"

using namespace mimi::test;

namespace {

std::string fault_env(const std::string& op, const std::string& path, int after, int err, int sig) {
  return "ASAN_OPTIONS=verify_asan_link_order=0 LD_PRELOAD=" + std::string(MIMI_FAULT_INJECT_LIB) +
         " MIMI_FAULT_OP=" + op + " MIMI_FAULT_PATH=" + path + " MIMI_FAULT_AFTER=" + std::to_string(after) +
         " MIMI_FAULT_ERRNO=" + std::to_string(err) + " MIMI_FAULT_SIGNAL=" + std::to_string(sig) + " ";
}

}  // namespace

TEST_CASE("classes: a plan appears whole or not at all, whatever fails or arrives while it is written") {
  Sandbox box("clsp15plan");
  fs::create_directories(box / "c");
  for (int i = 0; i < 12; ++i)
    write_wav(box / ("c/f" + std::to_string(i) + ".wav"), tone(2400 * (i + 1), 1, 24000), 24000, 1,
              SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  // the plan being replaced (3 shards) and the one asked for (4 shards, one more shard list)
  const std::string make = "mimi dataset plan c -q --shards 4 --force -o ";
  REQUIRE(box.sh("mimi dataset plan c -q --shards 3 -o old && " + make + "new").code == 0);
  const Listing before = list_tree(box / "old"), after = list_tree(box / "new");
  REQUIRE(before.size() == 4);
  REQUIRE(after.size() == 5);
  struct Fault {
    std::string op, path;
    int after, err, sig;
    bool whole;  // the new plan is expected whole (a signal held back until it is), else the old one
  };
  std::vector<Fault> faults;
  for (int k = 0; k < 4; ++k) {
    faults.push_back({"open", "shard-0", k, 28, 0, false});    // ENOSPC at each shard list
    faults.push_back({"open", "shard-0", k, 5, 0, false});     // EIO
    faults.push_back({"open", "shard-0", k, 0, SIGTERM, false});
    faults.push_back({"open", "shard-0", k, 0, SIGINT, false});
    faults.push_back({"rename", "shard-0", k, 0, SIGTERM, true});  // while publishing: held back
    faults.push_back({"rename", "shard-0", k, 5, 0, false});      // a rename that fails
  }
  for (const int sig : {0, SIGTERM, SIGHUP}) faults.push_back({"open", "plan.json", 0, sig ? 0 : 28, sig, false});
  faults.push_back({"rename", "plan.json", 0, 0, SIGTERM, true});
  for (const Fault& f : faults) {
    REQUIRE(box.sh("rm -rf p && cp -a old p").code == 0);
    const Run r = box.sh(fault_env(f.op, f.path, f.after, f.err, f.sig) + make + "p");
    CAPTURE(f.op);
    CAPTURE(f.path);
    CAPTURE(f.after);
    CAPTURE(f.err);
    CAPTURE(f.sig);
    CAPTURE(r.err);
    CHECK(r.code == (f.sig ? 128 + f.sig : 5));
    const Listing now = list_tree(box / "p");
    if (f.whole) {
      CHECK(now == after);
    } else if (f.op == "rename") {
      // a failed rename while publishing: no plan.json at all (never an old one over new lists)
      CHECK(now.count("plan.json") == 0);
      CHECK(box.sh(make + "p").code == 0);
      CHECK(list_tree(box / "p") == after);
    } else {
      CHECK(now == before);
    }
  }
  // a SIGKILL while writing leaves its hidden folder, and only that; the next plan removes it
  for (int k = 0; k < 4; ++k) {
    REQUIRE(box.sh("rm -rf p && cp -a old p").code == 0);
    const Run r = box.sh(fault_env("open", "shard-0", k, 0, SIGKILL) + make + "p");
    CHECK(r.code == 128 + SIGKILL);
    Listing now = list_tree(box / "p");
    size_t hidden = 0;
    for (auto it = now.begin(); it != now.end();)
      if (it->first.find(".mimi-tmp.") != std::string::npos) {
        ++hidden;
        it = now.erase(it);
      } else {
        ++it;
      }
    CHECK(hidden >= 1);
    CHECK(now == before);
    CHECK(box.sh(make + "p").code == 0);
    CHECK(list_tree(box / "p") == after);
  }
  // and the ordinary disk full of `ulimit -f` (EFBIG on the write of a shard list)
  REQUIRE(box.sh("rm -rf p && cp -a old p").code == 0);
  const Run r = box.sh("(ulimit -f 1; mimi dataset plan c -q --shards 1 --force -o p)");
  CHECK(r.code == 5);
  CHECK(list_tree(box / "p") == before);
}

TEST_CASE("classes: status finds the plan of the run now on an output that no item is recorded in") {
  Sandbox box("clsp15status");
  fs::create_directories(box / "c");
  for (int i = 0; i < 4; ++i)
    write_wav(box / ("c/a" + std::to_string(i) + ".wav"), tone(12000 * (i + 1), 1, 24000), 24000, 1,
              SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan c -o pA --shards 2 -q && mimi dataset plan c -o pB --shards 3 -q && "
                 "mimi dataset encode --plan pA --shard 0/2 -o refA -q")
              .code == 0);
  // a run of plan B killed at its first item (journal begun, nothing recorded), beside a
  // dataset.json of plan A that binds nothing (a failed first run's, or copied), in either order
  for (const bool copied_after : {false, true}) {
    REQUIRE(box.sh("rm -rf o && mkdir o && cp refA/dataset.json o/").code == 0);
    const Run k = box.sh(fault_env("open", "/c/a", 0, 0, SIGKILL) + "mimi dataset encode --plan pB --shard 1/3 -o o -q");
    REQUIRE(k.code == 128 + SIGKILL);
    if (copied_after) REQUIRE(box.sh("cp refA/dataset.json o/").code == 0);
    const Run st = box.sh("mimi dataset status o");
    CAPTURE(copied_after);
    CHECK_MESSAGE(st.code == 0, st.err);
    CHECK(st.out.find("3 shards:") != std::string::npos);
    CHECK(box.sh("mimi dataset status o --format ranges").out == "0-2\n");
    // once an item is recorded the output is bound, and status follows it
    REQUIRE(box.sh("mimi dataset encode --plan pB --shard 1/3 -o o -q").code == 0);
    CHECK(box.sh("mimi dataset status o --format ranges").out == "0,2\n");
  }
}

// ---- the fifteenth probe's findings (162 situations, 6 BAD)

TEST_CASE("classes: a plan writes only numbers it can read back; durations that overflow are refused") {
  Sandbox box("clsp15inf");
  fs::create_directories(box / "c");
  write_wav(box / "c/a.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  write_wav(box / "c/b.wav", tone(48000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  const std::string a = (box / "c/a.wav").string(), b = (box / "c/b.wav").string();
  for (const auto& [da, db] : {std::pair{"1e308", "1.7e308"}, std::pair{"1.7e308", "1.7e308"}, std::pair{"9e307", "9e307"}}) {
    box.put("m.jsonl", "{\"path\":\"" + a + "\",\"duration\":" + da + "}\n{\"path\":\"" + b + "\",\"duration\":" + db + "}\n");
    CAPTURE(da);
    CAPTURE(db);
    const Run r = box.sh("rm -rf P; mimi dataset plan m.jsonl -o P --shards 1");
    if (r.code == 0) {  // a sum that fits: the plan must read back
      CHECK(box.sh("mimi dataset status P --plan P").code != 3);
      CHECK(box.get("P/plan.json").find("null") == std::string::npos);
    } else {
      CHECK(r.code == 3);
      CHECK(!fs::exists(box / "P/plan.json"));
    }
  }
}

TEST_CASE("classes: the dataset worker refuses stdout or stderr opened on a file it reads or writes") {
  Sandbox box("clsp15std");
  fs::create_directories(box / "c");
  for (int i = 0; i < 2; ++i)
    write_wav(box / ("c/a" + std::to_string(i) + ".wav"), tone(12000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan c -o P --shards 1 -q && mimi dataset encode --plan P --shard 0/1 -o ref -q").code == 0);
  for (const char* target : {"c/a1.wav", "P/plan.json", "P/shard-00000.jsonl", "o/shards/shard-00000.journal"})
    for (const char* redirect : {"2>>", "1>>"})
      for (const char* batch : {"", " --batch 2"}) {
        REQUIRE(box.sh("rm -rf o && mkdir -p o/shards && cp ref/shards/shard-00000.journal o/shards/ 2>/dev/null; true").code == 0);
        if (std::string(target).rfind("o/", 0) == 0) box.put(target, box.get("ref/shards/shard-00000.journal"));
        const std::string before = box.get(target);
        const Run r = box.sh(std::string("mimi dataset encode --plan P --shard 0/1 -o o -v") + batch + " " + redirect + " " + target);
        CAPTURE(target);
        CAPTURE(redirect);
        CAPTURE(batch);
        CHECK(r.code == 5);
        CHECK(box.get(target) == before);
      }
}

TEST_CASE("classes: the exit code of a batch is that of the first failing input in order, as one by one") {
  Sandbox box("clsp15order");
  write_wav(box / "long.wav", tone(24000 * 20, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  write_wav(box / "good.wav", tone(4800, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  box.put("empty.wav", "");
  std::vector<std::string> names = {"long.wav", "empty.wav", "good.wav"};
  std::sort(names.begin(), names.end());
  int compared = 0;
  do {
    std::string args;
    for (const std::string& n : names) args += " " + n;
    const std::string setup = "rm -rf out && mkdir out && touch out/long.mimi; ";  // long's output exists: 5
    const Run one = box.sh(setup + "mimi encode" + args + " -o out/ -q");
    for (const char* batch : {" --batch 2", " --batch 3"}) {
      const Run r = box.sh(setup + "mimi encode" + args + " -o out/ -q" + batch);
      CAPTURE(args);
      CAPTURE(batch);
      CHECK(r.code == one.code);
      ++compared;
    }
  } while (std::next_permutation(names.begin(), names.end()));
  CHECK(compared == 12);
}

TEST_CASE("classes: status counts of a journal only what the tar still holds, as the worker resumes") {
  Sandbox box("clsp15tar");
  fs::create_directories(box / "c");
  for (int i = 0; i < 8; ++i)
    write_wav(box / ("c/u" + std::to_string(i) + ".wav"), tone(24000 * 30, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan c -o P --shards 1 -q && mimi dataset encode --plan P --shard 0/1 -o ref -q").code == 0);
  const std::string want = box.get("ref/shards/shard-00000.tar");
  REQUIRE(box.sh(fault_env("open", "/c/u", 6, 0, SIGKILL) + "mimi dataset encode --plan P --shard 0/1 -o k -q --sync-items 1").code ==
          128 + SIGKILL);
  for (const char* damage : {"rm k2/shards/shard-00000.tar.partial", "truncate -s -600 k2/shards/shard-00000.tar.partial",
                             "truncate -s 0 k2/shards/shard-00000.tar.partial", "true"}) {
    REQUIRE(box.sh(std::string("rm -rf k2 && cp -r k k2 && ") + damage).code == 0);
    const Run st = box.sh("mimi dataset status k2 --format json");
    REQUIRE(st.code == 0);
    const size_t counted = nlohmann::json::parse(st.out)["shards"][0]["done_items"].get<size_t>();
    const Run r = box.sh("mimi dataset encode --plan P --shard 0/1 -o k2");
    CAPTURE(damage);
    CAPTURE(r.err);
    CHECK(r.code == 0);
    if (counted > 0)
      CHECK(r.err.find("resuming after item " + std::to_string(counted) + " of 8") != std::string::npos);
    else
      CHECK(r.err.find("resuming after") == std::string::npos);
    if (std::string(damage) != "true") CHECK(r.err.find("warning") != std::string::npos);  // the loss is said
    CHECK(box.get("k2/shards/shard-00000.tar") == want);
  }
}

TEST_CASE("classes: a missing dataset.json over recorded work is said as what it is") {
  Sandbox box("clsp15dsj");
  fs::create_directories(box / "c");
  write_wav(box / "c/a.wav", tone(12000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan c -o P --shards 1 -q && mimi dataset encode --plan P --shard 0/1 -o o -q && rm o/dataset.json").code == 0);
  for (const char* cmd : {"mimi dataset status o", "mimi dataset verify o", "mimi dataset verify o --plan P"}) {
    const Run r = box.sh(cmd);
    CAPTURE(cmd);
    CHECK(r.code == 2);
    CHECK(r.err.find("while shards there hold recorded work") != std::string::npos);
    CHECK(r.err.find("no shard started") == std::string::npos);
  }
}

TEST_CASE("classes: a refs/main that is there decides, whatever it holds; only a missing one falls back") {
  Sandbox box("clsp15refs");
  write_wav(box / "a.wav", tone(4800, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  const std::string repo = "hub/models--kyutai--mimi";
  REQUIRE(box.sh("mkdir -p " + repo + "/snapshots/s1 " + repo + "/refs && mimi gen-weights --config tiny -o " + repo +
                 "/snapshots/s1/model.safetensors -q")
              .code == 0);
  const std::string run = "env -u MIMI_WEIGHTS HF_HUB_CACHE=$PWD/hub mimi encode a.wav -o x.mimi -f -q";
  for (const std::string& ref : {std::string(""), std::string("   \n"), std::string("\n"), std::string("a/b"), std::string("."),
                                  std::string(".."), std::string("s2")}) {
    box.put(repo + "/refs/main", ref);
    CAPTURE(ref);
    const Run r = box.sh(run);
    CHECK(r.code == 4);
    CHECK(r.err.find("refs/main") != std::string::npos);
  }
  REQUIRE(box.sh("rm " + repo + "/refs/main && mkdir " + repo + "/refs/main").code == 0);
  CHECK(box.sh(run).code == 4);
  REQUIRE(box.sh("rmdir " + repo + "/refs/main").code == 0);
  CHECK(box.sh(run).code == 0);  // no refs/main: the newest snapshot
  box.put(repo + "/refs/main", "s1\n");
  CHECK(box.sh(run).code == 0);
}

// ---- the sixteenth probe's findings (109 situations, 7 BAD in 3 causes)

TEST_CASE("classes: status and verify refuse stdout or stderr opened on a file of the output or the plan") {
  Sandbox box("clsp16std");
  fs::create_directories(box / "c");
  for (int i = 0; i < 4; ++i)
    write_wav(box / ("c/w" + std::to_string(i) + ".wav"), tone(9600, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan c -o pl --shards 2 -q && mimi dataset encode --plan pl --shard 0/2 -o out -q && "
                 "mimi dataset encode --plan pl --shard 1/2 -o out -q")
              .code == 0);
  int tried = 0;
  for (const char* file : {"out/shards/shard-00000.tar", "out/shards/shard-00001.done", "out/shards/shard-00000.index.jsonl",
                           "out/dataset.json", "pl/plan.json", "pl/shard-00001.jsonl"})
    for (const char* cmd : {"mimi dataset status out", "mimi dataset status out --plan pl", "mimi dataset verify out",
                            "mimi dataset status out --plan nonexist", "mimi dataset status out --format json"})
      for (const char* redirect : {">>", "2>>", "1<>"}) {
        const std::string f = file, c = cmd, how = redirect;
        // (a plan other than pl: pl's files are not this command's)
        if (c.find("nonexist") != std::string::npos && f.rfind("pl/", 0) == 0) continue;
        const std::string before = box.get(f);
        const Run r = box.sh(c + " " + how + " " + f);
        CAPTURE(f);
        CAPTURE(c);
        CAPTURE(how);
        CHECK(r.code == 5);
        CHECK(box.get(f) == before);
        ++tried;
      }
  CHECK(box.sh("mimi dataset verify out").code == 0);
  CHECK(tried == 84);
}

TEST_CASE("classes: seconds written as text are plain decimals, in every manifest kind") {
  Sandbox box("clsp16num");
  write_wav(box / "w.wav", tone(48000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  box.put("wav.scp", "recA w.wav\n");
  for (const std::string& bad : {"0x1", "0x1p-1", " 1", "1 ", "inf", "nan", "1s", "+1", "1e", ".", "-", "1e999", "1,5", ""}) {
    box.put("h.jsonl", "{\"path\":\"w.wav\",\"start\":\"" + bad + "\"}\n");
    CAPTURE(bad);
    if (!bad.empty() && bad.find(' ') == std::string::npos) {  // (a segments line splits at blanks)
      box.put("segments", "u1 recA " + bad + " 1.5\n");
      CHECK(box.sh("rm -rf p1; mimi dataset plan wav.scp segments -o p1 --shards 1 -q").code == 3);
    }
    CHECK(box.sh("rm -rf p2; mimi dataset plan h.jsonl -o p2 --shards 1 -q").code == 3);
  }
  for (const std::string& good : {"0", "0.5", "5e-1", "0.25E0", ".5", "1."}) {
    box.put("segments", "u1 recA " + good + " 1.5\n");
    box.put("h.jsonl", "{\"path\":\"w.wav\",\"start\":\"" + good + "\"}\n");
    CAPTURE(good);
    CHECK(box.sh("rm -rf p1; mimi dataset plan wav.scp segments -o p1 --shards 1 -q").code == 0);
    CHECK(box.sh("rm -rf p2; mimi dataset plan h.jsonl -o p2 --shards 1 -q").code == 0);
  }
}

TEST_CASE("classes: status refuses a finished shard whose shard list changed, as the worker and verify do") {
  Sandbox box("clsp16list");
  fs::create_directories(box / "c");
  for (int i = 0; i < 6; ++i)
    write_wav(box / ("c/s" + std::to_string(i) + ".wav"), tone(12000 + 2400 * i, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan c -o pz --shards 2 -q && mimi dataset encode --plan pz --shard 0/2 -o oz -q && "
                 "mimi dataset encode --plan pz --shard 1/2 -o oz -q && cp -r pz pz0")
              .code == 0);
  for (const char* edit : {"sed -i '1d' pz/shard-00001.jsonl", "echo >> pz/shard-00000.jsonl", "truncate -s 0 pz/shard-00001.jsonl"}) {
    REQUIRE(box.sh(std::string("rm -rf pz && cp -r pz0 pz && ") + edit).code == 0);
    const Run st = box.sh("mimi dataset status oz");
    const Run todo = box.sh("mimi dataset status oz --todo --format ranges");
    const Run v = box.sh("mimi dataset verify oz");
    CAPTURE(edit);
    CHECK(st.code == 3);
    CHECK(st.out.empty());
    CHECK(todo.code == 3);
    CHECK(v.code == 3);
    bool worker_refuses = false;
    for (int s = 0; s < 2; ++s) worker_refuses |= box.sh("mimi dataset encode --plan pz --shard " + std::to_string(s) + "/2 -o oz -q").code == 3;
    CHECK(worker_refuses);
  }
}
