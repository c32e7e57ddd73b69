// Generated sweeps of the third probe's findings: the dataset commands agree with each other and
// with the files, whatever was done to them.
//   R05: every field of a .done tampered in turn (gone, mistyped, impossible, plausibly off):
//        verify fails naming the field, and status does not count the shard (naming it) unless
//        the field is one it neither presents nor can check without reading the index or tar.
//   R07: random replans, encodes that fail their budget, dataset.json removed by hand: whatever
//        status lists, the worker runs; what the worker refuses, status refuses with the same
//        message; a refused command changes nothing in OUT.
//   R08: random channels, starts, ends and durations against random file headers: each item the
//        header condemns is a bad entry at plan time (every reason named, --skip-bad leaves out
//        exactly those), and the worker meets no error the plan could have foreseen.
//   R09: --max-errors against a model of its grammar (random strings), and a table of empty,
//        blank and malformed values of every option of the dataset commands: exit 2, nothing
//        written, no model loaded.
// Seeded by MIMI_TEST_SEED (default 26), as tests/dataset/test_dataset_paths.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>

#include "app/dataset/dataset.h"
#include "codec/error.h"
#include "support/cli.h"

using namespace mimi;
using namespace mimi::test;
namespace ds = mimi::app::dataset;
using nlohmann::json;

namespace {

void put_wav(const Sandbox& box, const std::string& name, double seconds, int channels = 1, int rate = 24000) {
  WavSpec s;
  s.channels = uint16_t(channels);
  s.rate = uint32_t(rate);
  s.data = s16_bytes(tone(std::llround(seconds * rate), channels, rate));
  box.put(name, make_wav(s));
}

// The text of mimi's first "error: " line.
std::string error_line(const std::string& err) {
  const size_t p = err.find("error: ");
  if (p == std::string::npos) return "";
  const size_t e = err.find('\n', p);
  return err.substr(p + 7, e == std::string::npos ? std::string::npos : e - p - 7);
}

std::set<int> parse_ranges(const std::string& text) {
  std::set<int> out;
  std::string t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  size_t pos = 0;
  while (pos < t.size()) {
    size_t comma = t.find(',', pos);
    if (comma == std::string::npos) comma = t.size();
    const std::string r = t.substr(pos, comma - pos);
    const size_t dash = r.find('-');
    const int a = std::stoi(r.substr(0, dash)), b = dash == std::string::npos ? a : std::stoi(r.substr(dash + 1));
    for (int i = a; i <= b; ++i) out.insert(i);
    pos = comma + 1;
  }
  return out;
}

}  // namespace

// ---- R05

TEST_CASE("dataset books: every field of a .done is held to the files: each tampered field fails verify by name, "
          "and status does not count it") {
  Sandbox box("dsd");
  put_wav(box, "a.wav", 0.7);
  put_wav(box, "b.wav", 1.1);
  put_wav(box, "c.wav", 0.4);
  box.put("bad.wav", "not audio");
  box.put("list.txt", "a.wav\nb.wav\nc.wav\nbad.wav\n");
  REQUIRE(box.sh("mimi dataset plan list.txt -o plan --shards 2 -q && mimi dataset encode -q --plan plan --shard 0/2 -o out"
                 " && mimi dataset encode -q --plan plan --shard 1/2 -o out && cp -r out good")
              .code == 0);
  REQUIRE(box.sh("mimi dataset verify out").code == 0);
  const std::string done_file = "out/shards/" + ds::shard_name(0) + ".done";
  const json done = json::parse(box.get(done_file));
  // Records of when, which nothing recomputes: only impossible values can be caught.
  const std::set<std::string> times = {"started", "finished", "last_run_seconds"};
  // What status could hold to nothing without reading the index or hashing the tar (it presents
  // neither); verify holds them to the files.
  const std::set<std::string> unseen_by_status = {"frames", "tar_sha256"};
  struct Tamper {
    std::string field, what;
    json record;
    bool gross;  // missing, mistyped or impossible: caught by the cheap checks too
  };
  std::vector<Tamper> tampers;
  // Every field the worker writes, taken from its own record: a field added later is swept too.
  for (const auto& field : done.items()) {
    const std::string k = field.key();
    const json& v = field.value();
    auto with = [&](const json& x) {
      json d = done;
      d[k] = x;
      return d;
    };
    json gone = done;
    gone.erase(k);
    tampers.push_back({k, "removed", gone, true});
    tampers.push_back({k, "null", with(nullptr), true});
    tampers.push_back({k, "-1", with(-1), true});
    tampers.push_back({k, "1e15", with(int64_t(1000000000000000)), true});
    tampers.push_back({k, "of another type", v.is_string() ? with(7) : with("7"), true});
    if (times.count(k)) continue;
    if (v.is_number_unsigned()) {
      tampers.push_back({k, "one more", with(v.get<uint64_t>() + 1), false});
      if (v.get<uint64_t>() > 0) tampers.push_back({k, "one less", with(v.get<uint64_t>() - 1), false});
    } else if (v.is_number()) {
      tampers.push_back({k, "one sample more", with(v.get<double>() + 1.0 / 24000), false});
      tampers.push_back({k, "doubled", with(v.get<double>() * 2 + 1), false});
    } else if (v.is_string()) {
      std::string t = v.get<std::string>();
      REQUIRE(!t.empty());
      t.back() = t.back() == '0' ? '1' : '0';
      tampers.push_back({k, "one character changed", with(t), false});
    } else {
      FAIL("a .done field of a kind this sweep does not know: " << k);
    }
  }
  json extra = done;
  extra["note"] = "hand-made";
  tampers.push_back({"note", "a field the worker never writes", extra, true});
  CHECK(tampers.size() > 100);
  for (const Tamper& t : tampers) {
    CAPTURE(t.field);
    CAPTURE(t.what);
    REQUIRE(box.sh("rm -rf out && cp -r good out").code == 0);
    box.put(done_file, t.record.dump(1) + "\n");
    const std::string named = "'" + t.field + "'";
    const Run v = box.sh("mimi dataset verify out");
    CHECK(v.code == 3);
    CHECK_MESSAGE(v.err.find(named) != std::string::npos, v.err.substr(0, 2000));
    if (!t.gross && unseen_by_status.count(t.field)) continue;
    const Run s = box.sh("mimi dataset status out --format json");
    REQUIRE_MESSAGE(s.code == 0, s.err);
    const json st = json::parse(s.out);
    CHECK(st["shards"][0]["state"] != "done");
    CHECK(st["done"] == 1);
    CHECK_MESSAGE(s.err.find(named) != std::string::npos, s.err.substr(0, 2000));
  }
  // What status lists, the worker redoes, byte for byte, and the output verifies again.
  REQUIRE(box.sh("rm -rf out && cp -r good out").code == 0);
  json zero = done;
  zero["audio_seconds"] = 0;  // the probe's case: 0.000 h done shown for a finished shard
  box.put(done_file, zero.dump(1) + "\n");
  CHECK(box.sh("mimi dataset status out --todo --format ranges").out == "0\n");
  const Run e = box.sh("mimi dataset encode -q --plan plan --shard 0/2 -o out");
  CHECK_MESSAGE(e.code == 0, e.err);
  CHECK(box.get("out/shards/shard-00000.tar") == box.get("good/shards/shard-00000.tar"));
  CHECK(box.sh("mimi dataset verify out").code == 0);
  CHECK(box.sh("mimi dataset status out --todo --format ranges").out == "");
}

// ---- R07

TEST_CASE("dataset books: status and the worker agree on whose output OUT is: random replans, failed budgets and "
          "hand removals") {
  Sandbox box("dsa");
  std::mt19937 rng(test_seed());
  const std::vector<std::string> names = {"a.wav", "b.wav", "c.wav", "d.wav", "bad.wav"};
  for (size_t i = 0; i + 1 < names.size(); ++i) put_wav(box, names[i], 0.2 + 0.1 * double(i));
  box.put("bad.wav", "not audio");
  auto replan = [&](std::string list = "", int n = 0) {
    for (const std::string& name : names)
      if (n == 0 && rng() % 2) list += name + "\n";
    if (list.empty()) list = "a.wav\n";
    box.put("l.txt", list);
    const Run r = box.sh("mimi dataset plan l.txt -o plan -q -f --shards " + std::to_string(n ? n : 1 + int(rng() % 3)));
    REQUIRE_MESSAGE(r.code == 0, r.err);
  };
  auto shards = [&] { return json::parse(box.get("plan/plan.json"))["shards"].get<int>(); };
  auto encode = [&](int i, const std::string& extra) {
    return box.sh("mimi dataset encode -q --plan plan --shard " + std::to_string(i) + "/" + std::to_string(shards()) +
                  " -o out" + extra);
  };
  int refusals = 0, listed = 0, aside = 0, journals = 0;
  for (int round = 0; round < 14; ++round) {
    CAPTURE(round);
    if (round == 0) {  // first, surely: a shard stopped by its budget, then dataset.json removed and the plan replaced
      replan("bad.wav\na.wav\n", 1);
      CHECK(encode(0, " --max-errors 0").code == 3);
      box.sh("rm out/dataset.json");
      replan("a.wav\nb.wav\n", 1);
    }
    // one to three things a user does
    for (int k = 0, n = round == 0 ? 0 : 1 + int(rng() % 3); k < n; ++k) {
      const unsigned op = rng() % 6;
      if (op <= 1) replan();
      else if (op <= 3) CHECK(std::set<int>{0, 2, 3}.count(encode(int(rng() % unsigned(shards())), " --max-errors 0").code));
      else if (op == 4) box.sh("rm -f out/dataset.json");
      else box.sh("rm -rf out");
    }
    // status, then the worker on every shard: they must agree
    for (int attempt = 0; attempt < 4; ++attempt) {
      const int n = shards();
      const Run st = box.sh("mimi dataset status out --plan plan --todo --format ranges");
      if (st.code == 0) {
        const std::set<int> todo = parse_ranges(st.out);
        listed += int(todo.size());
        for (int i = 0; i < n; ++i) {
          CAPTURE(i);
          const Listing before = list_tree(box / "out");
          const Run e = encode(i, "");
          CHECK_MESSAGE(e.code == 0, "status listed ", st.out, " but the worker says: ", e.err);
          if (!todo.count(i)) CHECK(list_tree(box / "out") == before);  // done: nothing rewritten
        }
        CHECK(box.sh("mimi dataset status out --todo --format ranges").out == "");
        const Run v = box.sh("mimi dataset verify out");
        CHECK_MESSAGE(v.code == 0, v.err);  // every shard this plan's: nothing mixed in
        break;
      }
      // Refused: the reason is one the worker refuses with, word for word, and a refused worker
      // changes nothing.
      ++refusals;
      CHECK(st.code == 2);
      CHECK(st.out.empty());
      const std::string why = error_line(st.err);
      REQUIRE(!why.empty());
      bool same = false;
      for (int i = 0; i < n; ++i) {
        const Listing before = list_tree(box / "out");
        const Run e = encode(i, "");
        if (e.code != 0) {
          CHECK(e.code == 2);
          CHECK(list_tree(box / "out") == before);
          same |= error_line(e.err) == why;
        }
      }
      CHECK_MESSAGE(same, "status refuses with '", why, "' but no worker does");
      // then do what the message says
      if (why.find("another plan") != std::string::npos) {
        REQUIRE(box.sh("mv out out-aside-" + std::to_string(aside++)).code == 0);
      } else {
        const size_t j = why.find(".journal");
        REQUIRE(j != std::string::npos);
        ++journals;
        REQUIRE(box.sh("rm -f " + why.substr(0, j) + ".*").code == 0);
      }
    }
  }
  MESSAGE("seed " << test_seed() << ": " << refusals << " refusals (" << aside << " outputs of another plan moved aside, "
                  << journals << " journals of another plan removed), " << listed << " shards listed and run");
}

// ---- R08

TEST_CASE("dataset books: everything a header tells is checked at plan time: random channels, starts, ends and "
          "durations against random files") {
  Sandbox box("dsh");
  std::mt19937 rng(test_seed());
  struct File {
    std::string name;
    int channels, rate;
    double len;
    bool header_read = false;
  };
  std::vector<File> files;
  for (int i = 0; i < 8; ++i) {
    File f{std::string("f").append(std::to_string(i)).append(".wav"), 1 + int(rng() % 3), rng() % 2 ? 24000 : 16000,
           0.5 + 0.1 * double(rng() % 12)};
    put_wav(box, f.name, f.len, f.channels, f.rate);
    files.push_back(f);
  }
  // Times stay 13 ms or more from every threshold (the end of the file, the 0.5 s overshoot, the
  // worker's 0.05 s + 0.1 % shortfall), so that the model below needs no rounding rules.
  struct Entry {
    size_t file;
    int channel;  // -2: none given, -1: "mix"
    enum { Whole, Start, Segment, Nemo, Duration } kind;
    double start = 0, end = -1, duration = -1;
  };
  std::vector<Entry> entries;
  std::string text;
  for (int line = 1; line <= 80; ++line) {
    Entry e{rng() % files.size(), int(rng() % 7) - 2, Entry::Whole};
    File& f = files[e.file];
    e.kind = decltype(e.kind)(rng() % 5);
    const double starts[] = {0, 0.113, 0.413, f.len - 0.087, f.len + 0.013, f.len + 0.313};
    const double ends[] = {-0.3, -0.013, 0.013, 0.2, 0.487, 0.513, 0.9};  // after the end of the file
    const double shortfalls[] = {-0.2, 0.02, 0.3, 1.0};                  // of a duration given for the file
    // (appending: GCC 12 warns, wrongly, on "literal" + std::to_string(i))
    json j = {{"path", f.name}, {"id", std::string("e").append(std::to_string(line))}};
    if (e.channel == -1) j["channel"] = "mix";
    if (e.channel >= 0) j["channel"] = e.channel;
    if (e.kind != Entry::Whole && e.kind != Entry::Duration) e.start = starts[rng() % 6];
    if (e.kind == Entry::Segment || e.kind == Entry::Nemo) {
      e.end = f.len + ends[rng() % 7];
      if (e.end <= e.start) e.end = e.start + 0.2;  // (an empty segment is a malformed line: not this sweep)
    }
    if (e.kind == Entry::Duration) e.duration = f.len + shortfalls[rng() % 4];
    if (e.kind == Entry::Start || e.kind == Entry::Segment) j["start"] = e.start;
    if (e.kind == Entry::Segment) j["end"] = e.end;
    if (e.kind == Entry::Nemo) j["offset"] = e.start, j["duration"] = e.end - e.start;
    if (e.kind == Entry::Duration) j["duration"] = e.duration;
    // the plan reads a file's header when one of its items needs its length or names a channel
    f.header_read |= e.kind != Entry::Duration || e.channel >= 0;
    entries.push_back(e);
    text += j.dump() + "\n";
  }
  box.put("m.jsonl", text);
  // The model: why each line is a bad entry, and what each good one is planned as.
  std::map<int, std::vector<std::string>> bad;  // line -> words its message must hold
  std::map<std::string, std::pair<double, double>> planned;  // id -> (duration, end)
  std::set<std::string> fails_at_encode;  // a duration given for a file whose header no item needed
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const File& f = files[e.file];
    const int line = int(i + 1);
    const std::string id = std::string("e").append(std::to_string(line));
    std::vector<std::string> why;
    if (e.channel >= f.channels) why.push_back("channel " + std::to_string(e.channel));
    double duration = e.duration, end = e.end;
    if (e.kind != Entry::Whole && e.kind != Entry::Duration && e.start >= f.len) {
      why.push_back("starts at");
    } else if (end >= 0 && end - f.len > 0.5) {
      why.push_back("after the end of the file");
    } else if (e.kind == Entry::Duration && f.header_read && e.duration - f.len > 0.05 + 1e-3 * e.duration) {
      why.push_back("a duration of");
    } else if (end > f.len) {
      end = f.len;  // cut to the end of the file
    }
    if (e.kind == Entry::Duration && !f.header_read && e.duration - f.len > 0.05 + 1e-3 * e.duration)
      fails_at_encode.insert(id);
    if (!why.empty()) {
      bad[line] = why;
      continue;
    }
    if (end >= 0) duration = end - e.start;
    else if (duration < 0) duration = f.len - e.start;
    planned[id] = {duration, end};
  }
  REQUIRE(!bad.empty());
  REQUIRE(bad.size() < 100);  // every one printed, not counted
  Run r = box.sh("mimi dataset plan m.jsonl -o p1 --shards 2");
  CHECK(r.code == 3);
  CHECK(r.err.find(std::to_string(bad.size()) + " bad manifest entr") != std::string::npos);
  CHECK(!fs::exists(box / "p1/plan.json"));
  std::map<int, std::string> lines;  // line -> its warning
  for (size_t p = 0; (p = r.err.find("m.jsonl:", p)) != std::string::npos; p += 8) {
    const int line = std::atoi(r.err.c_str() + p + 8);
    const size_t e = r.err.find('\n', p);
    if (!lines.count(line)) lines[line] = r.err.substr(p, e == std::string::npos ? std::string::npos : e - p);
  }
  // (pairs, not structured bindings: doctest's CAPTURE is a lambda, and clang 14 cannot capture one)
  for (const auto& entry : bad) {
    const int line = entry.first;
    CAPTURE(line);
    REQUIRE_MESSAGE(lines.count(line), "no warning names line ", line);
    for (const std::string& w : entry.second)
      CHECK_MESSAGE(lines[line].find(w) != std::string::npos, lines[line], " lacks ", w);
  }
  for (const auto& entry : lines) CHECK_MESSAGE(bad.count(entry.first), "a good line named: ", entry.second);
  // --skip-bad leaves out exactly those, and plans the rest as the model says
  r = box.sh("mimi dataset plan m.jsonl -o p2 --shards 2 --skip-bad -q");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const json meta = json::parse(box.get("p2/plan.json"));
  CHECK(meta["items"] == planned.size());
  CHECK(meta["skipped_entries"] == bad.size());
  size_t seen = 0;
  for (int s = 0; s < 2; ++s) {
    const std::string t = box.get("p2/" + ds::shard_name(s) + ".jsonl");
    for (size_t pos = 0, nl; (nl = t.find('\n', pos)) != std::string::npos; pos = nl + 1) {
      const json it = json::parse(t.substr(pos, nl - pos));
      const std::string id = it["id"].get<std::string>();
      CAPTURE(id);
      REQUIRE(planned.count(id));
      ++seen;
      CHECK(it["duration"].get<double>() == doctest::Approx(planned[id].first).epsilon(1e-6));
      CHECK(it.value("end", -1.0) == doctest::Approx(planned[id].second).epsilon(1e-6));
    }
  }
  CHECK(seen == planned.size());
  // The worker meets only what the plan could not know: nothing else fails.
  for (int s = 0; s < 2; ++s) {
    const Run e = box.sh("mimi dataset encode -q --plan p2 --shard " + std::to_string(s) + "/2 -o out");
    REQUIRE_MESSAGE(e.code == 0, e.err);
  }
  std::set<std::string> failed;
  for (int s = 0; s < 2; ++s) {
    const std::string t = box.get("out/shards/" + ds::shard_name(s) + ".errors.jsonl");
    for (size_t pos = 0, nl; (nl = t.find('\n', pos)) != std::string::npos; pos = nl + 1)
      failed.insert(json::parse(t.substr(pos, nl - pos))["key"].get<std::string>());
  }
  CHECK(failed == fails_at_encode);
  CHECK(box.sh("mimi dataset verify out").code == 0);
}

// ---- R09

TEST_CASE("dataset books: --max-errors is digits or a percentage, nothing else: random strings against its grammar") {
  std::mt19937 rng(test_seed());
  const std::string alphabet = "0123456789.%+-ex nait\t";
  const std::regex count("[0-9]+"), percent("([0-9]+(\\.[0-9]+)?)%");
  size_t accepted = 0;
  for (int n = 0; n < 3000; ++n) {
    std::string s;
    for (int k = int(rng() % 6); k > 0; --k) s += alphabet[rng() % alphabet.size()];
    if (n < 200) {  // (half of the first ones well-formed, so that both sides are swept)
      s = std::to_string(rng() % 1000);
      if (rng() % 2) s += "." + std::to_string(rng() % 100) + "%";
    }
    CAPTURE(s);
    std::smatch m;
    double want = -2;  // -2: refused
    if (std::regex_match(s, count)) want = std::stod(s);
    else if (std::regex_match(s, m, percent) && std::stod(m[1].str()) <= 100) want = std::stod(m[1].str()) / 100 * 200;
    double got = -2;
    try {
      got = ds::max_errors_limit(s, 200);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::Usage);
      CHECK(std::string(e.what()).find("'" + s + "'") != std::string::npos);
    }
    CHECK(got == doctest::Approx(want));
    accepted += got != -2;
  }
  CHECK(accepted > 100);
}

TEST_CASE("dataset books: empty, blank and malformed values of the dataset options are usage errors that write "
          "nothing and load no model") {
  Sandbox box("dso");
  put_wav(box, "a.wav", 0.3);
  box.put("l.txt", "a.wav\n");
  REQUIRE(box.sh("mimi dataset plan l.txt -o plan --shards 1 -q && mimi dataset encode -q --plan plan --shard 0/1 -o out")
              .code == 0);
  const std::string enc = "mimi dataset encode --plan plan --shard 0/1 -o fresh";
  std::vector<std::string> cmds;
  // an unset variable, blanks, signs, exponents, hex, words, doubled or misplaced '%', other digits
  for (const char* v : {"''", "' '", "' 5'", "'5 '", "$'5\\n'", "+5", "-0", "1e1", "0x10", "nan", "inf", "5%%", "%5",
                        "'5 %'", "1.5", ".5%", "5.%", "101%", "$'\\xef\\xbc\\x95'"})
    cmds.push_back(enc + " --max-errors " + v);
  for (const char* c : {"mimi dataset encode --plan '' --shard 0/1 -o fresh", "mimi dataset encode --plan plan --shard '' -o fresh",
                        "mimi dataset encode --plan plan --shard ' 0/1' -o fresh", "mimi dataset encode --plan plan --shard 0/1 -o ''",
                        "mimi dataset encode --plan plan --shard 0/1 -o fresh --sync-seconds nan",
                        "mimi dataset encode --plan plan --shard 0/1 -o fresh --sync-seconds inf",
                        "mimi dataset encode --plan plan --shard 0/1 -o fresh --sync-seconds -1",
                        "mimi dataset status ''", "mimi dataset status out --plan ''", "mimi dataset status out --plan '' --format ranges",
                        "mimi dataset verify ''", "mimi dataset verify out --plan ''",
                        "mimi dataset plan l.txt -o '' --shards 1", "mimi dataset plan '' -o plan2 --shards 1",
                        "mimi dataset plan l.txt -o plan2 --shards 1 --probe-threads -1",
                        "mimi dataset plan l.txt -o plan2 --shard-hours nan", "mimi dataset plan l.txt -o plan2 --shard-hours inf",
                        "mimi dataset plan l.txt -o plan2 --shard-hours -1"})
    cmds.push_back(c);
  const Listing before = list_tree(box.dir);
  for (const std::string& c : cmds) {
    CAPTURE(c);
    // weights that are not there: a command that got as far as loading a model would exit 4
    const Run r = box.sh("MIMI_WEIGHTS=/nonexistent/w.safetensors " + c);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(list_tree(box.dir) == before);
  }
  // the well-formed values still work
  for (const char* v : {"0", "10", "2.5%", "100%", "0%"})
    CHECK(box.sh(std::string("mimi dataset encode -q --plan plan --shard 0/1 -o ok --max-errors ") + v).code == 0);
  CHECK(box.sh("mimi dataset status out --plan plan").code == 0);
  CHECK(box.sh("mimi dataset verify out --plan plan").code == 0);
}
