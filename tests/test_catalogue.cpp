// The bad-input catalogue (docs/RELIABILITY.md, "Bad-input catalogue"): for each bad input,
// option, output condition, stream, signal and race, the documented exit code, one error message
// that names the file and the problem, and no output or temporary file left behind.
//
// The table below is the specification: it states the required behaviour, not today's. Run one
// case with  test_catalogue -sc='*npy/descr-empty*'  (cases are SUBCASEs of "catalogue").
// MIMI_UPDATE_RELIABILITY_MD=1 test_catalogue -tc='*docs*' rewrites the table in the docs.
#include <doctest/doctest.h>
#include <signal.h>
#include <sndfile.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "app/formats/token_file.h"
#include "support/cli.h"
#include "support/golden.h"

using namespace mimi::test;
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

// The table lists only the fields a case needs.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace {

// ------------------------------------------------------------------------------------------
// The table

using Words = std::vector<std::vector<std::string>>;  // every group must match: one of its words

struct Outcome {
  int exit = 0;
  Words words;                       // stderr, case-insensitive
  std::vector<std::string> created;  // exactly these new paths (parents implied)
};

struct Case {
  std::string name;     // group/what
  std::string input;    // the bad input, in words (for the docs)
  std::string cmd;      // bash, run in the case's sandbox
  std::function<void(const Sandbox&)> setup;
  std::vector<Outcome> outcomes;  // [0] is the required one; more = equally acceptable
  bool batch = false;             // several inputs: several error lines allowed
  std::vector<std::string> may_appear;  // paths that may or may not appear
  std::function<std::string(const Sandbox&, const Run&)> extra;  // returns a problem, or ""
  int timeout = 60;
};

// The fixture: small valid inputs made once by the binary under test.
//   a.wav (1 s s16 tone), a.mimi / a.npy / a.txt / a.safetensors (its tokens), long.mimi (10 s)
const fs::path& fixture() {
  static Sandbox box("catfix");
  static const bool made = [] {
    write_wav(box / "a.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
    write_wav(box / "long.wav", tone(240000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
    const Run r = box.sh("mimi encode a.wav -q && mimi convert a.mimi -o a.npy -q && mimi convert a.mimi -o a.txt -q && "
                         "mimi convert a.mimi -o a.safetensors -q && mimi encode long.wav -q");
    INFO(r.err);
    REQUIRE(r.code == 0);
    return true;
  }();
  (void)made;
  return box.dir;
}

std::string fix(const std::string& name) { return slurp(fixture() / name); }

std::string tiny(const std::string& name) { return data_dir() + "/tiny/" + name; }

// safetensors weights as JSON header + data, to modify
struct StFile {
  ojson header;
  std::string data;
};
StFile read_st(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | uint8_t(bytes[size_t(i)]);
  return {ojson::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}
std::string write_st(const StFile& f) { return make_safetensors(f.header.dump(), f.data); }

// w/model.safetensors (modified tiny HF weights) with the tiny config.json beside it
void put_weights(const Sandbox& b, const std::function<void(StFile&)>& edit) {
  StFile f = read_st(slurp(tiny("weights.hf.safetensors")));
  edit(f);
  b.put("w/model.safetensors", write_st(f));
  b.put("w/config.json", slurp(tiny("config.json")));
}

// c.json: the tiny HF config with an edit
void put_config(const Sandbox& b, const std::string& file, const std::string& base,
                const std::function<void(ojson&)>& edit) {
  ojson j = ojson::parse(slurp(tiny(base)));
  edit(j);
  b.put(file, j.dump(2));
}

std::string mimi_with_header(const std::function<void(ojson&)>& edit) {
  MimiParts p = split_mimi(fix("a.mimi"));
  ojson h = ojson::parse(p.header);
  edit(h);
  p.header = h.dump();
  return join_mimi(p);
}

std::vector<float> tone1s() { return tone(24000, 1, 24000); }

std::string float_wav_with(float value, size_t at) {
  std::vector<float> v = tone1s();
  v[at] = value;
  WavSpec w;
  w.tag = 3;
  w.bits = 32;
  w.data = f32_bytes(v);
  return make_wav(w);
}

std::string i32_bytes(const std::vector<int32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
std::vector<int32_t> codes(size_t n, int32_t fill = 1) { return std::vector<int32_t>(n, fill); }
std::string npy_i4(const std::string& shape, const std::vector<int32_t>& v, const std::string& descr = "<i4") {
  return make_npy("{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }", i32_bytes(v));
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(g() & 0xff);
  return s;
}

const Words kStdin = {{"stdin", "'-'", "-:"}};
const Words kStdout = {{"stdout", "'-'", "-:"}};  // how a message names standard input

Words operator+(Words a, const Words& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Exit codes
constexpr int OK = 0, USAGE = 2, INPUT = 3, WEIGHTS = 4, OUTPUT = 5, DEVICE = 6;

const Words kNoAudio = {{"empty", "no audio", "no samples", "no data", "0 bytes", "0 samples"}};
const Words kNotAudio = {{"format", "recogni", "not audio", "unsupported", "unknown", "not a wav"}};
const Words kTruncated = {{"truncated", "shorter", "ends early", "ends before"}};
const Words kRange = {{"range", "outside", "out of", "exceeds", "too large", "codebook"}};
const Words kDiskFull = {{"space", "too large", "file size", "limit", "efbig", "full"}};  // the reason, not just "write failed"

std::vector<Case> catalogue() {
  std::vector<Case> v;
  auto add = [&](Case c) { v.push_back(std::move(c)); };
  auto cp = [](const std::string& from, const std::string& to) {
    return [from, to](const Sandbox& b) { b.put(to, fix(from)); };
  };

  // ---------------------------------------------------------------- audio inputs (encode)
  add({"audio/empty-file", "0-byte e.wav", "mimi encode e.wav -o x.mimi", [](const Sandbox& b) { b.put("e.wav", ""); },
       {{INPUT, Words{{"e.wav"}} + kNoAudio}}});
  add({"audio/header-only-wav", "44-byte WAV header, no samples", "mimi encode h.wav -o x.mimi",
       [](const Sandbox& b) { b.put("h.wav", make_wav({})); }, {{INPUT, Words{{"h.wav"}} + kNoAudio}}});
  add({"audio/truncated-wav", "data chunk says 48000 bytes, 20000 present", "mimi encode t.wav -o x.mimi",
       [](const Sandbox& b) {
         WavSpec w;
         w.data = s16_bytes(tone1s()).substr(0, 20000);
         w.data_size = 48000;
         w.riff_size = 36 + 48000;
         b.put("t.wav", make_wav(w));
       },
       {{OK, Words{{"t.wav"}} + kTruncated, {"x.mimi"}}}});
  add({"audio/open-ended-wav-sizes", "RIFF and data sizes 0xFFFFFFFF (as decode --stream writes)",
       "mimi encode s.wav -o x.mimi",
       [](const Sandbox& b) {
         WavSpec w;
         w.data = s16_bytes(tone1s());
         w.data_size = 0xFFFFFFFF;
         w.riff_size = 0xFFFFFFFF;
         b.put("s.wav", make_wav(w));
       },
       {{OK, {}, {"x.mimi"}}}});
  add({"audio/lying-list-chunk", "LIST chunk claiming 0x7FFFFFF0 bytes before the data", "mimi encode l.wav -o x.mimi",
       [](const Sandbox& b) {
         WavSpec w;
         w.data = s16_bytes(tone1s());
         w.chunks_before_data = "LIST" + le32(0x7FFFFFF0) + "INFOjunk";
         b.put("l.wav", make_wav(w));
       },
       {{INPUT, Words{{"l.wav"}} + Words{{"chunk", "truncated", "size", "malformed", "corrupt", "no audio", "no data"}}}}});
  add({"audio/lying-fmt-size", "fmt chunk size 0xFFFF", "mimi encode f.wav -o x.mimi",
       [](const Sandbox& b) {
         WavSpec w;
         w.data = s16_bytes(tone1s());
         w.fmt_size = 0xFFFF;
         b.put("f.wav", make_wav(w));
       },
       {{INPUT, Words{{"f.wav"}} + Words{{"chunk", "truncated", "size", "malformed", "corrupt", "format", "fmt"}}}}});
  add({"audio/text-file", "a text file named n.wav", "mimi encode n.wav -o x.mimi",
       [](const Sandbox& b) { b.put("n.wav", "this is not audio, it is a note\n"); },
       {{INPUT, Words{{"n.wav"}} + kNotAudio}}});
  add({"audio/random-bytes", "4 KiB of random bytes as r.wav", "mimi encode r.wav -o x.mimi",
       [](const Sandbox& b) { b.put("r.wav", random_bytes(4096, 1)); }, {{INPUT, Words{{"r.wav"}} + kNotAudio}}});
  add({"audio/random-bytes-flac", "4 KiB of random bytes as r.flac", "mimi encode r.flac -o x.mimi",
       [](const Sandbox& b) { b.put("r.flac", random_bytes(4096, 2)); }, {{INPUT, Words{{"r.flac"}} + kNotAudio}}});
  add({"audio/riff-junk", "RIFF/WAVE magic then random bytes", "mimi encode j.wav -o x.mimi",
       [](const Sandbox& b) { b.put("j.wav", "RIFF" + le32(4000) + "WAVE" + random_bytes(4000, 3)); },
       {{INPUT, Words{{"j.wav"}, {"format", "recogni", "not audio", "unsupported", "chunk", "malformed", "corrupt", "invalid"}}}}});
  add({"audio/nan-sample", "float WAV, NaN at sample 1000", "mimi encode nan.wav -o x.mimi",
       [](const Sandbox& b) { b.put("nan.wav", float_wav_with(std::numeric_limits<float>::quiet_NaN(), 1000)); },
       {{INPUT, Words{{"nan.wav"}, {"nan", "non-finite", "not finite"}, {"1000", "0.041", "0.042"}}}}});
  add({"audio/inf-sample", "float WAV, +Inf at sample 2400", "mimi encode inf.wav -o x.mimi",
       [](const Sandbox& b) { b.put("inf.wav", float_wav_with(std::numeric_limits<float>::infinity(), 2400)); },
       {{INPUT, Words{{"inf.wav"}, {"inf", "non-finite", "not finite"}, {"2400", "0.1 s", "0.10 s", "0.100"}}}}});
  add({"audio/huge-sample", "float WAV, 1e30 at sample 1000", "mimi encode big.wav -o x.mimi",
       [](const Sandbox& b) { b.put("big.wav", float_wav_with(1e30f, 1000)); },
       {{INPUT, Words{{"big.wav"}, {"range", "too large", "magnitude", "amplitude", "finite", "1e+30", "1e30"},
                      {"1000", "0.041", "0.042"}}}}});
  add({"audio/zero-channels", "hand-built WAV header with 0 channels", "mimi encode c0.wav -o x.mimi",
       [](const Sandbox& b) {
         WavSpec w;
         w.channels = 0;
         w.data = s16_bytes(tone1s());
         b.put("c0.wav", make_wav(w));
       },
       {{INPUT, Words{{"c0.wav"}, {"channel"}}}}});
  add({"audio/zero-rate", "hand-built WAV header with rate 0", "mimi encode r0.wav -o x.mimi",
       [](const Sandbox& b) {
         WavSpec w;
         w.rate = 0;
         w.data = s16_bytes(tone1s());
         b.put("r0.wav", make_wav(w));
       },
       {{INPUT, Words{{"r0.wav"}, {"rate", "hz"}}}}});
  add({"audio/rate-1hz", "WAV header rate 1 Hz", "mimi encode r1.wav -o x.mimi",
       [](const Sandbox& b) {
         WavSpec w;
         w.rate = 1;
         w.data = s16_bytes(tone(100, 1, 24000));
         b.put("r1.wav", make_wav(w));
       },
       {{INPUT, Words{{"r1.wav"}, {"rate", "hz"}}}}});
  add({"audio/rate-2^31-1", "WAV header rate 2147483647 Hz", "mimi encode rmax.wav -o x.mimi",
       [](const Sandbox& b) {
         WavSpec w;
         w.rate = 2147483647u;
         w.data = s16_bytes(tone1s());
         b.put("rmax.wav", make_wav(w));
       },
       {{INPUT, Words{{"rmax.wav"}, {"rate", "hz"}}}}});
  add({"audio/8-channels", "8-channel 24 kHz WAV (works)", "mimi encode c8.wav -o x.mimi",
       [](const Sandbox& b) { write_wav(b / "c8.wav", tone(12000, 8, 24000), 24000, 8, SF_FORMAT_WAV | SF_FORMAT_PCM_16); },
       {{OK, {}, {"x.mimi"}}}});
  add({"audio/8khz", "8 kHz WAV (works)", "mimi encode r8k.wav -o x.mimi",
       [](const Sandbox& b) { write_wav(b / "r8k.wav", tone(8000, 1, 8000), 8000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16); },
       {{OK, {}, {"x.mimi"}}}});
  add({"audio/192khz", "192 kHz WAV (works)", "mimi encode r192k.wav -o x.mimi",
       [](const Sandbox& b) {
         write_wav(b / "r192k.wav", tone(96000, 1, 192000), 192000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_24);
       },
       {{OK, {}, {"x.mimi"}}}});
  add({"audio/directory", "a directory named d.wav", "mimi encode d.wav -o x.mimi",
       [](const Sandbox& b) { fs::create_directories(b / "d.wav"); }, {{INPUT, Words{{"d.wav"}, {"is a directory"}}}},
       false, {},
       [](const Sandbox&, const Run& r) {
         return std::string(contains_ci(r.err, "not recognised") ? "says 'Format not recognised' for a directory" : "");
       }});
  add({"audio/empty-fifo", "a FIFO whose writer closes at once", "(: > p.wav) & mimi encode p.wav -o x.mimi; s=$?; wait; exit $s",
       [](const Sandbox& b) { REQUIRE(::mkfifo((b / "p.wav").c_str(), 0644) == 0); },
       {{INPUT, Words{{"p.wav"}} + kNoAudio}}});
  add({"audio/missing-file", "nope.wav does not exist", "mimi encode nope.wav -o x.mimi", nullptr,
       {{INPUT, Words{{"nope.wav"}, {"no such", "not found", "does not exist", "cannot open", "missing"}}}}});
  add({"audio/batch-bad-middle", "a.wav, text b.wav, c.wav into out/", "mimi encode a.wav b.wav c.wav -o out/",
       [](const Sandbox& b) {
         b.put("a.wav", fix("a.wav"));
         b.put("b.wav", "not audio\n");
         b.put("c.wav", fix("a.wav"));
         fs::create_directories(b / "out");
       },
       {{INPUT, Words{{"b.wav"}} + kNotAudio, {"out/a.mimi", "out/c.mimi"}}}, true});
  add({"audio/batch-nan-middle", "a.wav, NaN float nan.wav, c.wav into out/", "mimi encode a.wav nan.wav c.wav -o out/",
       [](const Sandbox& b) {
         b.put("a.wav", fix("a.wav"));
         b.put("nan.wav", float_wav_with(std::numeric_limits<float>::quiet_NaN(), 1000));
         b.put("c.wav", fix("a.wav"));
         fs::create_directories(b / "out");
       },
       {{INPUT, Words{{"nan.wav"}, {"nan", "non-finite", "not finite"}}, {"out/a.mimi", "out/c.mimi"}}}, true});
  add({"audio/batch-missing-first", "missing file first, then a.wav into out/", "mimi encode nope.wav a.wav -o out/",
       [](const Sandbox& b) {
         b.put("a.wav", fix("a.wav"));
         fs::create_directories(b / "out");
       },
       {{INPUT, Words{{"nope.wav"}}, {"out/a.mimi"}}}, true});
  add({"audio/devzero", "/dev/zero as audio input (must not read forever)", "timeout 20 mimi encode /dev/zero -o x.mimi",
       nullptr, {{INPUT, Words{{"/dev/zero"}}}}});

  // ---------------------------------------------------------------- token inputs
  add({"mimi/header-bitflip", ".mimi with one header JSON byte flipped", "mimi decode h.mimi -o x.wav",
       [](const Sandbox& b) {
         std::string s = fix("a.mimi");
         s[14] ^= 0x01;
         b.put("h.mimi", s);
       },
       {{INPUT, Words{{"h.mimi"}, {"crc", "checksum", "corrupt", "damaged"}}}}});
  add({"mimi/truncated-decode", ".mimi without its last 30 bytes", "mimi decode t.mimi -o x.wav", [](const Sandbox& b) {
         const std::string s = fix("a.mimi");
         b.put("t.mimi", s.substr(0, s.size() - 30));
       },
       {{INPUT, Words{{"t.mimi"}, {"truncated"}, {"--recover"}}}}});
  add({"mimi/truncated-info", "same, through info", "mimi info t.mimi", [](const Sandbox& b) {
         const std::string s = fix("a.mimi");
         b.put("t.mimi", s.substr(0, s.size() - 30));
       },
       {{INPUT, Words{{"t.mimi"}, {"truncated"}}}}});
  add({"mimi/truncated-convert", "same, through convert", "mimi convert t.mimi -o x.npy", [](const Sandbox& b) {
         const std::string s = fix("a.mimi");
         b.put("t.mimi", s.substr(0, s.size() - 30));
       },
       {{INPUT, Words{{"t.mimi"}, {"truncated"}, {"--recover"}}}}});
  add({"mimi/n_q-string", "header n_q = \"8\" (a string), CRC recomputed", "mimi decode n.mimi -o x.wav",
       [](const Sandbox& b) { b.put("n.mimi", mimi_with_header([](ojson& h) { h["n_q"] = "8"; })); },
       {{INPUT, Words{{"n.mimi"}, {"n_q"}}}}});
  add({"mimi/codebook_size-object", "header codebook_size = {} (an object)", "mimi decode k.mimi -o x.wav",
       [](const Sandbox& b) { b.put("k.mimi", mimi_with_header([](ojson& h) { h["codebook_size"] = ojson::object(); })); },
       {{INPUT, Words{{"k.mimi"}, {"codebook_size"}}}}});
  add({"mimi/n_q-negative", "header n_q = -1", "mimi decode n.mimi -o x.wav",
       [](const Sandbox& b) { b.put("n.mimi", mimi_with_header([](ojson& h) { h["n_q"] = -1; })); },
       {{INPUT, Words{{"n.mimi"}, {"n_q"}}}}});
  add({"mimi/n_q-huge", "header n_q = 1000000", "mimi decode n.mimi -o x.wav",
       [](const Sandbox& b) { b.put("n.mimi", mimi_with_header([](ojson& h) { h["n_q"] = 1000000; })); },
       {{INPUT, Words{{"n.mimi"}, {"n_q", "codebooks"}}}}});
  add({"mimi/header-array", "header JSON is an array", "mimi decode j.mimi -o x.wav",
       [](const Sandbox& b) {
         MimiParts p = split_mimi(fix("a.mimi"));
         p.header = "[1, 2, 3]";
         b.put("j.mimi", join_mimi(p));
       },
       {{INPUT, Words{{"j.mimi"}, {"header", "object", "json"}}}}});
  add({"mimi/header-not-json", "header is not JSON (valid CRC)", "mimi info j.mimi",
       [](const Sandbox& b) {
         MimiParts p = split_mimi(fix("a.mimi"));
         p.header = "this is { not json";
         b.put("j.mimi", join_mimi(p));
       },
       {{INPUT, Words{{"j.mimi"}, {"json", "header", "parse"}}}}});
  add({"mimi/header-length-huge", "header length 0xFFFFFFF0 in a 64-byte file", "mimi decode l.mimi -o x.wav",
       [](const Sandbox& b) { b.put("l.mimi", std::string("MIMI\x01\0\0\0", 8) + le32(0xFFFFFFF0) + std::string(52, '{')); },
       {{INPUT, Words{{"l.mimi"}, {"truncated", "header", "length"}}}}});
  add({"mimi/trailing-bytes", "bytes after the end record", "mimi decode g.mimi -o x.wav",
       [](const Sandbox& b) { b.put("g.mimi", fix("a.mimi") + "junk"); },
       {{INPUT, Words{{"g.mimi"}, {"trailing", "after the end", "follow", "extra"}}}}});
  add({"mimi/frames-mismatch", "header frames 99, file holds 13", "mimi decode f.mimi -o x.wav",
       [](const Sandbox& b) { b.put("f.mimi", mimi_with_header([](ojson& h) { h["frames"] = 99; })); },
       {{INPUT, Words{{"f.mimi"}, {"frames"}}}}});
  add({"mimi/codebook-size-mismatch", "header codebook_size 2048, the model has 64", "mimi decode k.mimi -o x.wav",
       [](const Sandbox& b) {  // rewritten with 11-bit packing, so only the size disagrees with the model
         const std::string a = fix("a.mimi");
         mimi::app::TokenFile t = mimi::app::read_tokens(std::vector<uint8_t>(a.begin(), a.end()), mimi::app::TokenFormat::Mimi, "a.mimi");
         t.meta.codebook_size = 2048;
         const std::vector<uint8_t> out = mimi::app::write_tokens(t, mimi::app::TokenFormat::Mimi);
         b.put("k.mimi", std::string(out.begin(), out.end()));
       },
       {{INPUT, Words{{"k.mimi"}, {"codebook"}}}}});
  add({"mimi/batch-corrupt-middle", "a.mimi, truncated t.mimi, b.npy into out/", "mimi decode a.mimi t.mimi b.npy -o out/",
       [](const Sandbox& b) {
         b.put("a.mimi", fix("a.mimi"));
         const std::string s = fix("a.mimi");
         b.put("t.mimi", s.substr(0, s.size() - 30));
         b.put("b.npy", fix("a.npy"));
         fs::create_directories(b / "out");
       },
       {{INPUT, Words{{"t.mimi"}, {"truncated"}}, {"out/a.wav", "out/b.wav"}}}, true});

  add({"npy/code-4096", ".npy [8, 13] with one code 4096", "mimi decode c.npy -o x.wav",
       [](const Sandbox& b) {
         auto c = codes(104);
         c[50] = 4096;
         b.put("c.npy", npy_i4("(8, 13)", c));
       },
       {{INPUT, Words{{"c.npy"}, {"4096"}} + kRange}}});
  add({"npy/code-beyond-model", ".npy code 100 (tiny model: 64 entries)", "mimi decode c.npy -o x.wav",
       [](const Sandbox& b) {
         auto c = codes(104);
         c[7] = 100;
         b.put("c.npy", npy_i4("(8, 13)", c));
       },
       {{INPUT, Words{{"c.npy"}, {"100"}} + kRange}}});
  add({"npy/code-negative", ".npy code -1", "mimi decode c.npy -o x.wav",
       [](const Sandbox& b) {
         auto c = codes(104);
         c[9] = -1;
         b.put("c.npy", npy_i4("(8, 13)", c));
       },
       {{INPUT, Words{{"c.npy"}, {"-1"}} + kRange}}});
  add({"npy/dtype-f4", ".npy descr '<f4'", "mimi decode f.npy -o x.wav",
       [](const Sandbox& b) { b.put("f.npy", npy_i4("(8, 13)", codes(104), "<f4")); },
       {{INPUT, Words{{"f.npy"}, {"dtype", "f4", "float", "integer"}}}}});
  add({"npy/shape-1d", ".npy shape (104,)", "mimi decode s.npy -o x.wav",
       [](const Sandbox& b) { b.put("s.npy", npy_i4("(104,)", codes(104))); }, {{INPUT, Words{{"s.npy"}, {"shape"}}}}});
  add({"npy/shape-4d", ".npy shape (1, 1, 8, 13)", "mimi decode s.npy -o x.wav",
       [](const Sandbox& b) { b.put("s.npy", npy_i4("(1, 1, 8, 13)", codes(104))); },
       {{INPUT, Words{{"s.npy"}, {"shape"}}}}});
  add({"npy/shape-negative", ".npy shape (-8, 13), 416 data bytes", "mimi decode s.npy -o x.wav",
       [](const Sandbox& b) { b.put("s.npy", npy_i4("(-8, 13)", codes(104))); },
       {{INPUT, Words{{"s.npy"}, {"shape", "negative", "-8"}}}}});
  add({"npy/shape-zero-frames", ".npy shape (8, 0)", "mimi decode s.npy -o x.wav",
       [](const Sandbox& b) { b.put("s.npy", npy_i4("(8, 0)", {})); },
       {{INPUT, Words{{"s.npy"}, {"no frames", "empty", "no codes", "0 frames", "shape"}}}}});
  add({"npy/too-many-codebooks", ".npy shape (40, 13)", "mimi decode q.npy -o x.wav",
       [](const Sandbox& b) { b.put("q.npy", npy_i4("(40, 13)", codes(520))); },
       {{INPUT, Words{{"q.npy"}, {"codebooks", "n_q", "40"}}}}});
  add({"npy/big-endian", ".npy descr '>i4' (accept it, or refuse naming the byte order)", "mimi decode e.npy -o x.wav",
       [](const Sandbox& b) {
         std::string d;
         for (int i = 0; i < 104; ++i) d += std::string("\0\0\0", 3) + char(1 + i % 5);
         b.put("e.npy", make_npy("{'descr': '>i4', 'fortran_order': False, 'shape': (8, 13), }", d));
       },
       {{OK, {}, {"x.wav"}}, {INPUT, Words{{"e.npy"}, {"endian", "byte order"}}}}});
  add({"npy/descr-empty", ".npy descr ''", "mimi decode d.npy -o x.wav",
       [](const Sandbox& b) { b.put("d.npy", npy_i4("(8, 13)", codes(104), "")); },
       {{INPUT, Words{{"d.npy"}, {"dtype", "descr"}}}}});
  add({"npy/truncated-data", ".npy (8, 13) with 100 data bytes", "mimi decode t.npy -o x.wav",
       [](const Sandbox& b) { b.put("t.npy", npy_i4("(8, 13)", codes(25))); },
       {{INPUT, Words{{"t.npy"}} + kTruncated}}});
  const std::string huge_npy =
      make_npy("{'descr': '<i4', 'fortran_order': False, 'shape': (4294967300, 4611686018427387904), }", "");
  const Words huge_words = {{"shape", "size", "truncated", "large", "data", "overflow"}};
  add({"npy/huge-shape-decode", "128-byte .npy, shape (4294967300, 4611686018427387904)", "mimi decode h.npy -o x.wav",
       [huge_npy](const Sandbox& b) { b.put("h.npy", huge_npy); }, {{INPUT, Words{{"h.npy"}} + huge_words}}});
  add({"npy/huge-shape-info", "same, through info", "mimi info h.npy",
       [huge_npy](const Sandbox& b) { b.put("h.npy", huge_npy); }, {{INPUT, Words{{"h.npy"}} + huge_words}}});
  add({"npy/huge-shape-convert", "same, through convert", "mimi convert h.npy -o x.mimi",
       [huge_npy](const Sandbox& b) { b.put("h.npy", huge_npy); }, {{INPUT, Words{{"h.npy"}} + huge_words}}});

  const std::string st_data = i32_bytes(codes(104));
  add({"st/huge-shape", "safetensors codes shape [1, 4294967300, 4611686018427387904]", "mimi decode h.safetensors -o x.wav",
       [](const Sandbox& b) {
         b.put("h.safetensors",
               make_safetensors(R"({"codes":{"dtype":"I32","shape":[1,4294967300,4611686018427387904],"data_offsets":[0,0]}})", ""));
       },
       {{INPUT, Words{{"h.safetensors"}} + huge_words + Words{}}}});
  add({"st/dtype-number", "safetensors \"dtype\": 5", "mimi decode d.safetensors -o x.wav",
       [st_data](const Sandbox& b) {
         b.put("d.safetensors", make_safetensors(R"({"codes":{"dtype":5,"shape":[1,8,13],"data_offsets":[0,416]}})", st_data));
       },
       {{INPUT, Words{{"d.safetensors"}, {"dtype"}}}}});
  add({"st/offsets-beyond-file", "data_offsets [0, 100000] in a 416-byte data section", "mimi decode o.safetensors -o x.wav",
       [st_data](const Sandbox& b) {
         b.put("o.safetensors",
               make_safetensors(R"({"codes":{"dtype":"I32","shape":[1,8,13],"data_offsets":[0,100000]}})", st_data));
       },
       {{INPUT, Words{{"o.safetensors"}, {"offset", "byte range", "truncated", "bounds", "beyond", "size"}}}}});
  add({"st/offsets-reversed", "data_offsets [416, 0]", "mimi decode o.safetensors -o x.wav",
       [st_data](const Sandbox& b) {
         b.put("o.safetensors", make_safetensors(R"({"codes":{"dtype":"I32","shape":[1,8,13],"data_offsets":[416,0]}})", st_data));
       },
       {{INPUT, Words{{"o.safetensors"}, {"offset", "byte range", "negative"}}}}});
  add({"st/offsets-shape-mismatch", "shape [1, 8, 13] I32 with data_offsets [0, 400]", "mimi decode o.safetensors -o x.wav",
       [st_data](const Sandbox& b) {
         b.put("o.safetensors", make_safetensors(R"({"codes":{"dtype":"I32","shape":[1,8,13],"data_offsets":[0,400]}})", st_data));
       },
       {{INPUT, Words{{"o.safetensors"}, {"offset", "byte range", "size", "shape", "bytes"}}}}});
  add({"st/offsets-string", "data_offsets [\"0\", \"416\"]", "mimi decode o.safetensors -o x.wav",
       [st_data](const Sandbox& b) {
         b.put("o.safetensors",
               make_safetensors(R"({"codes":{"dtype":"I32","shape":[1,8,13],"data_offsets":["0","416"]}})", st_data));
       },
       {{INPUT, Words{{"o.safetensors"}, {"offset"}}}}});
  add({"st/metadata-object", "__metadata__ sample_rate = {\"a\": 1}", "mimi decode m.safetensors -o x.wav",
       [st_data](const Sandbox& b) {
         b.put("m.safetensors",
               make_safetensors(R"({"__metadata__":{"sample_rate":{"a":1}},"codes":{"dtype":"I32","shape":[1,8,13],"data_offsets":[0,416]}})",
                                st_data));
       },
       {{INPUT, Words{{"m.safetensors"}, {"metadata", "sample_rate"}}}}});
  add({"st/metadata-number", "__metadata__ sample_rate = 24000 (a number; accept, or refuse naming it)",
       "mimi decode m.safetensors -o x.wav",
       [st_data](const Sandbox& b) {
         b.put("m.safetensors",
               make_safetensors(R"({"__metadata__":{"sample_rate":24000},"codes":{"dtype":"I32","shape":[1,8,13],"data_offsets":[0,416]}})",
                                st_data));
       },
       {{OK, {}, {"x.wav"}}, {INPUT, Words{{"m.safetensors"}, {"metadata", "sample_rate"}}}}});
  add({"st/metadata-bad-number", "__metadata__ original_samples = \"lots\"", "mimi decode m.safetensors -o x.wav",
       [st_data](const Sandbox& b) {
         b.put("m.safetensors",
               make_safetensors(R"({"__metadata__":{"original_samples":"lots"},"codes":{"dtype":"I32","shape":[1,8,13],"data_offsets":[0,416]}})",
                                st_data));
       },
       {{INPUT, Words{{"m.safetensors"}, {"original_samples", "metadata"}}}}});
  add({"st/header-length-huge", "header length 2^63", "mimi decode l.safetensors -o x.wav",
       [](const Sandbox& b) { b.put("l.safetensors", le64(uint64_t(1) << 63) + "{}"); },
       {{INPUT, Words{{"l.safetensors"}, {"header", "length", "truncated", "size"}}}}});
  add({"st/no-codes", "safetensors without a 'codes' tensor", "mimi decode n.safetensors -o x.wav",
       [st_data](const Sandbox& b) {
         b.put("n.safetensors", make_safetensors(R"({"other":{"dtype":"I32","shape":[1,8,13],"data_offsets":[0,416]}})", st_data));
       },
       {{INPUT, Words{{"n.safetensors"}, {"codes"}}}}});

  add({"txt/ragged", "text lines of 3 and 2 codes", "mimi decode r.txt -o x.wav",
       [](const Sandbox& b) { b.put("r.txt", "1 2 3\n1 2\n1 2 3\n"); },
       {{INPUT, Words{{"r.txt"}, {"line 2", "ragged"}}}}});
  add({"txt/junk", "text 'hello world'", "mimi decode j.txt -o x.wav", [](const Sandbox& b) { b.put("j.txt", "hello world\n"); },
       {{INPUT, Words{{"j.txt"}, {"integer", "not a number", "line 1", "invalid"}}}}});
  add({"txt/empty", "empty .txt", "mimi decode e.txt -o x.wav", [](const Sandbox& b) { b.put("e.txt", ""); },
       {{INPUT, Words{{"e.txt"}, {"empty", "no frames", "no codes"}}}}});
  add({"txt/code-2048", "text with a code 2048 (> 2047)", "mimi decode c.txt -o x.wav",
       [](const Sandbox& b) { b.put("c.txt", "1 2 3\n4 2048 6\n"); }, {{INPUT, Words{{"c.txt"}, {"2048"}} + kRange}}});
  add({"txt/huge-number", "text with 99999999999999999999", "mimi decode h.txt -o x.wav",
       [](const Sandbox& b) { b.put("h.txt", "1 2\n99999999999999999999 1\n"); },
       {{INPUT, Words{{"h.txt"}, {"range", "integer", "large", "invalid"}}}}});
  add({"tokens/devzero-decode", "/dev/zero as a token input (must fail fast)", "timeout 20 mimi decode /dev/zero -o x.wav",
       nullptr, {{INPUT, Words{{"/dev/zero"}}}}});
  add({"tokens/devzero-info", "/dev/zero through info", "timeout 20 mimi info /dev/zero", nullptr,
       {{INPUT, Words{{"/dev/zero"}}}}});
  add({"tokens/devzero-convert", "/dev/zero through convert", "timeout 20 mimi convert /dev/zero -o x.mimi", nullptr,
       {{INPUT, Words{{"/dev/zero"}}}}});
  add({"tokens/unknown-extension", "random bytes as codes.bin", "mimi decode codes.bin -o x.wav",
       [](const Sandbox& b) { b.put("codes.bin", random_bytes(300, 4)); },
       {{INPUT, Words{{"codes.bin"}, {"format", "unknown", "recogni", "not a token"}}}}});

  // ---------------------------------------------------------------- weights and config (encode)
  const std::string enc_w = "mimi encode a.wav -o x.mimi --weights w/model.safetensors";
  auto with_wav = [](std::function<void(const Sandbox&)> f) {
    return [f](const Sandbox& b) {
      b.put("a.wav", fix("a.wav"));
      f(b);
    };
  };
  add({"weights/truncated", "tiny weights cut in half", enc_w, with_wav([](const Sandbox& b) {
         const std::string s = slurp(tiny("weights.hf.safetensors"));
         b.put("w/model.safetensors", s.substr(0, s.size() / 2));
         b.put("w/config.json", slurp(tiny("config.json")));
       }),
       {{WEIGHTS, Words{{"model.safetensors"}, {"truncated", "size", "short", "offset", "beyond", "bounds"}}}}});
  add({"weights/header-length-lie", "header length 10^12", enc_w, with_wav([](const Sandbox& b) {
         std::string s = slurp(tiny("weights.hf.safetensors"));
         s.replace(0, 8, le64(1000000000000ull));
         b.put("w/model.safetensors", s);
         b.put("w/config.json", slurp(tiny("config.json")));
       }),
       {{WEIGHTS, Words{{"model.safetensors"}, {"header", "length", "truncated", "size"}}}}});
  add({"weights/wrong-dtype", "encoder.layers.0.conv.weight declared I32", enc_w, with_wav([](const Sandbox& b) {
         put_weights(b, [](StFile& f) { f.header["encoder.layers.0.conv.weight"]["dtype"] = "I32"; });
       }),
       {{WEIGHTS, Words{{"model.safetensors"}, {"encoder.layers.0.conv.weight"}, {"dtype", "I32"}}}}});
  add({"weights/wrong-shape", "encoder.layers.0.conv.weight shape [7, 1, 4] (same size)", enc_w,
       with_wav([](const Sandbox& b) {
         put_weights(b, [](StFile& f) { f.header["encoder.layers.0.conv.weight"]["shape"] = {7, 1, 4}; });
       }),
       {{WEIGHTS, Words{{"model.safetensors"}, {"encoder.layers.0.conv.weight"}, {"shape"}}}}});
  add({"weights/missing-tensor", "encoder.layers.0.conv.bias removed", enc_w, with_wav([](const Sandbox& b) {
         put_weights(b, [](StFile& f) { f.header.erase("encoder.layers.0.conv.bias"); });
       }),
       {{WEIGHTS, Words{{"model.safetensors"}, {"encoder.layers.0.conv.bias"}, {"missing", "not found", "lacks", "no tensor"}}}}});
  add({"weights/nan", "NaN in encoder.layers.0.conv.weight", enc_w, with_wav([](const Sandbox& b) {
         put_weights(b, [](StFile& f) {
           const size_t off = f.header["encoder.layers.0.conv.weight"]["data_offsets"][0].get<size_t>();
           const float nan = std::numeric_limits<float>::quiet_NaN();
           f.data.replace(off, 4, reinterpret_cast<const char*>(&nan), 4);
         });
       }),
       {{WEIGHTS, Words{{"model.safetensors"}, {"encoder.layers.0.conv.weight"}, {"nan", "non-finite", "not finite"}}}}});
  add({"weights/text-file", "a text file as weights", enc_w, with_wav([](const Sandbox& b) {
         b.put("w/model.safetensors", "these are not weights\n");
         b.put("w/config.json", slurp(tiny("config.json")));
       }),
       {{WEIGHTS, Words{{"model.safetensors"}, {"safetensors", "header", "truncated", "format", "length"}}}}});
  add({"weights/config-not-json", "--config bad.json holding text", "mimi encode a.wav -o x.mimi --config bad.json",
       with_wav([](const Sandbox& b) { b.put("bad.json", "this is { not json\n"); }),
       {{WEIGHTS, Words{{"bad.json"}, {"json", "parse", "syntax"}}}}});
  add({"weights/config-beside-broken", "config.json beside the weights is broken JSON", enc_w, with_wav([](const Sandbox& b) {
         b.put("w/model.safetensors", slurp(tiny("weights.hf.safetensors")));
         b.put("w/config.json", "{ \"model_type\": \"mimi\", broken");
       }),
       {{WEIGHTS, Words{{"config.json"}, {"json", "parse", "syntax"}}}}});
  const std::string enc_c = "mimi encode a.wav -o x.mimi --config c.json";
  add({"config/sliding_window-5e6", "HF config sliding_window 5000000", enc_c, with_wav([](const Sandbox& b) {
         put_config(b, "c.json", "config.json", [](ojson& j) { j["sliding_window"] = 5000000; });
       }),
       {{WEIGHTS, Words{{"c.json"}, {"sliding_window", "context", "window"}}}}});
  // The moshi-dialect tiny weights are copied into the sandbox, so the command (and the table in
  // docs/RELIABILITY.md) does not depend on where the checkout lives.
  const std::string enc_m = "mimi encode a.wav -o x.mimi --weights wm.safetensors --config m.json";
  add({"config/moshi-context-5e6", "moshi config transformer.context 5000000", enc_m, with_wav([](const Sandbox& b) {
         b.put("wm.safetensors", slurp(tiny("weights.moshi.safetensors")));
         put_config(b, "m.json", "moshi_config.json", [](ojson& j) { j["transformer"]["context"] = 5000000; });
       }),
       {{WEIGHTS, Words{{"m.json"}, {"context"}}}}});
  add({"config/rope_theta-0", "HF config rope_theta 0 (both places)", enc_c, with_wav([](const Sandbox& b) {
         put_config(b, "c.json", "config.json", [](ojson& j) {
           j["rope_theta"] = 0.0;
           j["rope_parameters"]["rope_theta"] = 0.0;
         });
       }),
       {{WEIGHTS, Words{{"c.json"}, {"rope_theta", "max_period"}}}}});
  add({"config/moshi-max_period-0", "moshi config transformer.max_period 0", enc_m, with_wav([](const Sandbox& b) {
         b.put("wm.safetensors", slurp(tiny("weights.moshi.safetensors")));
         put_config(b, "m.json", "moshi_config.json", [](ojson& j) { j["transformer"]["max_period"] = 0; });
       }),
       {{WEIGHTS, Words{{"m.json"}, {"max_period"}}}}});
  add({"config/norm_eps-negative", "HF config norm_eps -1", enc_c, with_wav([](const Sandbox& b) {
         put_config(b, "c.json", "config.json", [](ojson& j) { j["norm_eps"] = -1.0; });
       }),
       {{WEIGHTS, Words{{"c.json"}, {"norm_eps", "eps"}}}}});
  add({"config/40-ratios", "HF config upsampling_ratios = 40 x [2]", enc_c, with_wav([](const Sandbox& b) {
         put_config(b, "c.json", "config.json", [](ojson& j) { j["upsampling_ratios"] = std::vector<int>(40, 2); });
       }),
       {{WEIGHTS, Words{{"c.json"}, {"ratio"}}}}});
  add({"config/num_quantizers-string", "HF config num_quantizers \"8\"", enc_c, with_wav([](const Sandbox& b) {
         put_config(b, "c.json", "config.json", [](ojson& j) { j["num_quantizers"] = "8"; });
       }),
       {{WEIGHTS, Words{{"c.json"}, {"num_quantizers"}}}}});
  add({"config/codebook_size-negative", "HF config codebook_size -5", enc_c, with_wav([](const Sandbox& b) {
         put_config(b, "c.json", "config.json", [](ojson& j) { j["codebook_size"] = -5; });
       }),
       {{WEIGHTS, Words{{"c.json"}, {"codebook_size", "bins"}}}}});
  add({"config/not-an-object", "config JSON is an array", enc_c, with_wav([](const Sandbox& b) { b.put("c.json", "[1, 2]"); }),
       {{WEIGHTS, Words{{"c.json"}, {"object", "config", "json"}}}}});

  // ---------------------------------------------------------------- output side
  add({"out/parent-is-a-file", "-o file.txt/x.mimi (the parent is a regular file)", "mimi encode a.wav -o file.txt/x.mimi",
       [](const Sandbox& b) {
         b.put("a.wav", fix("a.wav"));
         b.put("file.txt", "a file\n");
       },
       {{OUTPUT, Words{{"file.txt"}, {"directory", "cannot create", "not a dir"}}}}});
  add({"out/same-as-input", "encode a.wav -o a.wav", "mimi encode a.wav -o a.wav", cp("a.wav", "a.wav"),
       {{OUTPUT, Words{{"a.wav"}, {"input", "same", "itself"}}}}});
  add({"out/same-as-input-force", "encode a.wav -o a.wav -f (input kept)", "mimi encode a.wav -o a.wav -f", cp("a.wav", "a.wav"),
       {{OUTPUT, Words{{"a.wav"}, {"input", "same", "itself"}}}}});
  add({"out/same-as-input-convert", "convert a.mimi -o ./a.mimi -f", "mimi convert a.mimi -o ./a.mimi -f",
       cp("a.mimi", "a.mimi"), {{OUTPUT, Words{{"a.mimi"}, {"input", "same", "itself"}}}}});
  auto dev_null_ok = [](const Sandbox&, const Run&) {
    if (fs::is_character_file("/dev/null")) return std::string();
    if (::system("rm -f /dev/null && mknod -m 666 /dev/null c 1 3") != 0) {}  // repair the machine
    return std::string("/dev/null is no longer a character device");
  };
  add({"out/dev-null-encode", "encode -o /dev/null without -f (works)", "mimi encode a.wav -o /dev/null", cp("a.wav", "a.wav"),
       {{OK, {}, {}}}, false, {}, dev_null_ok});
  add({"out/dev-null-decode", "decode -o /dev/null without -f (works)", "mimi decode a.mimi -o /dev/null",
       cp("a.mimi", "a.mimi"), {{OK, {}, {}}}, false, {}, dev_null_ok});
  add({"out/exists", "x.mimi exists, no -f (left untouched)", "mimi encode a.wav -o x.mimi",
       [](const Sandbox& b) {
         b.put("a.wav", fix("a.wav"));
         b.put("x.mimi", "precious");
       },
       {{OUTPUT, Words{{"x.mimi"}, {"exists"}}}}});
  add({"out/exists-decode", "x.wav exists, no -f", "mimi decode a.mimi -o x.wav",
       [](const Sandbox& b) {
         b.put("a.mimi", fix("a.mimi"));
         b.put("x.wav", "precious");
       },
       {{OUTPUT, Words{{"x.wav"}, {"exists"}}}}});
  add({"out/exists-batch", "out/a.mimi exists; a.wav c.wav -o out/", "mimi encode a.wav c.wav -o out/",
       [](const Sandbox& b) {
         b.put("a.wav", fix("a.wav"));
         b.put("c.wav", fix("a.wav"));
         b.put("out/a.mimi", "precious");
       },
       {{OUTPUT, Words{{"a.mimi"}, {"exists"}}, {"out/c.mimi"}}}, true});
  // full disk: RLIMIT_FSIZE makes writes fail with EFBIG (SIGXFSZ must not kill the tool); stderr
  // goes through a pipe so that the message itself is not cut by the limit
  auto full = [](const std::string& limit_kb, const std::string& cmd) {
    return "set -o pipefail; ( ulimit -f " + limit_kb + "; " + cmd + " 2>&1 ) | cat >&2";
  };
  for (const char* ext : {"wav", "flac", "ogg"}) {
    const std::string e = ext;
    add({"out/disk-full-decode-" + e, "decode 10 s to ." + e + " with ulimit -f 16 (KiB)",
         full("16", "mimi decode long.mimi -o x." + e), cp("long.mimi", "long.mimi"),
         {{OUTPUT, Words{{"x." + e}} + kDiskFull}}});
  }
  for (const char* ext : {"mimi", "npy"}) {
    const std::string e = ext;
    add({"out/disk-full-encode-" + e, "encode to ." + e + " with ulimit -f 0", full("0", "mimi encode a.wav -o x." + e),
         cp("a.wav", "a.wav"), {{OUTPUT, Words{{"x." + e}} + kDiskFull}}});
  }
  add({"out/stdout-closed-early", "decode -o - | head -c 100", "set -o pipefail; mimi decode long.mimi -o - | head -c 100 >/dev/null",
       cp("long.mimi", "long.mimi"), {{OUTPUT, kStdout + Words{{"pipe", "closed"}}}}});
  add({"out/json-to-full-stdout", "encode --json > /dev/full", "mimi encode a.wav -o x.mimi --json > /dev/full",
       cp("a.wav", "a.wav"), {{OUTPUT, Words{{"stdout"}, {"write", "space", "full"}}, {"x.mimi"}}}});
  add({"out/tokens-to-full-stdout", "encode -o - > /dev/full", "mimi encode a.wav -o - > /dev/full", cp("a.wav", "a.wav"),
       {{OUTPUT, kStdout + Words{{"space", "full"}}}}});
  add({"out/audio-to-full-stdout", "decode -o - > /dev/full", "mimi decode a.mimi -o - > /dev/full", cp("a.mimi", "a.mimi"),
       {{OUTPUT, kStdout + Words{{"space", "full"}}}}});

  // ---------------------------------------------------------------- options
  add({"opt/n-q-0", "--n-q 0", "mimi encode a.wav --n-q 0 -o x.mimi", cp("a.wav", "a.wav"), {{USAGE, Words{{"n-q"}}}}});
  add({"opt/n-q-33", "--n-q 33", "mimi encode a.wav --n-q 33 -o x.mimi", cp("a.wav", "a.wav"), {{USAGE, Words{{"n-q"}}}}});
  add({"opt/threads-negative", "--threads -1 (usage error, or clamped)", "mimi encode a.wav --threads -1 -o x.mimi",
       cp("a.wav", "a.wav"), {{USAGE, Words{{"threads"}}}, {OK, {}, {"x.mimi"}}}});
  add({"opt/threads-100000", "--threads 100000 (usage error, or clamped)", "mimi encode a.wav --threads 100000 -o x.mimi",
       cp("a.wav", "a.wav"), {{USAGE, Words{{"threads"}}}, {OK, {}, {"x.mimi"}}}});
  add({"opt/device-tpu", "--device tpu", "mimi encode a.wav --device tpu -o x.mimi", cp("a.wav", "a.wav"),
       {{USAGE, Words{{"tpu"}}}}});
  add({"opt/device-cuda7", "--device cuda:7", "mimi encode a.wav --device cuda:7 -o x.mimi", cp("a.wav", "a.wav"),
       {{DEVICE, Words{{"cuda"}}}}});
  add({"opt/sample-rate-junk", "decode --sample-rate 44100abc", "mimi decode a.mimi --sample-rate 44100abc -o x.wav",
       cp("a.mimi", "a.mimi"), {{USAGE, Words{{"44100abc"}}}}});
  add({"opt/format-vs-extension", "encode --format npy -o x.mimi", "mimi encode a.wav --format npy -o x.mimi",
       cp("a.wav", "a.wav"), {{USAGE, Words{{"npy"}, {"x.mimi", ".mimi"}}}}});
  add({"opt/convert-format-vs-extension", "convert --format text -o x.npy", "mimi convert a.mimi --format text -o x.npy",
       cp("a.mimi", "a.mimi"), {{USAGE, Words{{"text"}, {"x.npy", ".npy"}}}}});
  add({"opt/stream-split-channels", "encode --stream --split-channels", "mimi encode --stream a.wav --split-channels -o x.mimi",
       cp("a.wav", "a.wav"), {{USAGE, Words{{"split-channels"}}}}});
  add({"opt/raw-format-without-stream", "encode --raw-format s16le without --stream",
       "mimi encode a.wav --raw-format s16le -o x.mimi", cp("a.wav", "a.wav"), {{USAGE, Words{{"raw-format"}}}}});
  add({"opt/stream-raw-rate-0", "encode --stream --raw-format s16le --raw-rate 0",
       "mimi encode --stream - --raw-format s16le --raw-rate 0 -o x.mimi < /dev/null", nullptr, {{USAGE, Words{{"raw-rate"}}}}});
  // the file's own error (exit 3), not a usage error: in a batch the other files still decode
  add({"opt/decode-n-q-beyond-file", "decode --n-q 9 of an 8-codebook file", "mimi decode a.mimi --n-q 9 -o x.wav",
       cp("a.mimi", "a.mimi"), {{INPUT, Words{{"a.mimi"}, {"n-q"}}}}});

  // ---------------------------------------------------------------- streams
  add({"stream/odd-byte-count", "encode --stream s16le raw with an odd byte count (works)",
       "cat r.raw | mimi encode --stream - --raw-format s16le -o x.mimi",
       [](const Sandbox& b) { b.put("r.raw", s16_bytes(tone1s()) + "\x01"); }, {{OK, {}, {"x.mimi"}}}});
  add({"stream/lying-list-chunk", "WAV stream with a LIST chunk of 0xFFFFFFFE bytes (ulimit -v 2 GB)",
       "( ulimit -v 2000000; cat l.wav | timeout 20 mimi encode --stream - -o x.mimi )",
       [](const Sandbox& b) {
         WavSpec w;
         w.data = s16_bytes(tone1s());
         w.chunks_before_data = "LIST" + le32(0xFFFFFFFE) + "INFOjunk";
         b.put("l.wav", make_wav(w));
       },
       {{INPUT, kStdin + Words{{"chunk", "truncated", "size", "header", "large", "ends before", "ends early"}}}}});
  add({"stream/encode-empty", "encode --stream of an empty stdin", "mimi encode --stream - -o x.mimi < /dev/null", nullptr,
       {{INPUT, kStdin + kNoAudio}}});
  add({"stream/encode-not-wav", "encode --stream of text, no --raw-format", "echo hello | mimi encode --stream - -o x.mimi",
       nullptr, {{INPUT, kStdin + Words{{"wav", "raw-format"}}}}});
  add({"stream/encode-nan", "encode --stream f32le raw with NaN at sample 1000",
       "cat n.f32 | mimi encode --stream - --raw-format f32le -o x.mimi",
       [](const Sandbox& b) {
         std::vector<float> v = tone1s();
         v[1000] = std::numeric_limits<float>::quiet_NaN();
         b.put("n.f32", f32_bytes(v));
       },
       {{INPUT, kStdin + Words{{"nan", "non-finite", "not finite"}, {"1000", "0.041", "0.042"}}}}});
  add({"stream/encode-zero-channels", "encode --stream WAV with 0 channels", "cat c0.wav | mimi encode --stream - -o x.mimi",
       [](const Sandbox& b) {
         WavSpec w;
         w.channels = 0;
         w.data = s16_bytes(tone1s());
         b.put("c0.wav", make_wav(w));
       },
       {{INPUT, kStdin + Words{{"channel"}}}}});
  add({"stream/decode-garbage", "decode --stream of 1000 random bytes", "cat g.bin | mimi decode --stream - -o x.wav",
       [](const Sandbox& b) { b.put("g.bin", random_bytes(1000, 5)); },
       {{INPUT, kStdin + Words{{"token", "format", "not", "invalid", "integer", "recogni"}}}}});
  add({"stream/decode-header-length-huge", "decode --stream, header length 0xFFFFFFF0 (ulimit -v 2 GB)",
       "( ulimit -v 2000000; cat l.mimi | timeout 20 mimi decode --stream - -o x.wav )",
       [](const Sandbox& b) { b.put("l.mimi", std::string("MIMI\x01\0\0\0", 8) + le32(0xFFFFFFF0) + std::string(100, '{')); },
       {{INPUT, kStdin + Words{{"truncated", "header", "length", "large"}}}}});
  add({"stream/decode-chunk-7e8-frames", "decode --stream, a chunk claiming 700000000 frames (ulimit -v 2 GB)",
       "( ulimit -v 2000000; cat c.mimi | timeout 20 mimi decode --stream - -o x.wav )",
       [](const Sandbox& b) {
         MimiParts p = split_mimi(fix("a.mimi"));
         p.rest = "FRMS" + le32(700000000) + std::string(64, '\x55');
         b.put("c.mimi", join_mimi(p));
       },
       {{INPUT, kStdin + Words{{"truncated", "chunk", "frames", "large"}}}}});
  add({"stream/decode-n_q-negative", "decode --stream, header n_q -1", "cat n.mimi | mimi decode --stream - -o x.wav",
       [](const Sandbox& b) { b.put("n.mimi", mimi_with_header([](ojson& h) { h["n_q"] = -1; })); },
       {{INPUT, kStdin + Words{{"n_q"}}}}});
  add({"stream/decode-header-not-json", "decode --stream, header not JSON (valid CRC)",
       "cat j.mimi | mimi decode --stream - -o x.wav",
       [](const Sandbox& b) {
         MimiParts p = split_mimi(fix("a.mimi"));
         p.header = "this is { not json";
         b.put("j.mimi", join_mimi(p));
       },
       {{INPUT, kStdin + Words{{"json", "header"}}}}});
  add({"stream/decode-endless-line", "decode --stream of 50 MB of '1' without a newline",
       "head -c 50000000 /dev/zero | tr '\\0' '1' | mimi decode --stream - -o x.wav", nullptr,
       {{INPUT, kStdin + Words{{"line", "long", "range", "large"}}}}});
  add({"stream/decode-bad-first-line", "decode --stream text 'abc' (no header-only x.wav left)",
       "echo abc | mimi decode --stream - -o x.wav", nullptr, {{INPUT, kStdin + Words{{"integer", "abc", "invalid", "token"}}}}});
  add({"stream/decode-truncated-header", "decode --stream of the first 20 bytes of a .mimi",
       "head -c 20 a.mimi | mimi decode --stream - -o x.wav", cp("a.mimi", "a.mimi"), {{INPUT, kStdin + kTruncated}}});
  return v;
}

// ------------------------------------------------------------------------------------------
// Running a case

void spit_append(const std::string& path, const std::string& s) {
  FILE* f = std::fopen(path.c_str(), "a");
  if (!f) return;
  std::fwrite(s.data(), 1, s.size(), f);
  std::fclose(f);
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

bool under(const std::string& p, const std::vector<std::string>& paths) {  // p is one of paths or a parent of one
  for (const std::string& q : paths)
    if (q == p || (q.size() > p.size() && q.compare(0, p.size(), p) == 0 && q[p.size()] == '/')) return true;
  return false;
}

// Differences between two listings that the case does not allow, one per line.
std::string listing_problems(const Listing& before, const Listing& after, const std::vector<std::string>& created,
                             const std::vector<std::string>& maybe) {
  std::string s;
  for (const auto& [p, e] : after) {
    auto it = before.find(p);
    if (it == before.end()) {
      if (!under(p, created) && !under(p, maybe)) {
        const std::string base = fs::path(p).filename().string();
        s += (base.size() && base[0] == '.' ? "left a hidden/temporary file: " : "left an unexpected file: ") + p + "\n";
      }
    } else if (!(it->second == e) && e.type != 'd') {
      s += "modified an existing file: " + p + "\n";
    }
  }
  for (const auto& [p, e] : before)
    if (!after.count(p)) s += "removed an existing file: " + p + "\n";
  for (const std::string& c : created)
    if (!after.count(c)) s += "expected output missing: " + c + "\n";
  return s;
}

int error_lines(const std::string& err) {
  int n = 0;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (contains_ci(line, "error:")) ++n;
  return n;
}

std::string words_str(const Words& w) {
  std::vector<std::string> g;
  for (const auto& alt : w) g.push_back(alt.size() == 1 ? "`" + alt[0] + "`" : "`" + join(alt, "`/`") + "`");
  return join(g, " + ");
}

std::string first_lines(const std::string& s, size_t max_chars) {
  std::string o = s.substr(0, max_chars);
  for (char& ch : o)
    if (ch == '\n' || ch == '\t') ch = ' ';
  return o;
}

// Runs one case; every violated requirement is one failed CHECK naming it. With
// MIMI_CATALOGUE_REPORT=FILE, appends "name<TAB>pass|FAIL<TAB>exit<TAB>problems<TAB>stderr" to FILE.
void run_case(const Case& c) {
  Sandbox box("cat");
  if (c.setup) c.setup(box);
  const Listing before = list_tree(box.dir);
  const Run r = box.sh(c.cmd, c.timeout);
  const Listing after = list_tree(box.dir);
  INFO("case: ", c.name, " (", c.input, ")");
  INFO("command: ", c.cmd);
  INFO("exit: ", r.code, " after ", r.seconds, " s");
  INFO("stderr: ", r.err.substr(0, 1500));
  std::vector<std::string> problems;
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) problems.push_back(what);
  };
  need(!r.timed_out && r.code != 124, "did not finish within the time limit");
  need(!(r.code > 128 && r.code < 160), "died by signal " + std::to_string(r.code - 128));
  need(r.code != 70, "internal error (exit 70) for a bad input");
  need(!contains_ci(r.err, "terminate called"), "uncaught exception");
  need(!contains_ci(r.err, "internal error"), "reported as an internal error");
  const Outcome* o = nullptr;
  std::vector<std::string> expected;
  for (const Outcome& x : c.outcomes) {
    expected.push_back(std::to_string(x.exit));
    if (x.exit == r.code) o = &x;
  }
  if (!o) {
    problems.push_back("exit code " + std::to_string(r.code) + ", expected " + join(expected, " or "));
    o = &c.outcomes[0];
  }
  for (const auto& alts : o->words) {
    bool any = false;
    for (const std::string& w : alts) any = any || contains_ci(r.err, w);
    need(any, "stderr mentions none of: " + join(alts, " | "));
  }
  if (o->exit >= 3 && !c.batch)
    need(error_lines(r.err) == 1, "expected one error message ('error:' line), got " + std::to_string(error_lines(r.err)));
  const std::string files = listing_problems(before, after, o->created, c.may_appear);
  need(files.empty(), files.empty() ? "" : files.substr(0, files.size() - 1));
  if (c.extra) {
    const std::string e = c.extra(box, r);
    need(e.empty(), e);
  }
  for (const std::string& p : problems) CHECK_MESSAGE(p.empty(), p);  // one failed check per problem
  if (const char* rep = std::getenv("MIMI_CATALOGUE_REPORT")) {
    std::string line = c.name + "\t" + (problems.empty() ? "pass" : "FAIL") + "\t" + std::to_string(r.code) + "\t" +
                       first_lines(join(problems, "; "), 600) + "\t" + first_lines(r.err, 400) + "\n";
    spit_append(rep, line);
  }
}

// ------------------------------------------------------------------------------------------
// Cases that are not one command: signals, races, read-only directories, a full tmpfs.

struct SpecialRow {
  std::string name, input, cmd, exit, words;
};
const std::vector<SpecialRow>& special_rows() {
  static const std::vector<SpecialRow> rows = {
      {"signal/sigint-batch", "SIGINT 0.5 s into a batch decode of 3 long .npy files", "mimi decode l0.npy l1.npy l2.npy -o out/",
       "130", "no temporary or partial file in out/"},
      {"signal/sigterm-batch", "SIGTERM, same", "mimi decode l0.npy l1.npy l2.npy -o out/", "143",
       "no temporary or partial file in out/"},
      {"signal/sigkill-then-next-run", "SIGKILL, same; then any run writing to out/",
       "mimi decode l0.npy ... -o out/; mimi decode a.npy -o out/", "137, then 0",
       "at most one hidden temporary after the kill; none after the next run"},
      {"race/two-writers", "two `encode -o same.mimi` started at once, no -f", "mimi encode a.wav -o same.mimi & (twice)",
       "one 0, one 5", "`exists`; exactly same.mimi left, no temporary"},
      {"out/read-only-dir", "output into a chmod 555 directory (skipped as root)", "mimi encode a.wav -o ro/x.mimi", "5",
       "`ro/x.mimi` + `permission`/`denied`/`read-only`"},
      {"out/full-tmpfs", "decode 10 s into a 64 KiB tmpfs (skipped where mount fails)", "mimi decode long.mimi -o full/x.wav",
       "5", "`x.wav` + `space`/`full`/`write`; nothing left in full/"},
  };
  return rows;
}

std::string md_escape(std::string s) {
  std::string o;
  for (char ch : s) {
    if (ch == '|') o += "\\|";
    else o += ch;
  }
  return o;
}

std::string catalogue_markdown() {
  std::string s =
      "| case | input | command (in the case's sandbox) | exit | stderr must mention (case-insensitive; a/b = either) |\n"
      "|---|---|---|---|---|\n";
  for (const Case& c : catalogue()) {
    std::vector<std::string> exits, words;
    for (const Outcome& o : c.outcomes) {
      exits.push_back(std::to_string(o.exit));
      std::string w = words_str(o.words);
      if (!o.created.empty()) w += (w.empty() ? "" : "; ") + std::string("leaves only ") + join(o.created, ", ");
      if (c.outcomes.size() > 1) w = "(" + std::to_string(o.exit) + ") " + (w.empty() ? "-" : w);
      words.push_back(w);
    }
    s += "| " + c.name + " | " + md_escape(c.input) + " | `" + md_escape(c.cmd) + "` | " + join(exits, " or ") + " | " +
         md_escape(join(words, "; or ")) + " |\n";
  }
  for (const SpecialRow& r : special_rows())
    s += "| " + r.name + " | " + md_escape(r.input) + " | `" + md_escape(r.cmd) + "` | " + r.exit + " | " + md_escape(r.words) +
         " |\n";
  return s;
}

// Random codes < 64 (the tiny codebook), n_q 8: a long token file.
std::string long_npy(int64_t frames, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> v(size_t(8 * frames));
  for (auto& x : v) x = int32_t(g() % 64);
  return npy_i4("(8, " + std::to_string(frames) + ")", v);
}

constexpr int64_t kLongFrames = 7500 * 3;  // 30 minutes of codes per file

void signal_case(int sig, int expected) {
  Sandbox box("catsig");
  for (int i = 0; i < 3; ++i) box.put("l" + std::to_string(i) + ".npy", long_npy(kLongFrames, uint32_t(i + 1)));
  fs::create_directories(box / "out");
  const pid_t pid = spawn_mimi(box.dir, {"decode", "l0.npy", "l1.npy", "l2.npy", "-o", "out/", "-q"}, box.weights,
                               box.dir.string() + ".stdout", box.dir.string() + ".stderr");
  REQUIRE(pid > 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const Listing during = list_tree(box / "out");
  ::kill(pid, sig);
  bool signaled = false;
  int signo = 0;
  const int code = wait_exit(pid, 30, &signaled, &signo);
  const std::string err = slurp(box.dir.string() + ".stderr");
  fs::remove(box.dir.string() + ".stdout");
  fs::remove(box.dir.string() + ".stderr");
  INFO("stderr: ", err.substr(0, 1500));
  std::string during_s;
  for (const auto& [p, e] : during) during_s += p + " ";
  INFO("out/ 0.5 s in: ", during_s);
  CHECK_MESSAGE(!signaled, "died by signal ", signo, " instead of exiting ", expected);
  CHECK(code == expected);
  // complete outputs of finished inputs may stay; nothing hidden, nothing partial
  for (const auto& [p, e] : list_tree(box / "out")) {
    CAPTURE(p);
    CHECK_MESSAGE(p[0] != '.', "temporary file left: ", p);
    if (p[0] == '.') continue;
    WavInfo w;
    CHECK_MESSAGE(audio_opens(box / "out" / p, &w), "unreadable output left: ", p);
    CHECK_MESSAGE(w.frames == kLongFrames * 1920, "partial output left: ", p, " (", w.frames, " samples)");
  }
}

}  // namespace

TEST_CASE("catalogue") {
  fixture();
  const std::vector<Case> cases = catalogue();
  for (const Case& c : cases) {
    SUBCASE(c.name.c_str()) { run_case(c); }
  }
}

TEST_CASE("catalogue: at least 60 cases with distinct names") {
  std::set<std::string> names;
  for (const Case& c : catalogue()) CHECK_MESSAGE(names.insert(c.name).second, "duplicate case ", c.name);
  for (const SpecialRow& r : special_rows()) CHECK_MESSAGE(names.insert(r.name).second, "duplicate case ", r.name);
  CHECK(names.size() >= 60);
}

TEST_CASE("catalogue: docs/RELIABILITY.md holds the table") {
  const std::string path = MIMI_RELIABILITY_MD;
  const std::string begin = "<!-- catalogue:begin (generated by tests/test_catalogue.cpp) -->\n", end = "<!-- catalogue:end -->";
  std::string doc = slurp(path);
  const size_t b = doc.find(begin), e = doc.find(end);
  REQUIRE_MESSAGE(b != std::string::npos, path, " lacks the marker ", begin);
  REQUIRE(e != std::string::npos);
  const std::string table = catalogue_markdown();
  if (const char* u = std::getenv("MIMI_UPDATE_RELIABILITY_MD"); u && std::string(u) == "1") {
    doc = doc.substr(0, b + begin.size()) + table + doc.substr(e);
    spit(path, doc);
    MESSAGE("rewrote the table in ", path);
    return;
  }
  CHECK_MESSAGE(doc.substr(b + begin.size(), e - b - begin.size()) == table,
                "the table in docs/RELIABILITY.md is out of date: MIMI_UPDATE_RELIABILITY_MD=1 test_catalogue -tc='*docs*'");
}

TEST_CASE("catalogue: SIGINT in a batch decode exits 130 and leaves no temporary or partial output") {
  signal_case(SIGINT, 130);
}

TEST_CASE("catalogue: SIGTERM in a batch decode exits 143 and leaves no temporary or partial output") {
  signal_case(SIGTERM, 143);
}

TEST_CASE("catalogue: SIGKILL leaves at most a hidden temporary, which the next run removes") {
  Sandbox box("catkill");
  for (int i = 0; i < 2; ++i) box.put("l" + std::to_string(i) + ".npy", long_npy(kLongFrames, uint32_t(i + 7)));
  box.put("a.npy", fix("a.npy"));
  fs::create_directories(box / "out");
  const pid_t pid = spawn_mimi(box.dir, {"decode", "l0.npy", "l1.npy", "-o", "out/", "-q"}, box.weights,
                               box.dir.string() + ".stdout", box.dir.string() + ".stderr");
  REQUIRE(pid > 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(pid, SIGKILL);
  CHECK(wait_exit(pid, 30) == 137);
  fs::remove(box.dir.string() + ".stdout");
  fs::remove(box.dir.string() + ".stderr");
  int hidden = 0;
  for (const auto& [p, e] : list_tree(box / "out")) {
    CAPTURE(p);
    if (p[0] == '.') {
      ++hidden;
      continue;
    }
    WavInfo w;
    CHECK_MESSAGE(audio_opens(box / "out" / p, &w), "a visible partial output after SIGKILL: ", p);
    CHECK_MESSAGE(w.frames == kLongFrames * 1920, "a visible partial output after SIGKILL: ", p);
  }
  CHECK(hidden <= 1);
  if (hidden == 0) MESSAGE("no temporary was in flight at the kill; the cleanup half of this test checked nothing");
  const Run r = box.sh("mimi decode a.npy -o out/ -q");
  INFO(r.err);
  CHECK(r.code == 0);
  for (const auto& [p, e] : list_tree(box / "out")) CHECK_MESSAGE(p[0] != '.', "stale temporary not removed by the next run: ", p);
  CHECK(fs::exists(box / "out/a.wav"));
}

TEST_CASE("catalogue: two writers of one output without -f: one succeeds, the other exits 5") {
  Sandbox box("catrace");
  write_wav(box / "a.wav", tone(24000 * 20, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    const Run r = box.sh(
        "rm -f same.mimi; mimi encode a.wav -o same.mimi -q 2>e1 & p1=$!; mimi encode a.wav -o same.mimi -q 2>e2 & p2=$!; "
        "wait $p1; c1=$?; wait $p2; c2=$?; echo $c1 $c2; cat e1 e2 >&2; rm -f e1 e2");
    INFO("stderr: ", r.err);
    std::istringstream in(r.out);
    int c1 = -1, c2 = -1;
    in >> c1 >> c2;
    CAPTURE(c1);
    CAPTURE(c2);
    CHECK(((c1 == 0 && c2 == 5) || (c1 == 5 && c2 == 0)));
    CHECK(contains_ci(r.err, "exists"));
    std::vector<std::string> names;
    for (const auto& [p, e] : list_tree(box.dir)) names.push_back(p);
    CHECK(join(names, " ") == "a.wav same.mimi");
  }
}

TEST_CASE("catalogue: an output into a read-only directory exits 5") {
  Sandbox box("catro");
  box.put("a.wav", fix("a.wav"));
  fs::create_directories(box / "ro");
  fs::permissions(box / "ro", fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                  fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  {
    const std::string probe = (box / "ro/probe").string();
    FILE* f = std::fopen(probe.c_str(), "w");
    if (f) {
      std::fclose(f);
      fs::remove(probe);
      MESSAGE("skipped: running as root, a chmod 555 directory is still writable");
      return;
    }
  }
  const Run r = box.sh("mimi encode a.wav -o ro/x.mimi");
  INFO(r.err);
  CHECK(r.code == 5);
  CHECK(contains_ci(r.err, "x.mimi"));
  CHECK((contains_ci(r.err, "permission") || contains_ci(r.err, "denied") || contains_ci(r.err, "read-only")));
  CHECK(list_tree(box / "ro").empty());
}

TEST_CASE("catalogue: decode into a full tmpfs exits 5 and leaves nothing") {
  Sandbox box("cattmpfs");
  box.put("long.mimi", fix("long.mimi"));
  fs::create_directories(box / "full");
  const Run m = box.sh("mount -t tmpfs -o size=64k tmpfs full");
  if (m.code != 0) {
    MESSAGE("skipped: cannot mount a tmpfs here (", m.err, ")");
    return;
  }
  const Run r = box.sh("mimi decode long.mimi -o full/x.wav");
  const Listing left = list_tree(box / "full");
  box.sh("umount full");
  INFO(r.err);
  CHECK(r.code == 5);
  CHECK(contains_ci(r.err, "x.wav"));
  CHECK((contains_ci(r.err, "space") || contains_ci(r.err, "full") || contains_ci(r.err, "write")));
  std::string names;
  for (const auto& [p, e] : left) names += p + " ";
  CHECK_MESSAGE(left.empty(), "left in the full tmpfs: ", names);
}
