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

#include <string>
#include <vector>

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
