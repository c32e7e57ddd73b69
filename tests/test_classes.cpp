// Generated sweeps over whole classes of failure of the CLI (issue 26): each TEST_CASE builds its
// cases from a seeded PRNG and asserts the invariants of the contract (README "Exit codes",
// docs/RELIABILITY.md), not single examples:
//
//   1. environment errnos (EMFILE, ENFILE, ENOMEM, EIO, ESTALE, EAGAIN, ENOBUFS) injected into the
//      open/read of one input (tests/fault_inject.c, LD_PRELOAD) stop the run with exit 75 and
//      record nothing against the input; the input's own errnos (EACCES, ENOENT, EISDIR, ELOOP,
//      ENAMETOOLONG) are exit 3 for that input only
//   2. output sinks that fail (/dev/full, a pipe closed early, a closed fd 1) are never exit 0;
//      closed fds 1 and 2 never put a message into a dataset shard
//   3. file names are bytes: invalid UTF-8, CJK, control characters, quotes, leading dashes come
//      back exactly in --json records; every stderr line stays one line
//   4. outputs that collide in one run: the first input keeps its output, the later ones fail
//   5. one bad item (too few codebooks for --n-q) never stops the others
//   6. signals: 128+N and nothing hidden or partial left
//   7. --threads beyond the machine: a warning, and the same bytes
//
// The seed: MIMI_CLASSES_SEED=N reruns a failure's cases (it is printed with every failure);
// without it each run draws a new one. One sweep: test_classes -tc='*errno*'.
#include <doctest/doctest.h>
#include <sched.h>
#include <signal.h>
#include <sndfile.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "support/cli.h"

using namespace mimi::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// ------------------------------------------------------------------------------------------
// Seed, PRNG, small helpers

uint64_t seed() {
  static const uint64_t s = [] {
    if (const char* e = std::getenv("MIMI_CLASSES_SEED"); e && *e) return uint64_t(std::strtoull(e, nullptr, 10));
    return uint64_t(std::random_device{}()) << 32 ^ uint64_t(std::random_device{}());
  }();
  return s;
}

// One PRNG per sweep, so that a sweep's cases do not depend on which other sweeps ran.
std::mt19937_64 rng_for(const std::string& sweep) { return std::mt19937_64(seed() ^ std::hash<std::string>{}(sweep)); }

#define SEED_INFO() INFO("seed ", seed(), " (rerun with MIMI_CLASSES_SEED=", seed(), ")")

int pick(std::mt19937_64& g, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// A bash word for any bytes: $'...' with every byte outside [A-Za-z0-9._/-] as \xNN.
std::string bq(const std::string& s) {
  std::string o = "$'";
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '/' || c == '-') {
      o += char(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      o += b;
    }
  }
  return o + "'";
}

std::string hex(const std::string& s) {
  std::string o;
  char b[4];
  for (unsigned char c : s) {
    std::snprintf(b, sizeof b, "%02x", c);
    o += b;
  }
  return o;
}
// Reads back the \\xNN escapes of a message
std::string unescape(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] == 'x' && std::isxdigit(static_cast<unsigned char>(s[i + 2])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 3]))) {
      o += char(std::stoi(s.substr(i + 2, 2), nullptr, 16));
      i += 3;
    } else {
      o += s[i];
    }
  }
  return o;
}
std::string unhex(const std::string& h) {
  std::string o;
  for (size_t i = 0; i + 1 < h.size(); i += 2) o += char(std::stoi(h.substr(i, 2), nullptr, 16));
  return o;
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t cp = 0;
    if (c >= 0xc2 && c <= 0xdf) n = 1, cp = c & 0x1fu;
    else if ((c >> 4) == 0xe) n = 2, cp = c & 0x0fu;
    else if (c >= 0xf0 && c <= 0xf4) n = 3, cp = c & 0x07u;
    else return false;
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 2) return false;
      cp = cp << 6 | (d & 0x3fu);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// A pure tone: distinct frequencies give distinct codes.
std::vector<float> sine(double hz, int64_t n, double amp = 0.3) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(amp * std::sin(2 * M_PI * hz * double(i) / 24000.0));
  return v;
}
void put_tone(const fs::path& p, double hz, int format = SF_FORMAT_WAV | SF_FORMAT_PCM_16, int64_t n = 24000) {
  fs::create_directories(p.parent_path());
  write_wav(p, sine(hz, n), 24000, 1, format);
}

void copy_to(const fs::path& from, const fs::path& to) {
  fs::create_directories(to.parent_path());
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

// "error:" lines of stderr
std::vector<std::string> error_lines(const std::string& err) {
  std::vector<std::string> v;
  for (const std::string& l : lines_of(err))
    if (contains_ci(l, "error:")) v.push_back(l);
  return v;
}
bool error_names(const std::string& err, const std::string& what) {
  for (const std::string& l : error_lines(err))
    if (l.find(what) != std::string::npos) return true;
  return false;
}

std::string names(const Listing& l) {
  std::vector<std::string> v;
  for (const auto& [p, e] : l) v.push_back(p);
  return join(v, " ");
}

// Paths whose last component starts with '.' (temporaries)
std::vector<std::string> hidden(const Listing& l) {
  std::vector<std::string> v;
  for (const auto& [p, e] : l) {
    const std::string base = fs::path(p).filename().string();
    if (!base.empty() && base[0] == '.') v.push_back(p);
  }
  return v;
}

std::string fault_lib() { return MIMI_FAULT_INJECT_LIB; }

// ------------------------------------------------------------------------------------------
// The fixture: inputs and the outputs of clean runs, made once.
//   enc/{a,b,c}.wav + enc/out/        `mimi encode a.wav b.wav c.wav -o out/`
//   dec/{a,b,c}.mimi + dec/out/       `mimi decode a.mimi b.mimi c.mimi -o out/`
//   dec/info.out                      `mimi info b.mimi` stdout
//   corpus/{a,b,c}.wav, plan/, ds/   a 3-item plan of 1 shard, and its clean encode
const Sandbox& fixture() {
  static Sandbox box("clsfix");
  static const bool made = [] {
    put_tone(box / "enc/a.wav", 220);
    put_tone(box / "enc/b.wav", 330);
    put_tone(box / "enc/c.wav", 440);
    for (const char* n : {"a", "b", "c"}) copy_to(box / "enc" / (std::string(n) + ".wav"), box / "corpus" / (std::string(n) + ".wav"));
    const Run r = box.sh(
        "cd enc && mimi encode a.wav b.wav c.wav -o out/ -q && mkdir -p ../dec && cp out/*.mimi ../dec/ && cd ../dec && "
        "mimi decode a.mimi b.mimi c.mimi -o out/ -q && mimi info b.mimi > info.out && cd .. && "
        "mimi dataset plan corpus -o plan --shards 1 -q && mimi dataset encode --plan plan --shard 0/1 -o ds -q");
    INFO(r.err);
    REQUIRE(r.code == 0);
    return true;
  }();
  (void)made;
  return box;
}

// ------------------------------------------------------------------------------------------
// 1. Environment errno sweep

struct Errno {
  int value;
  const char* name;
  bool environment;
};
const std::vector<Errno>& errnos() {
  static const std::vector<Errno> v = {
      {EMFILE, "EMFILE", true},  {ENFILE, "ENFILE", true},    {ENOMEM, "ENOMEM", true},     {EIO, "EIO", true},
      {ESTALE, "ESTALE", true},  {EAGAIN, "EAGAIN", true},    {ENOBUFS, "ENOBUFS", true},   {EACCES, "EACCES", false},
      {ENOENT, "ENOENT", false}, {EISDIR, "EISDIR", false},   {ELOOP, "ELOOP", false},      {ENAMETOOLONG, "ENAMETOOLONG", false},
  };
  return v;
}

enum class Kind { Encode, Decode, Info, Dataset };
struct FaultCmd {
  std::string name;
  Kind kind;
  std::string args;   // after `mimi `
  std::string fault;  // MIMI_FAULT_PATH
};
const std::vector<FaultCmd>& fault_cmds() {
  static const std::vector<FaultCmd> v = {
      {"encode", Kind::Encode, "encode a.wav b.wav c.wav -o out/", "b.wav"},
      {"encode --batch 3", Kind::Encode, "encode a.wav b.wav c.wav -o out/ --batch 3", "b.wav"},
      {"decode", Kind::Decode, "decode a.mimi b.mimi c.mimi -o out/", "b.mimi"},
      {"decode --batch 3", Kind::Decode, "decode a.mimi b.mimi c.mimi -o out/ --batch 3", "b.mimi"},
      {"info", Kind::Info, "info b.mimi", "b.mimi"},
      {"dataset encode", Kind::Dataset, "dataset encode --plan PLAN --shard 0/1 -o ds", "/corpus/b.wav"},
      {"dataset encode --batch 3", Kind::Dataset, "dataset encode --plan PLAN --shard 0/1 -o ds --batch 3", "/corpus/b.wav"},
  };
  return v;
}

std::string with_plan(std::string args) {
  const size_t at = args.find("PLAN");
  if (at != std::string::npos) args.replace(at, 4, bq((fixture().dir / "plan").string()));
  return args;
}

std::vector<json> json_lines(const fs::path& p) {
  std::vector<json> v;
  for (const std::string& l : lines_of(slurp(p)))
    if (!l.empty()) v.push_back(json::parse(l, nullptr, false));
  return v;
}

std::string shim_env(const Errno& e, const std::string& fault, const std::string& op, int after, const std::string& log) {
  return "ASAN_OPTIONS=verify_asan_link_order=0 LD_PRELOAD=" + bq(fault_lib()) + " MIMI_FAULT_ERRNO=" +
         std::to_string(e.value) + " MIMI_FAULT_PATH=" + bq(fault + "$") + " MIMI_FAULT_OP=" + op +
         " MIMI_FAULT_AFTER=" + std::to_string(after) + " MIMI_FAULT_LOG=" + bq(log);
}

void fault_case(const Errno& e, const FaultCmd& c, const std::string& op, int after) {
  const Sandbox& fx = fixture();
  Sandbox box("clsenv");
  const std::string src = c.kind == Kind::Encode ? "enc" : "dec";
  if (c.kind == Kind::Encode)
    for (const char* n : {"a", "b", "c"}) copy_to(fx / ("enc/" + std::string(n) + ".wav"), box / (std::string(n) + ".wav"));
  if (c.kind == Kind::Decode || c.kind == Kind::Info)
    for (const char* n : {"a", "b", "c"}) copy_to(fx / ("dec/" + std::string(n) + ".mimi"), box / (std::string(n) + ".mimi"));
  const std::string log = (box.dir.string() + ".faultlog");
  fs::remove(log);
  const std::string env = shim_env(e, c.fault, op == "read+after" ? std::string("read") : op, after, log);
  // dataset: not -q, where an item's failure is a warning that names it
  const std::string cmd = env + " mimi " + with_plan(c.args) + (c.kind == Kind::Dataset ? "" : " -q");
  const Run r = box.sh(cmd, 60);
  const bool injected = fs::exists(log) && !slurp(log).empty();
  fs::remove(log);
  const std::string ename = e.name;
  INFO("class: environment errno sweep; errno ", ename, " (", e.value, ") on ", op, " of ", c.fault,
       after ? " after " + std::to_string(after) + " matching calls" : std::string());
  INFO("command: ", cmd);
  INFO("exit: ", r.code);
  INFO("stderr: ", r.err.substr(0, 1500));
  check_sane(r);
  if (!injected) {
    if (after == 0) {
      WARN_MESSAGE(injected, "the shim never saw the ", op, " of ", c.fault, ": the product reaches it by a path "
                   "LD_PRELOAD cannot interpose (glibc-internal openat/read, mmap, ...); nothing was checked");
      return;
    }
    // the fault came after the last matching call: the run is a clean one
    CHECK(r.code == 0);
  }
  const bool env_fault = injected && e.environment;
  const bool input_fault = injected && !e.environment;
  const Listing left = list_tree(box.dir);
  CHECK_MESSAGE(hidden(left).empty(), "hidden/temporary files left: ", join(hidden(left), " "));

  if (c.kind == Kind::Encode || c.kind == Kind::Decode) {
    const std::string ext = c.kind == Kind::Encode ? ".mimi" : ".wav";
    const Listing clean = list_tree(fx / (src + "/out"));
    const Listing out = list_tree(box / "out");
    if (env_fault) {
      CHECK_MESSAGE(r.code == 75, "an environment errno on an input must stop the run with 75, got ", r.code);
      CHECK_MESSAGE(error_names(r.err, c.fault), "no error line names ", c.fault);
      CHECK_MESSAGE(!out.count("b" + ext), "an output for the faulted input b: out/b", ext);
      // one input at a time: the run stops at b (c would fail alike); in a batch c may be in flight
      if (c.args.find("--batch") == std::string::npos)
        CHECK_MESSAGE(!out.count("c" + ext), "the run went on to c after an environment failure on b");
      for (const auto& [p, en] : out) {
        CAPTURE(p);
        CHECK_MESSAGE((clean.count(p) && clean.at(p) == en), "out/", p, " is not the clean run's output (partial?)");
      }
      // a later run without the fault completes with the bytes of a clean run
      const Run again = box.sh("mimi " + c.args + " -q -f", 60);
      INFO("rerun without the fault: `mimi ", c.args, " -q -f` exit ", again.code, ": ", again.err.substr(0, 800));
      CHECK(again.code == 0);
      const Listing out2 = list_tree(box / "out");
      CHECK_MESSAGE(out2 == clean, "rerun gave ", names(out2), ", clean run ", names(clean));
    } else if (input_fault) {
      CHECK_MESSAGE(r.code == 3, "the input's own errno must fail that input with 3, got ", r.code);
      CHECK_MESSAGE(error_names(r.err, c.fault), "no error line names ", c.fault);
      CHECK_MESSAGE(!out.count("b" + ext), "an output for the failed input b: out/b", ext);
      for (const char* n : {"a", "c"}) {
        const std::string p = n + ext;
        CAPTURE(p);
        CHECK_MESSAGE((out.count(p) && clean.count(p) && out.at(p) == clean.at(p)),
                      "the other input's output out/", p, " is missing or differs from a clean run");
      }
    } else {
      CHECK_MESSAGE(out == clean, "clean run gave ", names(out), ", expected ", names(clean));
    }
  } else if (c.kind == Kind::Info) {
    const std::string clean = slurp(fx / "dec/info.out");
    if (env_fault) {
      CHECK_MESSAGE(r.code == 75, "an environment errno must be exit 75, got ", r.code);
      CHECK_MESSAGE(error_names(r.err, c.fault), "no error line names ", c.fault);
      const Run again = box.sh("mimi " + c.args, 60);
      CHECK(again.code == 0);
      CHECK(again.out == clean);
    } else if (input_fault) {
      CHECK_MESSAGE(r.code == 3, "the input's own errno must be exit 3, got ", r.code);
      CHECK_MESSAGE(error_names(r.err, c.fault), "no error line names ", c.fault);
    } else {
      CHECK(r.out == clean);
    }
  } else {  // dataset
    const fs::path sh = box / "ds/shards", clean = fx / "ds/shards";
    bool b_recorded = false;
    if (fs::exists(sh / "shard-00000.errors.jsonl"))
      for (const json& j : json_lines(sh / "shard-00000.errors.jsonl"))
        if (j.is_object() && j.value("key", "") == "b") b_recorded = true;
    auto same_as_clean = [&](const std::string& what) {
      for (const char* f : {"shard-00000.tar", "shard-00000.index.jsonl", "shard-00000.errors.jsonl"}) {
        CAPTURE(f);
        CHECK_MESSAGE((fs::exists(sh / f) && slurp(sh / f) == slurp(clean / f)), what, ": ", f, " differs from a clean run");
      }
    };
    if (env_fault) {
      CHECK_MESSAGE(r.code == 75, "an environment errno on an item must stop the shard with 75, got ", r.code);
      CHECK_MESSAGE(error_names(r.err, "b.wav"), "no error line names b.wav");
      CHECK_MESSAGE(!b_recorded, "item b recorded as an error for an environment failure");
      CHECK_MESSAGE(!fs::exists(sh / "shard-00000.done"), "the shard is marked done after an environment failure");
      const Run st = box.sh("mimi dataset status ds --todo --format ranges", 60);
      CHECK(st.code == 0);
      std::string ranges = st.out;
      while (!ranges.empty() && std::isspace(static_cast<unsigned char>(ranges.back()))) ranges.pop_back();
      CHECK_MESSAGE(ranges == "0", "status --todo --format ranges printed '", st.out, "' (", st.err, "), expected 0");
      const Run again = box.sh("mimi " + with_plan(c.args) + " -q", 60);
      INFO("rerun without the fault: exit ", again.code, ": ", again.err.substr(0, 800));
      CHECK(again.code == 0);
      same_as_clean("the rerun after the environment failure");
    } else if (input_fault) {
      // docs/DATASETS.md: an unreadable item is recorded and skipped; the shard completes (exit 0)
      CHECK_MESSAGE(r.code == 0, "an unreadable item must be recorded and the shard completed (exit 0), got ", r.code);
      CHECK_MESSAGE(contains_ci(r.err, "b.wav"), "stderr does not name b.wav");
      CHECK_MESSAGE(b_recorded, "item b not in the errors file");
      std::set<std::string> keys;
      if (fs::exists(sh / "shard-00000.index.jsonl"))
        for (const json& j : json_lines(sh / "shard-00000.index.jsonl"))
          if (j.is_object()) keys.insert(j.value("key", ""));
      CHECK_MESSAGE(keys == std::set<std::string>({"a", "c"}), "index keys: ", join({keys.begin(), keys.end()}, ","));
      const Run again = box.sh("mimi " + with_plan(c.args) + " -q --retry-errors", 60);
      INFO("--retry-errors without the fault: exit ", again.code, ": ", again.err.substr(0, 800));
      CHECK(again.code == 0);
      same_as_clean("--retry-errors after the fault");
    } else {
      CHECK(r.code == 0);
      same_as_clean("a run the fault never reached");
    }
  }
}

// The weights and the config: an environment errno while loading them is 75, like any other
// file; the file's own errno is 4 (weights); neither is ever recorded against an input or item.
struct WeightsTarget {
  std::string name;
  std::string fault;  // MIMI_FAULT_PATH
  std::string extra;  // options added to the command
};
const std::vector<WeightsTarget>& weights_targets() {
  static const std::vector<WeightsTarget> v = {
      {"weights", "tiny/weights.hf.safetensors", ""},
      {"config beside the weights", "tiny/config.json", ""},
      {"--config", "cfg.json", " --config cfg.json"},
  };
  return v;
}
std::vector<FaultCmd> weights_cmds(const WeightsTarget& t) {
  std::vector<FaultCmd> v = {
      {"encode", Kind::Encode, "encode a.wav b.wav c.wav -o out/", t.fault},
      {"decode --batch 3", Kind::Decode, "decode a.mimi b.mimi c.mimi -o out/ --batch 3", t.fault},
      {"dataset encode", Kind::Dataset, "dataset encode --plan PLAN --shard 0/1 -o ds", t.fault},
  };
  for (FaultCmd& c : v) c.args += t.extra;
  return v;
}

void weights_fault_case(const Errno& e, const WeightsTarget& t, const FaultCmd& c, const std::string& op) {
  const Sandbox& fx = fixture();
  Sandbox box("clsw");
  const std::string src = c.kind == Kind::Encode ? "enc" : "dec";
  for (const char* n : {"a", "b", "c"}) {
    if (c.kind == Kind::Encode) copy_to(fx / ("enc/" + std::string(n) + ".wav"), box / (std::string(n) + ".wav"));
    if (c.kind == Kind::Decode) copy_to(fx / ("dec/" + std::string(n) + ".mimi"), box / (std::string(n) + ".mimi"));
  }
  copy_to(fs::path(box.weights).parent_path() / "config.json", box / "cfg.json");
  const std::string log = box.dir.string() + ".faultlog";
  fs::remove(log);
  const std::string cmd = shim_env(e, c.fault, op, 0, log) + " mimi " + with_plan(c.args);
  const Run r = box.sh(cmd, 60);
  const bool injected = fs::exists(log) && !slurp(log).empty();
  fs::remove(log);
  const std::string ename = e.name;
  const std::string file = fs::path(t.fault).filename().string();
  INFO("class: errno sweep on the weights/config; errno ", ename, " (", e.value, ") on ", op, " of ", t.fault);
  INFO("command: ", cmd);
  INFO("exit: ", r.code);
  INFO("stderr: ", r.err.substr(0, 1500));
  check_sane(r);
  if (!injected) {
    WARN_MESSAGE(injected, "the shim never saw the ", op, " of ", t.fault, ": the product reaches it by a path "
                 "LD_PRELOAD cannot interpose (glibc-internal openat/read, mmap, ...); nothing was checked");
    return;
  }
  if (e.environment)
    CHECK_MESSAGE(r.code == 75, "an environment errno while loading ", file, " must be exit 75, got ", r.code);
  else
    CHECK_MESSAGE(r.code == 4, "the ", file, "'s own errno must be exit 4 (weights), got ", r.code);
  CHECK_MESSAGE(error_names(r.err, file), "no error line names ", file);
  const Listing left = list_tree(box.dir);
  CHECK_MESSAGE(hidden(left).empty(), "hidden/temporary files left: ", join(hidden(left), " "));
  std::string rerun = "mimi " + with_plan(c.args) + " -q";
  if (c.kind == Kind::Dataset) {
    const fs::path sh = box / "ds/shards", clean = fx / "ds/shards";
    size_t recorded = 0;
    if (fs::exists(sh / "shard-00000.errors.jsonl")) recorded = json_lines(sh / "shard-00000.errors.jsonl").size();
    CHECK_MESSAGE(recorded == 0, recorded, " items recorded as errors for a failure to load ", file);
    CHECK_MESSAGE(!fs::exists(sh / "shard-00000.done"), "the shard is marked done");
    const Run again = box.sh(rerun, 60);
    INFO("rerun without the fault: exit ", again.code, ": ", again.err.substr(0, 800));
    CHECK(again.code == 0);
    for (const char* f : {"shard-00000.tar", "shard-00000.index.jsonl", "shard-00000.errors.jsonl"}) {
      CAPTURE(f);
      CHECK_MESSAGE((fs::exists(sh / f) && slurp(sh / f) == slurp(clean / f)), "the rerun's ", f, " differs from a clean run");
    }
  } else {
    const Listing clean = list_tree(fx / (src + "/out"));
    for (const auto& [p, en] : list_tree(box / "out")) {
      CAPTURE(p);
      CHECK_MESSAGE((clean.count(p) && clean.at(p) == en), "out/", p, " is not a clean run's output");
    }
    const Run again = box.sh(rerun + " -f", 60);
    INFO("rerun without the fault: exit ", again.code, ": ", again.err.substr(0, 800));
    CHECK(again.code == 0);
    CHECK_MESSAGE(list_tree(box / "out") == clean, "the rerun's out/ differs from a clean run");
  }
}

// ------------------------------------------------------------------------------------------
// 2. Output sinks

struct SinkCmd {
  std::string name, args;
};

// Random codes < 64 (the tiny codebook), n_q 8: a token file of `frames` frames.
std::string npy_codes(int64_t frames, uint32_t s) {
  std::mt19937 g(s);
  std::string data;
  data.reserve(size_t(8 * frames * 4));
  for (int64_t i = 0; i < 8 * frames; ++i) {
    const int32_t v = int32_t(g() % 64);
    data.append(reinterpret_cast<const char*>(&v), 4);
  }
  return make_npy("{'descr': '<i4', 'fortran_order': False, 'shape': (8, " + std::to_string(frames) + "), }", data);
}

// ------------------------------------------------------------------------------------------
// 4. Collisions

struct Input {
  std::string path;   // as given on the command line
  std::string stem;
};

}  // namespace

// ==========================================================================================

TEST_CASE("classes: environment errno sweep (LD_PRELOAD fault on one input's open/read)") {
  SEED_INFO();
  fixture();
  std::mt19937_64 g = rng_for("errno");
  for (const Errno& e : errnos())
    for (const FaultCmd& c : fault_cmds())
      for (const std::string op : {"open", "read", "read+after"}) {
        const int after = op == "read+after" ? pick(g, 1, 12) : 0;
        const std::string name = std::string("errno/") + e.name + "/" + c.name + "/" + op +
                                 (after ? "=" + std::to_string(after) : std::string());
        SUBCASE(name.c_str()) { fault_case(e, c, op, after); }
      }
}

// Failed when written (fixed since: Config::read_file judges the errno): the config beside the weights and --config FILE are
// read through std::ifstream: an environment errno at open is exit 4 (without the errno); at read it
// surfaces as libstdc++'s "basic_filebuf::underflow" exception: exit 70 for encode (blamed on the
// first input), 75 without the file's name for decode/dataset, 4 ("not valid JSON") for --config,
// and exit 70 for the config file's own errnos (EACCES, ENOENT, EISDIR, ELOOP, ENAMETOOLONG).
TEST_CASE("classes: environment errno sweep on the weights and the config (LD_PRELOAD)") {
  SEED_INFO();
  fixture();
  for (const Errno& e : errnos())
    for (const WeightsTarget& t : weights_targets())
      for (const FaultCmd& c : weights_cmds(t))
        for (const std::string op : {"open", "read"}) {
          const std::string name = std::string("errno-weights/") + e.name + "/" + t.name + "/" + c.name + "/" + op;
          SUBCASE(name.c_str()) { weights_fault_case(e, t, c, op); }
        }
}

TEST_CASE("classes: output sinks that fail are never exit 0") {
  SEED_INFO();
  const Sandbox& fx = fixture();
  Sandbox box("clssink");
  copy_to(fx / "enc/a.wav", box / "a.wav");
  copy_to(fx / "dec/a.mimi", box / "a.mimi");
  const std::string ds = bq((fx.dir / "ds").string());
  const std::vector<SinkCmd> cmds = {
      {"encode -o -", "encode a.wav -o -"},
      {"decode -o -", "decode a.mimi -o -"},
      {"encode --json", "encode a.wav -o j/ -f --json"},
      {"decode --json", "decode a.mimi -o j/ -f --json"},
      {"info", "info a.mimi"},
      {"info --json", "info --json a.mimi"},
      {"convert -o -", "convert a.mimi -o - --format npy"},
      {"convert -o - (text)", "convert a.mimi -o - --format text"},
      {"dataset status", "dataset status " + ds},
      {"dataset status --format json", "dataset status " + ds + " --format json"},
      {"roundtrip -o -", "roundtrip a.wav -o -"},
      {"encode - -o - (stdin)", "encode - -o - < a.wav"},
      {"encode --stream", "encode --stream - -o - < a.wav"},
      {"decode --stream", "decode --stream - -o - < a.mimi"},
      {"info (no file)", "info"},
      // Failed when written (fixed since: main checks stdout after --help too): CLI11's --help/--version output is not
      // checked: exit 0 into /dev/full or a closed fd 1, death by SIGPIPE (141) into a closed pipe
      {"--help", "--help"},
      {"--version", "--version"},
      {"encode --help", "encode --help"},
  };
  struct Sink {
    std::string name, pre, post;  // command = pre + mimi ... + post
  };
  // The pipe closed early, without a race: the reader closes its end (as `head -c 1` does after
  // its byte) before mimi starts; mimi's own status is PIPESTATUS[0] under pipefail.
  const std::vector<Sink> sinks = {
      {"> /dev/full", "", " > /dev/full"},
      {"| closed pipe", "set -o pipefail; rm -f .closed; { while [ ! -e .closed ]; do sleep 0.01; done; rm -f .closed; ",
       "; } | { exec 0<&-; : > .closed; }; exit ${PIPESTATUS[0]}"},
      {">&-", "", " >&-"},
  };
  for (const SinkCmd& c : cmds) {
    for (const Sink& s : sinks) {
      const std::string name = "sink/" + c.name + " " + s.name;
      SUBCASE(name.c_str()) {
        const Run normal = box.sh("mimi " + c.args + " -q", 60);
        INFO("class: output sinks; the same command to a normal stdout: exit ", normal.code, ", ", normal.out.size(),
             " bytes, stderr ", normal.err.substr(0, 300));
        REQUIRE(normal.code == 0);
        const std::string cmd = s.pre + "mimi " + c.args + " -q" + s.post;
        const Run r = box.sh(cmd, 60);
        INFO("command: ", cmd);
        INFO("exit: ", r.code);
        INFO("stderr: ", r.err.substr(0, 1000));
        check_sane(r);
        if (!normal.out.empty()) {
          CHECK_MESSAGE(r.code != 0, "exit 0 although its ", normal.out.size(), " bytes of stdout were not delivered");
          CHECK_MESSAGE(r.code == 5, "expected exit 5 (output not written), got ", r.code);
          CHECK_MESSAGE(error_names(lower(r.err), "stdout"), "no error line names stdout");
        }
        CHECK_MESSAGE(hidden(list_tree(box.dir)).empty(), "hidden files left: ", join(hidden(list_tree(box.dir)), " "));
      }
    }
  }
  SUBCASE("sink/decode -o - (10 s) | head -c 1") {
    put_tone(box / "long.wav", 300, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 240000);
    REQUIRE(box.sh("mimi encode long.wav -o long.mimi -q").code == 0);
    const std::string cmd = "set -o pipefail; mimi decode long.mimi -o - -q | head -c 1 > /dev/null; exit ${PIPESTATUS[0]}";
    const Run r = box.sh(cmd, 60);
    INFO("class: output sinks; command: ", cmd, "; exit ", r.code, "; stderr ", r.err.substr(0, 800));
    check_sane(r);
    CHECK(r.code == 5);
  }
}

TEST_CASE("classes: closed stdout and stderr never write a message into a dataset shard") {
  SEED_INFO();
  const Sandbox& fx = fixture();
  Sandbox box("clsfd");
  copy_to(fx / "enc/a.wav", box / "corpus/a.wav");
  copy_to(fx / "enc/c.wav", box / "corpus/c.wav");
  {  // the header claims 48000 data bytes, 47000 are there: the item's error, recorded in the
     // errors file, and a warning "truncated" on stderr, exit 0 (the plan reads no header for it,
     // since its JSON line gives the duration: a folder's plan refuses it as truncated)
    WavSpec w;
    w.data = s16_bytes(sine(330, 24000)).substr(0, 47000);
    w.data_size = 48000;
    w.riff_size = 36 + 48000;
    box.put("corpus/short.wav", make_wav(w));
  }
  box.put("corpus.jsonl", "{\"path\": \"corpus/a.wav\"}\n{\"path\": \"corpus/c.wav\"}\n"
                          "{\"path\": \"corpus/short.wav\", \"duration\": 1.0}\n");
  REQUIRE(box.sh("mimi dataset plan corpus.jsonl -o plan --shards 1 -q").code == 0);
  for (const std::string batch : {"", " --batch 3"}) {
    for (const std::string redir : {">&- 2>&-", "2>&-", ">&-"}) {
      const std::string name = "fds/dataset encode" + batch + " " + redir;
      SUBCASE(name.c_str()) {
        const Run open = box.sh("rm -rf ref && mimi dataset encode --plan plan --shard 0/1 -o ref" + batch, 60);
        INFO("class: closed standard descriptors; with them open: exit ", open.code, ", stderr ", open.err.substr(0, 600));
        REQUIRE(open.code == 0);
        REQUIRE_MESSAGE(contains_ci(open.err, "truncated"), "the setup does not produce the warning");
        const std::string cmd = "rm -rf ds && mimi dataset encode --plan plan --shard 0/1 -o ds" + batch + " " + redir;
        const Run r = box.sh(cmd, 60);
        INFO("command: ", cmd, "; exit ", r.code);
        check_sane(r);
        CHECK(r.code == 0);
        for (const auto& [p, e] : list_tree(box / "ds")) {
          if (e.type != 'f') continue;
          CAPTURE(p);
          const std::string bytes = slurp(box / "ds" / p);
          CHECK_MESSAGE(!contains_ci(bytes, "mimi:"), "a message went into ds/", p);
          CHECK_MESSAGE(!contains_ci(bytes, "warning"), "a warning went into ds/", p);
          // the errors file records the item's "truncated" itself: it must be the open run's, byte for byte
          if (p == "shards/shard-00000.errors.jsonl")
            CHECK_MESSAGE(bytes == slurp(box / "ref" / p), "the errors file differs from the run with open descriptors");
          else
            CHECK_MESSAGE(!contains_ci(bytes, "truncated"), "the warning went into ds/", p);
        }
        CHECK_MESSAGE(slurp(box / "ds/shards/shard-00000.tar") == slurp(box / "ref/shards/shard-00000.tar"),
                      "the shard differs from the run with open descriptors");
      }
    }
  }
}

TEST_CASE("classes: file names are bytes (invalid UTF-8, CJK, control characters, quotes, dashes)") {
  SEED_INFO();
  const Sandbox& fx = fixture();
  const std::vector<std::string> pieces = {"\xe9", "\xff", "\xc3", "\xe6\xbc\xa2\xe5\xad\x97", "\xe9\x9f\xb3", "\n", "\t",
                                           " ",    "'",    "\"",   "\\", "a", "Zz", "1", "$x", "`", "*", "?", "\xc3\xa9",
                                           "\r",   "\x1b", "%s",   "{}", "-", "#"};
  for (int round = 0; round < 4; ++round) {
    const std::string sub = "names/round " + std::to_string(round);
    SUBCASE(sub.c_str()) {
      std::mt19937_64 g = rng_for(sub);
      Sandbox box("clsname");
      std::vector<std::string> args, stems;
      std::set<std::string> seen;
      auto random_stem = [&] {
        while (true) {
          std::string stem;
          const int n = pick(g, 1, 5);
          if (pick(g, 0, 3) == 0) stem = "-";
          for (int i = 0; i < n; ++i) stem += pieces[size_t(pick(g, 0, int(pieces.size()) - 1))];
          if (stem != "-" && seen.insert(stem).second) return stem;
        }
      };
      while (stems.size() < 4) {
        const std::string stem = random_stem();
        stems.push_back(stem);
        copy_to(fx / "enc/a.wav", box / (stem + ".wav"));
        args.push_back((stem[0] == '-' ? "./" : "") + stem + ".wav");
      }
      // and one input that does not exist, among them: its error names it on one line
      const std::string missing_stem = random_stem();
      const std::string missing = (missing_stem[0] == '-' ? "./" : "") + missing_stem + ".wav";
      const size_t missing_at = size_t(pick(g, 0, int(args.size())));
      std::vector<std::string> all = args;
      all.insert(all.begin() + std::ptrdiff_t(missing_at), missing);
      std::string printable;
      for (const std::string& a : all) printable += bq(a) + " ";
      INFO("class: file names are bytes; inputs: ", printable, "(", bq(missing), " does not exist)");
      std::string cmd = "mimi encode";
      for (const std::string& a : all) cmd += " " + bq(a);
      cmd += " -o out/ --json";
      auto check_run = [&](const Run& r, const std::vector<std::string>& ins, const std::vector<std::string>& outs,
                           const std::string& bad) {
        INFO("exit: ", r.code);
        INFO("stdout: ", r.out.substr(0, 2000));
        INFO("stderr: ", r.err.substr(0, 2000));
        check_sane(r);
        CHECK(r.code == (bad.empty() ? 0 : 3));
        const std::vector<std::string> ls = lines_of(r.out);
        const size_t records = ins.size() + (bad.empty() ? 0 : 1);
        CHECK_MESSAGE(ls.size() == records, "stdout has ", ls.size(), " lines for ", records, " inputs");
        std::map<std::string, std::string> got;  // input bytes -> output bytes
        std::map<std::string, std::string> status;  // input bytes -> status
        for (const std::string& l : ls) {
          const json j = json::parse(l, nullptr, false);
          CHECK_MESSAGE(!j.is_discarded(), "a stdout line is not JSON: ", l);
          if (j.is_discarded() || !j.is_object()) continue;
          auto field = [&](const std::string& k) -> std::string {
            if (j.contains(k + "_hex") && j[k + "_hex"].is_string()) return unhex(j[k + "_hex"].get<std::string>());
            return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string("<missing>");
          };
          const std::string in = field("input");
          got[in] = field("output");
          status[in] = j.value("status", "<missing>");
          // a name that is not UTF-8 must come with its bytes
          if (!valid_utf8(in)) CHECK_MESSAGE(j.contains("input_hex"), "no input_hex for a name that is not UTF-8: ", l);
        }
        for (size_t i = 0; i < ins.size(); ++i) {
          CAPTURE(i);
          const std::string in = ins[i], out = outs[i];
          const std::string in_hex = hex(in), out_hex = hex(out);
          CAPTURE(in_hex);
          CAPTURE(out_hex);
          CHECK_MESSAGE(got.count(in), "no record whose input is exactly the bytes given");
          if (got.count(in)) CHECK_MESSAGE(got[in] == out, "the record's output is hex ", hex(got[in]));
          CHECK_MESSAGE(fs::exists(box / out), "the output file is not at the exact bytes of its name");
        }
        if (!bad.empty()) {
          const std::string bad_hex = hex(bad);
          CAPTURE(bad_hex);
          CHECK_MESSAGE(status.count(bad), "no --json record whose input is exactly the missing file's bytes");
          if (status.count(bad)) CHECK(status[bad] == "error");
          bool named = false;
          for (const std::string& l : error_lines(r.err)) named = named || unescape(l).find(bad) != std::string::npos;
          CHECK_MESSAGE(named, "no error line names the missing file (with \\xNN escapes read back)");
        }
        for (const std::string& l : lines_of(r.err))
          CHECK_MESSAGE(l.rfind("mimi:", 0) == 0, "a stderr line that does not start with 'mimi:' (a name broke a "
                                                  "message into lines?): ", l);
      };
      std::vector<std::string> outs;
      for (const std::string& s : stems) outs.push_back("out/" + s + ".mimi");
      {
        const Run r = box.sh(cmd, 60);
        INFO("command: ", cmd);
        check_run(r, args, outs, missing);
      }
      {
        std::string rcmd = "mimi roundtrip";
        std::vector<std::string> rts;
        for (size_t i = 0; i < args.size(); ++i) {
          rcmd += " " + bq(args[i]);
          rts.push_back("rt/" + stems[i] + ".roundtrip.wav");
        }
        rcmd += " -o rt/ --json";
        const Run r = box.sh(rcmd, 60);
        INFO("command: ", rcmd);
        check_run(r, args, rts, "");
      }
      {
        std::string icmd = "mimi info --json";
        for (const std::string& s : stems) icmd += " " + bq("out/" + s + ".mimi");
        const Run r = box.sh(icmd, 60);
        INFO("command: ", icmd);
        INFO("exit: ", r.code, "; stdout: ", r.out.substr(0, 1500), "; stderr: ", r.err.substr(0, 1000));
        check_sane(r);
        CHECK(r.code == 0);
        std::set<std::string> files;
        for (const std::string& l : lines_of(r.out)) {
          const json j = json::parse(l, nullptr, false);
          CHECK_MESSAGE(j.is_object(), "a stdout line is not a JSON object: ", l);
          if (!j.is_object()) continue;
          if (j.contains("file_hex") && j["file_hex"].is_string()) files.insert(unhex(j["file_hex"].get<std::string>()));
          else if (j.contains("file") && j["file"].is_string()) files.insert(j["file"].get<std::string>());
        }
        for (const std::string& s : stems) {
          const std::string f = "out/" + s + ".mimi", f_hex = hex(f);
          CAPTURE(f_hex);
          CHECK_MESSAGE(files.count(f), "no info record whose file (or file_hex) is exactly the bytes given");
        }
        for (const std::string& l : lines_of(r.err)) CHECK_MESSAGE(l.rfind("mimi:", 0) == 0, "a stderr line: ", l);
      }
      for (const std::string& s : stems) {
        const std::string in = "out/" + s + ".mimi", out = "dec/" + s + ".wav";
        const std::string dcmd = "mimi decode " + bq(in) + " -o dec/ --json";
        const Run r = box.sh(dcmd, 60);
        INFO("command: ", dcmd);
        check_run(r, {in}, {out}, "");
      }
    }
  }
}

TEST_CASE("classes: outputs that collide in one run") {
  SEED_INFO();
  struct Combo {
    std::string cmd;
    bool force, batch;
  };
  std::vector<Combo> combos;
  for (const char* cmd : {"encode", "decode", "roundtrip"})
    for (bool force : {false, true})
      for (bool batch : {false, true})
        if (!(batch && std::string(cmd) == "roundtrip")) combos.push_back({cmd, force, batch});  // roundtrip has no --batch
  for (const Combo& co : combos)
    for (int round = 0; round < 2; ++round) {
      const std::string name = "collide/" + co.cmd + (co.force ? " -f" : "") + (co.batch ? " --batch 2" : "") + " #" +
                               std::to_string(round);
      SUBCASE(name.c_str()) {
        std::mt19937_64 g = rng_for(name);
        Sandbox box("clscol");
        const bool tokens = co.cmd == "decode";
        const std::vector<std::string> exts =
            tokens ? std::vector<std::string>{"mimi", "npy", "txt"} : std::vector<std::string>{"wav", "flac"};
        const std::vector<std::string> dirs = {"", "d1/", "d2/", "d3/"};
        const std::vector<std::string> stemset = {"x", "y", "z"};
        std::vector<Input> ins;
        std::set<std::string> used;
        const int n = pick(g, 3, 6);
        std::string setup;
        while (int(ins.size()) < n) {
          const std::string stem = stemset[size_t(pick(g, 0, 2))];
          const std::string path = dirs[size_t(pick(g, 0, 3))] + stem + "." + exts[size_t(pick(g, 0, int(exts.size()) - 1))];
          // two inputs whose names differ only in extension are fine; the same path twice is not the class
          if (!used.insert(path).second) continue;
          const double hz = 150 + 61.0 * double(ins.size());
          if (tokens) {
            put_tone(box / ("src/" + std::to_string(ins.size()) + ".wav"), hz);
            if (fs::path(path).has_parent_path()) fs::create_directories(box / fs::path(path).parent_path());
            setup += "mimi encode src/" + std::to_string(ins.size()) + ".wav -o " + path + " -q && ";
          } else {
            put_tone(box / path, hz,
                     path.size() > 5 && path.substr(path.size() - 5) == ".flac" ? SF_FORMAT_FLAC | SF_FORMAT_PCM_16
                                                                               : SF_FORMAT_WAV | SF_FORMAT_PCM_16);
          }
          ins.push_back({path, stem});
        }
        if (!setup.empty()) REQUIRE(box.sh(setup + "true").code == 0);
        const std::string suffix = co.cmd == "encode" ? ".mimi" : co.cmd == "decode" ? ".wav" : ".roundtrip.wav";
        // each input alone
        std::vector<std::string> alone(ins.size());
        for (size_t i = 0; i < ins.size(); ++i) {
          const std::string a = "alone" + std::to_string(i) + "/";
          const Run r = box.sh("mimi " + co.cmd + " " + ins[i].path + " -o " + a + " -q", 60);
          INFO("alone: ", ins[i].path, ": ", r.err);
          REQUIRE(r.code == 0);
          alone[i] = slurp(box / (a + ins[i].stem + suffix));
          fs::remove_all(box / a);
        }
        std::string cmd = "mimi " + co.cmd;
        for (const Input& in : ins) cmd += " " + in.path;
        cmd += " -o out/";
        if (co.force) cmd += " -f";
        if (co.batch) cmd += " --batch 2";
        const Run r = box.sh(cmd, 60);
        INFO("class: outputs that collide; command: ", cmd);
        INFO("exit: ", r.code);
        INFO("stderr: ", r.err.substr(0, 1500));
        check_sane(r);
        std::map<std::string, size_t> owner;  // output name -> first input claiming it
        bool collided = false;
        for (size_t i = 0; i < ins.size(); ++i) {
          const std::string o = ins[i].stem + suffix;
          CAPTURE(i);
          const std::string input = ins[i].path;
          CAPTURE(input);
          if (!owner.count(o)) {
            owner[o] = i;
            CHECK_MESSAGE(fs::exists(box / "out" / o), "the first input claiming out/", o, " did not produce it");
            if (fs::exists(box / "out" / o))
              CHECK_MESSAGE(slurp(box / "out" / o) == alone[i], "out/", o, " is not the result of ", input,
                            " (its first claimant) run alone");
          } else {
            collided = true;
            bool named = false;
            for (const std::string& l : error_lines(r.err))
              named = named || (l.find(input) != std::string::npos && l.find("out/" + o) != std::string::npos);
            CHECK_MESSAGE(named, "no error line names the later input ", input, " and its output out/", o);
          }
        }
        for (const auto& [p, e] : list_tree(box / "out")) {
          CAPTURE(p);
          CHECK_MESSAGE(owner.count(p), "unexpected file in out/: ", p);
        }
        CHECK_MESSAGE(r.code == (collided ? 5 : 0), "exit ", r.code, ", expected ", collided ? 5 : 0);
      }
    }
  SUBCASE("collide/decode output extensions") {
    const Sandbox& fx = fixture();
    Sandbox box("clsext");
    copy_to(fx / "dec/a.mimi", box / "a.mimi");
    for (const std::string ext : {"mp3", "aac", "txt", "wav", "flac", "ogg", ""}) {
      const std::string out = ext.empty() ? "x" : "x." + ext;
      const bool ok = ext.empty() || ext == "wav" || ext == "flac" || ext == "ogg";
      const Run r = box.sh("mimi decode a.mimi -o " + out + " -q", 60);
      INFO("class: output extensions; command: mimi decode a.mimi -o ", out, "; exit ", r.code, "; ", r.err);
      check_sane(r);
      const Listing after = list_tree(box.dir);
      if (ok) {
        CHECK(r.code == 0);
        WavInfo w;
        CHECK_MESSAGE(audio_opens(box / out, &w), out, " is not audio");
      } else {
        CHECK(r.code == 2);
        CHECK_MESSAGE(after.size() == 1, "files left: ", names(after));
      }
      fs::remove(box / out);
    }
  }
}

TEST_CASE("classes: one item with too few codebooks for --n-q never stops the others") {
  SEED_INFO();
  for (int round = 0; round < 3; ++round)
    for (bool batch : {false, true}) {
      const std::string name = "nq/round " + std::to_string(round) + (batch ? " --batch 3" : "");
      SUBCASE(name.c_str()) {
        std::mt19937_64 g = rng_for(name);
        Sandbox box("clsnq");
        const int files = pick(g, 3, 6);
        const int k = pick(g, 1, 8);
        std::vector<int> q(static_cast<size_t>(files));
        std::string setup, cmd = "mimi decode";
        const std::vector<std::string> exts = {"mimi", "npy", "txt"};
        std::vector<std::string> in(static_cast<size_t>(files));
        for (int i = 0; i < files; ++i) {
          q[size_t(i)] = pick(g, 1, 8);
          in[size_t(i)] = "f" + std::to_string(i) + "." + exts[size_t(pick(g, 0, 2))];
          put_tone(box / ("src" + std::to_string(i) + ".wav"), 180 + 53 * i);
          setup += "mimi encode src" + std::to_string(i) + ".wav --n-q " + std::to_string(q[size_t(i)]) + " -o " + in[size_t(i)] + " -q && ";
          cmd += " " + in[size_t(i)];
        }
        cmd += " -o out/ --n-q " + std::to_string(k) + (batch ? " --batch 3" : "");
        REQUIRE(box.sh(setup + "true").code == 0);
        std::string qs;
        for (int i = 0; i < files; ++i) qs += in[size_t(i)] + ":" + std::to_string(q[size_t(i)]) + " ";
        const Run r = box.sh(cmd, 60);
        INFO("class: one bad item; codebooks per file: ", qs);
        INFO("command: ", cmd);
        INFO("exit: ", r.code);
        INFO("stderr: ", r.err.substr(0, 1500));
        check_sane(r);
        bool any_bad = false;
        for (int i = 0; i < files; ++i) {
          const std::string f = in[size_t(i)], o = "out/f" + std::to_string(i) + ".wav";
          CAPTURE(f);
          if (q[size_t(i)] >= k) {
            CHECK_MESSAGE(fs::exists(box / o), f, " (", q[size_t(i)], " codebooks >= ", k, ") was not decoded");
            const Run a = box.sh("mimi decode " + f + " --n-q " + std::to_string(k) + " -o alone/ -q", 60);
            CHECK(a.code == 0);
            CHECK_MESSAGE(slurp(box / o) == slurp(box / ("alone/f" + std::to_string(i) + ".wav")),
                          o, " differs from decoding ", f, " alone");
          } else {
            any_bad = true;
            CHECK_MESSAGE(!fs::exists(box / o), f, " has ", q[size_t(i)], " codebooks < --n-q ", k, " but was decoded");
            bool named = false;
            for (const std::string& l : error_lines(r.err)) named = named || (l.find(f) != std::string::npos && contains_ci(l, "n-q"));
            CHECK_MESSAGE(named, "no error line names ", f, " and --n-q");
          }
        }
        CHECK_MESSAGE(r.code == (any_bad ? 3 : 0), "exit ", r.code, ", expected ", any_bad ? 3 : 0);
        CHECK_MESSAGE(hidden(list_tree(box.dir)).empty(), "hidden files left");
      }
    }
}

TEST_CASE("classes: signals in a batch decode exit 128+N and leave nothing hidden or partial") {
  SEED_INFO();
  constexpr int64_t kFrames = 7500 * 3;  // 30 minutes of codes per file
  static const std::string l0 = npy_codes(kFrames, 1), l1 = npy_codes(kFrames, 2), l2 = npy_codes(kFrames, 3);
  const std::vector<std::pair<const char*, int>> sigs = {
      {"INT", SIGINT},   {"TERM", SIGTERM},     {"HUP", SIGHUP},   {"QUIT", SIGQUIT}, {"USR1", SIGUSR1},
      {"USR2", SIGUSR2}, {"ALRM", SIGALRM},     {"VTALRM", SIGVTALRM}, {"XCPU", SIGXCPU}, {"PWR", SIGPWR},
  };
  for (const auto& [sname, sig] : sigs) {
    const std::string name = std::string("signal/SIG") + sname;
    SUBCASE(name.c_str()) {
      Sandbox box("clssig");
      box.put("l0.npy", l0);
      box.put("l1.npy", l1);
      box.put("l2.npy", l2);
      fs::create_directories(box / "out");
      const pid_t pid = spawn_mimi(box.dir, {"decode", "l0.npy", "l1.npy", "l2.npy", "-o", "out/", "-q"}, box.weights,
                                   box.dir.string() + ".stdout", box.dir.string() + ".stderr");
      REQUIRE(pid > 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const std::string during = names(list_tree(box / "out"));
      ::kill(pid, sig);
      bool signaled = false;
      int signo = 0;
      const int code = wait_exit(pid, 30, &signaled, &signo);
      const std::string err = slurp(box.dir.string() + ".stderr");
      fs::remove(box.dir.string() + ".stdout");
      fs::remove(box.dir.string() + ".stderr");
      INFO("class: signals; SIG", sname, " (", sig, ") 0.5 s into `mimi decode l0.npy l1.npy l2.npy -o out/`");
      INFO("out/ before the signal: ", during);
      INFO("exit ", code, signaled ? " (died by signal " + std::to_string(signo) + ")" : std::string(" (exited)"));
      INFO("stderr: ", err.substr(0, 1000));
      CHECK(code == 128 + sig);
      CHECK_MESSAGE(!contains_ci(err, "terminate called"), "uncaught exception");
      for (const auto& [p, e] : list_tree(box / "out")) {
        CAPTURE(p);
        CHECK_MESSAGE(fs::path(p).filename().string()[0] != '.', "temporary file left: ", p);
        if (fs::path(p).filename().string()[0] == '.') continue;
        WavInfo w;
        CHECK_MESSAGE(audio_opens(box / "out" / p, &w), "unreadable output left: ", p);
        CHECK_MESSAGE(w.frames == kFrames * 1920, "partial output left: ", p, " (", w.frames, " samples)");
      }
    }
  }
}

TEST_CASE("classes: --threads beyond this machine warns and gives the same bytes") {
  SEED_INFO();
  const Sandbox& fx = fixture();
  Sandbox box("clsthr");
  copy_to(fx / "enc/b.wav", box / "b.wav");
  copy_to(fx / "dec/b.mimi", box / "b.mimi");
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : int(std::thread::hardware_concurrency());
  REQUIRE(box.sh("mimi encode b.wav -o t0.mimi --threads 0 -q && mimi decode b.mimi -o t0.wav --threads 0 -q").code == 0);
  for (const int n : {3, 64, 1000}) {
    const std::string name = "threads/" + std::to_string(n);
    SUBCASE(name.c_str()) {
      const std::string t = "t" + std::to_string(n);
      const std::string cmd = "mimi encode b.wav -o " + t + ".mimi --threads " + std::to_string(n) + " && mimi decode b.mimi -o " +
                              t + ".wav --threads " + std::to_string(n);
      const Run r = box.sh(cmd, 120);
      INFO("class: --threads; this process may use ", cpus, " CPUs; command: ", cmd);
      INFO("exit ", r.code, "; stderr: ", r.err.substr(0, 1500));
      check_sane(r);
      CHECK(r.code == 0);
      if (n > cpus) {
        int warned = 0;
        for (const std::string& l : lines_of(r.err)) warned += contains_ci(l, "warn") && l.find("--threads") != std::string::npos;
        CHECK_MESSAGE(warned >= 2, "expected a warning naming --threads from encode and from decode, got ", warned);
      }
      CHECK_MESSAGE(slurp(box / (t + ".mimi")) == slurp(box / "t0.mimi"), "codes differ from --threads 0");
      CHECK_MESSAGE(slurp(box / (t + ".wav")) == slurp(box / "t0.wav"), "audio differs from --threads 0");
    }
  }
}

// ------------------------------------------------------------------------------------------
// The first fresh probe's findings (issue 26), each swept as the class it belongs to.
TEST_CASE("classes: probe findings (memory and descriptor limits, long names, misleading hints, shrunk items)") {
  Sandbox box("clsprobe");
  put_tone(box / "a.wav", 220);
  put_tone(box / "long.wav", 330, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 24000 * 12);
  for (int i = 0; i < 4; ++i) copy_to(box / "a.wav", box / ("in" + std::to_string(i) + ".wav"));
  SUBCASE("address-space limits: every outcome is 0 or 75, never libgomp's 1 or an abort") {
    // between "nothing loads" and "everything fits": bad_alloc on the main thread, in a reader
    // thread (std::terminate), and libgomp's exit(1) when it cannot create threads
    for (int kb = 16000; kb <= 64000; kb += 4000) {
      for (const char* cmd : {"mimi encode long.wav a.wav -o q/ -f -q", "mimi encode long.wav in0.wav --batch 2 -o qb/ -f -q"}) {
        const Run r = box.sh("ulimit -v " + std::to_string(kb) + "; " + cmd);
        CAPTURE(kb);
        CAPTURE(cmd);
        CAPTURE(r.err);
        // 127: below what the dynamic loader needs to map mimi's libraries, before mimi runs
        if (loader_gave_up(r)) continue;
        check_sane(r);
        CHECK((r.code == 0 || r.code == 75));
        for (const std::string& h : hidden(list_tree(box.dir))) CHECK_MESSAGE(false, "left behind: " << h);
      }
    }
  }
  SUBCASE("address-space limits just above what the loader needs: a library's initializer ending the process is the machine's 75") {
    // Between "the loader cannot map the libraries" (127) and "main runs" lies a window of a few
    // hundred KB where libgomp's initializer (libsoxr's OpenMP) cannot allocate and calls exit(1)
    // before main. Where the window falls moves with the binary's size, so the limit at which the
    // loader first succeeds is found by bisection and the window above it swept in 20 KB steps.
    const auto loader_fails = [&](int kb) {
      const Run r = box.sh("ulimit -v " + std::to_string(kb) + "; mimi --version");
      return r.code == 127 && contains_ci(r.err, "error while loading shared libraries");
    };
    // lo: the loader fails there; below ~8 MB it may crash itself instead (SIGSEGV), so lo is the
    // first step up from 4 MB where it says so. hi: it does not fail there.
    int lo = 4000, hi = 256000;
    while (lo < 64000 && !loader_fails(lo)) lo += 2000;
    REQUIRE(loader_fails(lo));
    REQUIRE_FALSE(loader_fails(hi));
    while (hi - lo > 20) (loader_fails((lo + hi) / 2) ? lo : hi) = (lo + hi) / 2;
    for (int kb = hi; kb <= hi + 1200; kb += 20) {
      const Run r = box.sh("ulimit -v " + std::to_string(kb) + "; mimi --version");
      CAPTURE(kb);
      CAPTURE(r.err);
      // 127: the dynamic loader gave up before mimi ran ("error while loading shared libraries",
      // "cannot allocate TLS data structures", "out of memory"); mimi's own codes never include it
      if (r.code == 127) continue;
      check_sane(r);
      CHECK((r.code == 0 || r.code == 75));
    }
  }
  SUBCASE("open-file limits: --batch never promises slots it cannot open; the dataset worker's own files are the machine's") {
    for (int n = 4; n <= 12; ++n) {
      const Run r = box.sh("ulimit -n " + std::to_string(n) + "; mimi encode in0.wav in1.wav in2.wav in3.wav --batch 4 -o ob" +
                           std::to_string(n) + "/ -q");
      CAPTURE(n);
      CAPTURE(r.err);
      // 127: the dynamic loader itself has no descriptor left (inherited ones count), before mimi runs
      if (loader_gave_up(r)) continue;
      check_sane(r);
      CHECK((r.code == 0 || r.code == 75));
      if (r.code == 0) CHECK(list_tree(box / ("ob" + std::to_string(n))).size() == 4);
    }
    REQUIRE(box.sh("mkdir -p c && cp a.wav in1.wav c/ && mimi dataset plan c -o plan --shards 1 -q").code == 0);
    for (int n = 3; n <= 8; ++n) {
      const Run r = box.sh("ulimit -n " + std::to_string(n) + "; mimi dataset encode --plan plan --shard 0/1 -o ds" +
                           std::to_string(n) + " -q");
      CAPTURE(n);
      CAPTURE(r.err);
      check_sane(r);
      if (loader_gave_up(r)) continue;  // the loader's
      CHECK((r.code == 0 || r.code == 75));
    }
  }
  SUBCASE("an output name of up to 255 bytes is writable (its hidden temporary is cut, not the output)") {
    for (size_t len : {200, 230, 245, 250}) {
      const std::string stem(len - 5, 'y');
      copy_to(box / "a.wav", box / (stem + ".wav"));
      const Run r = box.sh("mimi encode " + stem + ".wav -o names/ -q");
      CAPTURE(len);
      CHECK_MESSAGE(r.code == 0, r.err);
      CHECK(fs::exists(box / "names" / (stem + ".mimi")));
    }
  }
  SUBCASE("random bytes named like audio: no hint that cannot be followed") {
    for (const char* name : {"junk.wav", "junk.flac", "junk.ogg"}) {
      std::string bytes(4096, '\0');
      std::mt19937 rng{static_cast<unsigned>(seed())};
      for (char& c : bytes) c = char(rng());
      box.put(name, bytes);
      const Run r = box.sh(std::string("mimi encode ") + name + " -o j/ -q");
      CHECK(r.code == 3);
      CHECK(error_names(r.err, name));
      CHECK_MESSAGE(!contains_ci(r.err, "--raw-format"), r.err);
    }
  }
  SUBCASE("second probe: token files never under audio or unknown names; collisions say so; a device is no manifest") {
    for (const char* out : {"x.wav", "x.mp3", "x.flac", "x.bin"}) {
      const Run r = box.sh(std::string("mimi encode a.wav -o ") + out + " -q");
      CAPTURE(out);
      CHECK(r.code == 2);
      CHECK(!fs::exists(box / out));
    }
    CHECK(box.sh("mimi encode a.wav -o x.bin --format npy -q").code == 0);
    REQUIRE(box.sh("mkdir -p d2 && cp a.wav d2/a.wav").code == 0);
    const Run c = box.sh("mimi encode a.wav d2/a.wav -o coll/ -q");
    CHECK(c.code == 5);
    CHECK_MESSAGE(contains_ci(c.err, "another input"), c.err);
    CHECK_MESSAGE(!contains_ci(c.err, "--force"), c.err);
    const Run z = box.sh("timeout 20 mimi dataset plan /dev/zero -o pz --shards 1 -q");
    CHECK(z.code == 3);
    CHECK_MESSAGE(contains_ci(z.err, "device"), z.err);
  }
  SUBCASE("a file shorter than planned is the item's error in the worker, as in verify") {
    REQUIRE(box.sh("mkdir -p s && cp long.wav s/ && mimi dataset plan s -o splan --shards 1 -q").code == 0);
    REQUIRE(box.sh("truncate -s 48044 s/long.wav").code == 0);  // 1 s of the 12 planned
    const Run r = box.sh("mimi dataset encode --plan splan --shard 0/1 -o sds -q");
    CHECK_MESSAGE(r.code == 0, r.err);
    CHECK(box.sh("grep -q long sds/shards/shard-00000.errors.jsonl").code == 0);
    const Run v = box.sh("mimi dataset verify sds -q");
    CHECK_MESSAGE(v.code == 0, v.err);  // worker and verify agree: an error recorded, nothing short in the tar
  }
}
