// The third fresh probe's findings (issue 26), each swept as the class it belongs to (the dataset
// bookkeeping ones are in tests/dataset/, the weights/config sources in test_weights_frozen.cpp, decode
// --batch over mixed codebook counts in test_cli.cpp):
//   - a memory limit that lands inside libsoxr's resampler set-up (it crashed: SIGSEGV) -> 75
//   - bench options: every bad value is a usage error (a crash, exit 70 and exit 75 before)
//   - a FIFO with no writer among the inputs is named on stderr while it is waited for
//   - `info` over several files is one JSON document
//   - a float sample beyond the accepted range is named as such, with the limit
#include <doctest/doctest.h>

#include <algorithm>
#include <sndfile.h>
#include <sys/stat.h>

#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli.h"

using namespace mimi::test;

namespace {

std::vector<float> sine(double hz, int64_t frames, int channels, int rate) {
  std::vector<float> v(size_t(frames * channels));
  for (int64_t i = 0; i < frames; ++i)
    for (int c = 0; c < channels; ++c) v[size_t(i * channels + c)] = float(0.3 * std::sin(2 * M_PI * hz * double(i) / rate));
  return v;
}

// Runs `cmd` under `ulimit -v kb`; 127 with the loader's message means below what the dynamic
// loader needs to map the libraries, before mimi runs (not mimi's outcome).
Run limited(const Sandbox& box, int kb, const std::string& cmd) {
  return box.sh("ulimit -v " + std::to_string(kb) + "; " + cmd);
}

// One point of a memory-limit sweep: `cmd` under `ulimit -v kb` ends 0 or 75, sanely; its exit
// code counted in outcomes[256] (the loader giving up before mimi runs is not counted).
void sweep_point(const Sandbox& box, int kb, const std::string& cmd, int* outcomes) {
  const Run r = limited(box, kb, cmd);
  CAPTURE(kb);
  CAPTURE(r.err);
  if (loader_gave_up(r)) return;
  check_sane(r);
  CHECK_MESSAGE((r.code == 0 || r.code == 75), "exit ", r.code);
  ++outcomes[r.code & 255];
}

// The options of `mimi COMMAND` that take a value, from its own --help: {"--n-q", "INT"}, ...
// (a line "  [-x,]--name TYPE..." whose TYPE starts with a capital).
std::vector<std::pair<std::string, std::string>> value_options(const Sandbox& box, const std::string& command) {
  const Run help = box.sh("mimi " + command + " --help");
  REQUIRE(help.code == 0);
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream lines(help.out);
  for (std::string l; std::getline(lines, l);) {
    const size_t dd = l.find("--");
    if (dd == std::string::npos || l.find_first_not_of(" -,abcdefghijklmnopqrstuvwxyz") < dd) continue;
    const size_t sp = l.find(' ', dd);
    if (sp == std::string::npos || l.size() <= sp + 1) continue;
    // the value's type (TEXT, INT, ...): all capitals; a flag's "Excludes: --stream" is no type
    const std::string type = l.substr(sp + 1, l.find_first_of(" :=", sp + 1) - sp - 1);
    if (type.empty() || !std::all_of(type.begin(), type.end(), [](char ch) { return ch >= 'A' && ch <= 'Z'; })) continue;
    out.emplace_back(l.substr(dd, sp - dd), type);
  }
  return out;
}

}  // namespace

TEST_CASE("classes: memory limits around the resampler's set-up give 0 or 75, never a crash") {
  Sandbox box("clsp3mem");
  // resampled inputs (16 kHz stereo, 44.1 kHz mono), as a file and as a dataset item
  write_wav(box / "x16.wav", sine(300, 16000 * 6, 2, 16000), 16000, 2, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  write_wav(box / "y44.wav", sine(200, 44100 * 3, 1, 44100), 44100, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  box.put("list.txt", "x16.wav\ny44.wav\n");
  REQUIRE(box.sh("mimi dataset plan list.txt -o plan --shards 1 -q").code == 0);
  const std::vector<std::string> cmds = {"rm -rf out; mimi dataset encode --plan plan --shard 0/1 -o out -q",
                                         "mimi encode x16.wav y44.wav -o q/ -f -q",
                                         "mimi encode x16.wav y44.wav --batch 2 -o qb/ -f -q"};
  for (const std::string& cmd : cmds) {
    CAPTURE(cmd);
    // Where each allocation fails depends on the binary, and the outcome is not monotonic in the
    // limit (threads, arenas): a coarse sweep of 16-160 MB in 3 MB steps, and a fine one (125 KB,
    // the crash showed in a 250 KB window) over the 8 MB below a limit that works, found by bisection.
    int lo = 4000, hi = 400000;  // lo fails, hi works (KB)
    REQUIRE(limited(box, hi, cmd).code == 0);
    while (hi - lo > 125) {
      const int mid = (lo + hi) / 2;
      (limited(box, mid, cmd).code == 0 ? hi : lo) = mid;
    }
    std::vector<int> limits;
    for (int kb = 16000; kb <= 160000; kb += 3000) limits.push_back(kb);
    for (int kb = hi; kb >= std::max(4000, hi - 8000); kb -= 125) limits.push_back(kb);
    int outcomes[256] = {0};
    for (const int kb : limits) sweep_point(box, kb, cmd, outcomes);
    MESSAGE(cmd << ": works from " << hi << " KB; below it 0 x" << outcomes[0] << ", 75 x" << outcomes[75]);
  }
}

TEST_CASE("classes: every bad bench option value is a usage error (exit 2) before any work") {
  Sandbox box("clsp3bench");
  const std::vector<std::string> bad = {"--runs 0",        "--runs -2",        "--runs x",         "--seconds -1",
                                        "--seconds 0",     "--seconds nan",    "--seconds inf",    "--seconds 1e9",
                                        "--seconds 1,nan", "--seconds ''",     "--chunk -1",       "--chunk 1e12",
                                        "--latency-frames -5", "--n-q 0",     "--n-q 33",         "--batch 0",
                                        "--batch 5000",    "--threads -1",     "--threads 99999"};
  for (const std::string& a : bad) {
    CAPTURE(a);
    const Run r = box.sh("mimi bench " + a + " --weights \"$MIMI_WEIGHTS\" --latency-frames 0", 60);
    check_sane(r);
    CHECK(r.code == 2);
    CHECK(r.out.empty());  // refused before any table line
  }
  // and the edge values that are fine still run
  const Run ok = box.sh("mimi bench --runs 1 --seconds 0.5 --chunk 0 --latency-frames 0 --weights \"$MIMI_WEIGHTS\"", 120);
  CHECK(ok.code == 0);
}

TEST_CASE("classes: a FIFO among the inputs is named while it is waited for, and read once a writer comes") {
  Sandbox box("clsp3fifo");
  write_wav(box / "a.wav", sine(220, 24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(mkfifo((box / "f.wav").c_str(), 0600) == 0);
  // no writer ever: the run waits (like cat), but says which input it waits for
  const Run stuck = box.sh("timeout -s KILL 5 mimi encode f.wav a.wav -o out/", 30);
  CHECK(stuck.code == 137);
  CHECK(stuck.err.find("f.wav") != std::string::npos);
  CHECK(contains_ci(stuck.err, "waiting for its writer"));
  // a writer that comes after the warning: both inputs encoded, the FIFO's codes those of its bytes
  const Run late = box.sh("(sleep 3; cat a.wav > f.wav) & mimi encode f.wav a.wav -o late/ -q; rc=$?; wait; exit $rc", 60);
  CHECK(late.code == 0);
  CHECK(slurp(box / "late/f.mimi") == slurp(box / "late/a.mimi"));
  // token inputs and the --stream path take the same way in
  REQUIRE(box.sh("mimi encode a.wav -o a.mimi -q").code == 0);
  for (const std::string& cmd : {std::string("mimi decode f.wav -o d.wav -f"), std::string("mimi info f.wav"),
                                 std::string("mimi encode --stream f.wav -o s.mimi -f")}) {
    CAPTURE(cmd);
    const Run r = box.sh("timeout -s KILL 4 " + cmd, 30);
    CHECK(r.code == 137);
    CHECK(r.err.find("f.wav") != std::string::npos);
  }
}

TEST_CASE("classes: info prints one JSON document for any number of files, one object for each (bad ones too)") {
  Sandbox box("clsp3info");
  write_wav(box / "a.wav", sine(220, 12000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode a.wav -o a.mimi -q && mimi encode a.wav -o a.npy -q").code == 0);
  box.put("junk.bin", "neither");
  const std::vector<std::string> pool = {"a.wav", "a.mimi", "a.npy", "junk.bin", "\"$MIMI_WEIGHTS\""};
  uint32_t seed = 3;
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<std::string> files;
    const int n = 1 + trial % 4;
    for (int i = 0; i < n; ++i) {
      seed = seed * 1103515245u + 12345u;
      files.push_back(pool[(seed >> 16) % pool.size()]);
    }
    std::string args;
    int good = 0;
    for (const std::string& f : files) args += " " + f, good += f != "junk.bin";
    CAPTURE(args);
    for (const char* mode : {"", " --json"}) {
      CAPTURE(mode);
      const Run r = box.sh("mimi info" + args + mode);
      check_sane(r);
      CHECK(r.code == (good == n ? 0 : 3));
      // one object per file named, in order; a bad one says so (the eighth probe: records that
      // left bad files out did not line up with the arguments, unlike encode/decode --json)
      std::vector<nlohmann::json> objects;
      if (*mode) {  // JSON Lines
        for (size_t p = 0; p < r.out.size(); p = r.out.find('\n', p) + 1) {
          const size_t e = r.out.find('\n', p);
          if (e == std::string::npos) break;
          nlohmann::json o;
          REQUIRE_NOTHROW(o = nlohmann::json::parse(r.out.substr(p, e - p)));
          objects.push_back(o);
        }
      } else {
        nlohmann::json j;
        REQUIRE_NOTHROW(j = nlohmann::json::parse(r.out));
        if (n == 1) {
          CHECK(j.is_object());
          objects.push_back(j);
        } else {
          REQUIRE(j.is_array());
          for (const auto& o : j) objects.push_back(o);
        }
      }
      REQUIRE(int(objects.size()) == n);
      for (int i = 0; i < n; ++i) CHECK((objects[size_t(i)].value("kind", "") == "error") == (files[size_t(i)] == "junk.bin"));
    }
  }
}

TEST_CASE("classes: a float sample out of range is refused naming the value and the limit") {
  Sandbox box("clsp3float");
  for (float v : {5000.0f, -1001.0f, 1e30f}) {
    std::vector<float> x = sine(220, 2400, 1, 24000);
    x[1234] = v;
    write_wav(box / "f.wav", x, 24000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
    const Run r = box.sh("mimi encode f.wav -o f.mimi -f");
    CAPTURE(v);
    CAPTURE(r.err);
    CHECK(r.code == 3);
    CHECK(r.err.find("sample 1234") != std::string::npos);
    CHECK(r.err.find("1000") != std::string::npos);
    CHECK(!contains_ci(r.err, "must be finite;"));
  }
  // within the range: accepted as is (float audio louder than full scale is clipped by no one)
  std::vector<float> x = sine(220, 2400, 1, 24000);
  x[10] = 999.0f;
  write_wav(box / "g.wav", x, 24000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
  CHECK(box.sh("mimi encode g.wav -o g.mimi -q").code == 0);
}

// Every number option of every command, from the commands' own --help: an empty value (an unset
// shell variable), NaN, a huge, a negative and a non-numeric value are each a usage error naming
// the option (CLI11 reads '' as 0, and NaN passes its Range), before anything is read or written.
TEST_CASE("classes: whole-number options read leading zeros as decimal") {
  Sandbox box("clsp3dec");
  write_wav(box / "in.wav", sine(220, 4800, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  // octal would read 010 as 8 and refuse 08; decimal: 10 (past the tiny model's 8 books) and 8
  const Run ten = box.sh("mimi encode in.wav -o a.mimi --n-q 010 2>&1");
  CHECK(ten.code != 0);
  CHECK(ten.out.find("got 10") != std::string::npos);
  CHECK(box.sh("mimi encode in.wav -o b.mimi --n-q 08 -q && mimi encode in.wav -o c.mimi --n-q 8 -q").code == 0);
  CHECK(box.get("b.mimi") == box.get("c.mimi"));
  CHECK(box.sh("mimi gen-weights --seed 010 -o s010.safetensors -q && mimi gen-weights --seed 10 -o s10.safetensors -q && "
               "mimi gen-weights --seed 8 -o s8.safetensors -q").code == 0);
  CHECK(box.get("s010.safetensors") == box.get("s10.safetensors"));
  CHECK(box.get("s010.safetensors") != box.get("s8.safetensors"));
}

TEST_CASE("classes: every number option refuses '', nan, 1e99, -1 and x, naming the option") {
  Sandbox box("clsp3nums");
  const std::vector<std::string> commands = {"encode",  "decode",       "roundtrip",      "bench",
                                             "gen-weights", "dataset plan", "dataset encode", "convert"};
  int checked = 0;
  for (const std::string& c : commands) {
    for (const auto& option : value_options(box, c)) {
      const std::string& opt = option.first;  // (not a structured binding: CAPTURE takes it in a lambda)
      if (option.second != "INT" && option.second != "UINT" && option.second != "FLOAT") continue;
      std::vector<std::string> values = {"''", "nan", "1e99", "-1", "x"};
      // whole numbers in decimal only: no hex, no value past 64 bits (the fifth probe: '0x8' was 8,
      // '010' octal 8, 99999999999999999999 saturated to 2^64 - 1)
      if (option.second != "FLOAT") values.insert(values.end(), {"0x1", "99999999999999999999", "1.5"});
      for (const std::string& v : values) {
        const Run r = box.sh("mimi " + c + " " + opt + " " + v + " in.wav -o out.x 2>&1 >/dev/null", 30);
        CAPTURE(c);
        CAPTURE(opt);
        CAPTURE(v);
        CAPTURE(r.out);
        check_sane(r);
        CHECK(r.code == 2);
        CHECK(r.out.find(opt) != std::string::npos);
        ++checked;
      }
    }
  }
  CHECK(checked >= 5 * 20);  // the parse found the options
  CHECK(list_tree(box.dir).empty());
}

// Every option of every command, from the commands' own --help, given an empty value (an unset
// shell variable) is a usage error naming it: never a quiet default ($MIMI_WEIGHTS, beside the
// input, 24 kHz, the synthetic signal...). The fourth probe found --weights '', --config '',
// -o '', --sample-rate '' and bench --input '' taking their defaults.
TEST_CASE("classes: every option given '' is a usage error naming it") {
  Sandbox box("clsp3empty");
  write_wav(box / "in.wav", sine(220, 2400, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  // each command with what it requires otherwise (a required option is left out when it is the
  // one under test), so the empty value is what the parse meets
  const std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> commands = {
      {"encode", {{"", "in.wav"}}},
      {"decode", {{"", "in.wav"}}},
      {"roundtrip", {{"", "in.wav"}}},
      {"convert", {{"", "in.wav"}, {"--output", "x.txt"}}},
      {"info", {{"", "in.wav"}}},
      {"bench", {}},
      {"gen-weights", {{"--output", "gw.safetensors"}}},
      {"gpu-trace", {{"--output", "t.jsonl"}}},
      {"dataset plan", {{"", "in.wav"}, {"--output", "p"}}},
      {"dataset encode", {{"--plan", "p"}, {"--shard", "0/1"}, {"--output", "o"}}},
      {"dataset status", {{"", "o"}}},
      {"dataset verify", {{"", "o"}}}};
  int checked = 0;
  for (const auto& [c, required] : commands) {
    for (const auto& option : value_options(box, c)) {  // every option that takes a value (TEXT, INT, ...)
      const std::string& opt = option.first;
      std::string rest;
      for (const auto& [flag, value] : required)
        if (flag != opt) rest += " " + (flag.empty() ? value : flag + " " + value);
      const Listing before = list_tree(box.dir);
      const Run r = box.sh("MIMI_WEIGHTS=/nonexistent/w.safetensors mimi " + c + " " + opt + " ''" + rest + " 2>&1 >/dev/null", 30);
      CAPTURE(c);
      CAPTURE(opt);
      CAPTURE(r.out);
      check_sane(r);
      CHECK(r.code == 2);
      CHECK(r.out.find(opt) != std::string::npos);
      CHECK(list_tree(box.dir) == before);
      ++checked;
    }
  }
  CHECK(checked >= 40);
  const Run pos = box.sh("mimi encode '' in.wav -o out/ 2>&1");
  CHECK(pos.code == 2);
  CHECK(contains_ci(pos.out, "empty file name"));
}

// The codec libraries under libsndfile leave allocations unchecked (app/formats/sndfile_io.h):
// a hostile probe found `decode -o x.ogg` dying of SIGSEGV under `ulimit -v` at 36-46 MB every
// time (libvorbis: its analysis buffer's realloc, its encoder's set-up when an output given up is
// closed, an alloca of every sample it holds on a main-thread stack that could not grow). Swept
// here for OGG at the model's rate and resampled, and for FLAC and WAV: every outcome 0 or 75.
TEST_CASE("classes: decoding under a memory limit gives 0 or 75 for every container, never a crash") {
  Sandbox box("clsp3dec");
  write_wav(box / "in.wav", sine(440, 24000 * 20, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode in.wav -o c.mimi -q").code == 0);
  for (const std::string out : {"o.ogg", "o.ogg --sample-rate 44100", "o.flac", "o.wav --sample-rate 48000"}) {
    CAPTURE(out);
    int outcomes[256] = {0};
    for (int kb = 26000; kb <= 64000; kb += 1000) sweep_point(box, kb, "rm -f o.*; mimi decode c.mimi -q -o " + out, outcomes);
    MESSAGE(out << ": 0 x" << outcomes[0] << ", 75 x" << outcomes[75]);
    CHECK(outcomes[0] > 0);  // the sweep reached limits where it works
  }
}
