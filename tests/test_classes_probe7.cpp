// The seventh fresh probe's findings (issue 26), each swept as the class it belongs to:
//   - the stream modes honour an option or refuse it: every option of encode/decode (read from
//     their own --help, so an option added later is covered) that --stream does not honour is
//     refused, and those it honours take effect (the output's format and container, the sample
//     rate, --recover)
//   - a manifest line that names one field twice (aliases, end beside duration, a repeated key)
//     with different values is refused, never settled by lookup order
//   - a resumed dataset worker believes its journal only as far as the tar bears it out: every
//     field of every record, edited, is redone, and the result is the uninterrupted run's
//   - a weights or config file that is a FIFO with no writer is announced, not waited for in silence
// and the eighth probe's: a .done edited in any field is not done; containers and sample formats
// written as asked or refused; --recover for text tokens; the same --json fields in every mode and
// a record for every file info is given; no claim of a skipped-entries file that is not written.
#include <doctest/doctest.h>
#include <sndfile.h>

#include <algorithm>
#include <map>
#include <set>
#include <regex>
#include <tuple>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli.h"

using namespace mimi::test;

namespace {

// A JSON number written by nlohmann (a double) made a little larger, still a valid number.
std::string json_number_plus(const std::string& v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", std::stod(v) * 1.0001 + 1.0);
  return b;
}

SF_INFO sound_info(const fs::path& p) {
  SF_INFO info{};
  SNDFILE* f = sf_open(p.c_str(), SFM_READ, &info);
  if (f) sf_close(f);
  else info.frames = -1;
  return info;
}

}  // namespace

TEST_CASE("classes: --stream honours an option or refuses it, for every option of encode and decode") {
  Sandbox box("clsp7opt");
  write_wav(box / "in.wav", tone(24000 * 2, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode in.wav -o in.mimi -q").code == 0);
  const std::vector<std::string> enc_honoured = {"--output", "--n-q", "--format", "--raw-format", "--raw-rate",
                                                 "--raw-channels", "--stream"},
                                 dec_honoured = {"--output", "--n-q", "--recover", "--allow-weights-mismatch",
                                                 "--raw-format", "--sample-format", "--sample-rate", "--no-trim",
                                                 "--stream"},
                                 common = {"--weights", "--config", "--device", "--threads", "--json", "--quiet",
                                           "--verbose", "--force"};
  int refused = 0;
  for (const auto& [cmd, input, honoured] :
       {std::tuple{std::string("encode"), std::string("in.wav"), enc_honoured},
        std::tuple{std::string("decode"), std::string("in.mimi"), dec_honoured}}) {
    const std::vector<HelpOption> opts = help_options(box, cmd);
    CHECK(opts.size() >= 15);
    for (const HelpOption& o : opts) {
      const bool ok = std::count(honoured.begin(), honoured.end(), o.name) + std::count(common.begin(), common.end(), o.name);
      if (ok) continue;
      const Run r = box.sh("mimi " + cmd + " --stream " + input + " -o out.bin " + o.name + (o.value.empty() ? "" : " " + o.value));
      CAPTURE(cmd);
      CAPTURE(o.name);
      CAPTURE(r.err);
      CHECK(r.code == 2);
      CHECK(r.err.find(o.name) != std::string::npos);
      CHECK(!fs::exists(box / "out.bin"));
      ++refused;
    }
  }
  CHECK(refused >= 4);  // encode --split-channels --batch --readers, decode --batch (today)

  // encode: the token format as the file modes choose it
  for (const std::string name : {"x.npy", "x.safetensors"}) {
    const Run r = box.sh("mimi encode --stream in.wav -o " + name);
    CAPTURE(name);
    CHECK(r.code == 2);
    CHECK(!fs::exists(box / name));
  }
  REQUIRE(box.sh("mimi encode --stream in.wav -o x.txt -q && mimi encode in.wav -o y.txt -q").code == 0);
  CHECK(box.get("x.txt") == box.get("y.txt"));
  REQUIRE(box.sh("mimi encode --stream in.wav -o s.mimi -q").code == 0);

  // decode: the container of the output's name, the sample rate, raw PCM converted as in WAV
  for (const auto& [name, major] : {std::pair{"o.flac", SF_FORMAT_FLAC}, std::pair{"o.ogg", SF_FORMAT_OGG},
                                    std::pair{"o.wav", SF_FORMAT_WAV}}) {
    CAPTURE(name);
    REQUIRE(box.sh(std::string("mimi decode --stream s.mimi -q -o ") + name).code == 0);
    const SF_INFO i = sound_info(box / name);
    CHECK((i.format & SF_FORMAT_TYPEMASK) == major);
    CHECK(i.samplerate == 24000);
    CHECK(i.frames == 25 * 1920);
  }
  REQUIRE(box.sh("mimi decode --stream s.mimi -q -o r16.wav --sample-rate 16000").code == 0);
  CHECK(sound_info(box / "r16.wav").samplerate == 16000);
  CHECK(std::abs(sound_info(box / "r16.wav").frames - 25 * 1280) <= 2);
  REQUIRE(box.sh("mimi decode --no-trim s.mimi -q -o f16.wav --sample-rate 16000").code == 0);
  CHECK(read_wav(box / "r16.wav").size() == read_wav(box / "f16.wav").size());
  write_wav(box / "in16.wav", tone(16000 * 2, 1, 16000), 16000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode --stream in16.wav -o s16.mimi -q && mimi decode --stream s16.mimi -q -o src.wav --sample-rate source").code == 0);
  CHECK(sound_info(box / "src.wav").samplerate == 16000);
  CHECK(box.sh("mimi decode --stream x.txt -q -o t.wav --sample-rate source").code == 3);  // text records no rate
  REQUIRE(box.sh("mimi decode --stream s.mimi -q -o r.raw --raw-format s16le").code == 0);
  const std::string wav = box.get("o.wav");
  CHECK(wav.substr(wav.size() - box.get("r.raw").size()) == box.get("r.raw"));
  CHECK(box.sh("cat s.mimi | mimi decode --stream - -q -o - --raw-format s16le").out == box.get("r.raw"));
  CHECK(box.sh("mimi decode --stream s.mimi -q -o r.wav --raw-format s16le").code == 2);  // raw under a WAV name
  CHECK(box.sh("mimi decode --stream s.mimi -q -o r2.raw --raw-format s16le --sample-format f32").code == 2);
  CHECK(!fs::exists(box / "r.wav"));

  // --recover: a damaged stream keeps the frames before the damage; without it, an error and no file
  const std::string s = box.get("s.mimi");
  box.put("cut.mimi", s.substr(0, s.size() - 200));
  Run r = box.sh("mimi decode --stream cut.mimi -o cut.wav");
  CHECK(r.code == 3);
  CHECK(!fs::exists(box / "cut.wav"));
  r = box.sh("mimi decode --stream --recover cut.mimi -o cut.wav");
  CHECK(r.code == 0);
  CHECK(contains_ci(r.err, "recover"));
  const int64_t kept = sound_info(box / "cut.wav").frames;
  CHECK(kept > 0);
  CHECK(kept < 25 * 1920);
  CHECK(kept % 1920 == 0);
}

TEST_CASE("classes: a manifest line naming one field twice with different values is refused") {
  Sandbox box("clsp7alias");
  write_wav(box / "a.wav", tone(24000 * 3, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  write_wav(box / "b.wav", tone(24000 * 3, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  struct Line {
    std::string json;
    bool ok;
  };
  const std::vector<Line> lines = {
      {R"({"path":"a.wav"})", true},
      {R"({"audio_filepath":"a.wav"})", true},
      {R"({"path":"a.wav","audio_filepath":"a.wav"})", true},
      {R"({"path":"a.wav","audio_filepath":"b.wav"})", false},
      {R"({"audio_filepath":"b.wav","path":"a.wav"})", false},
      {R"({"path":"a.wav","path":"b.wav"})", false},
      {R"({"path":"a.wav","start":0.5,"offset":0.5,"end":1.5})", true},
      {R"({"path":"a.wav","start":0.5,"offset":1.0,"end":1.5})", false},
      {R"({"path":"a.wav","offset":1.0,"start":0.5,"end":1.5})", false},
      {R"({"path":"a.wav","start":0.5,"start":1.0,"end":1.5})", false},
      {R"({"path":"a.wav","start":0.1,"end":0.4,"duration":0.3})", true},  // 0.1 + 0.3 != 0.4 in binary
      {R"({"path":"a.wav","start":0.5,"end":1.5,"duration":2.0})", false},
      {R"({"path":"a.wav","end":1.5,"duration":1.0})", false},
      {R"({"path":"a.wav","channel":0,"channel":"mix"})", false},
  };
  for (const Line& l : lines) {
    box.put("m.jsonl", l.json + "\n");
    const Run r = box.sh("rm -rf plan; mimi dataset plan m.jsonl -o plan --shards 1 -q");
    CAPTURE(l.json);
    CAPTURE(r.err);
    check_sane(r);
    if (l.ok) {
      CHECK(r.code == 0);
    } else {
      CHECK(r.code == 3);
      CHECK(!fs::exists(box / "plan/plan.json"));
    }
  }
}

TEST_CASE("classes: a resumed worker redoes every journal record the tar contradicts") {
  Sandbox box("clsp7journal");
  box.sh("mkdir corp");
  for (const std::string n : {"a1", "a2", "a3"})
    write_wav(box / ("corp/" + n + ".wav"), tone(24000 * 2, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  for (const std::string n : {"z1", "z2"})  // planned as 10 s of audio, junk by the time they are encoded
    write_wav(box / ("corp/" + n + ".wav"), tone(24000 * 10, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan corp -o plan --shards 1 -q && echo junk > corp/z1.wav && echo junk > corp/z2.wav").code == 0);
  REQUIRE(box.sh("mimi dataset encode --plan plan --shard 0/1 -o ref -q --max-errors 10").code == 0);
  // stopped by its error budget at the two junk files: a partial tar and its journal, 3 ok + 2 err
  REQUIRE(box.sh("mimi dataset encode --plan plan --shard 0/1 -o base -q --max-errors 1").code == 3);
  const std::string journal = box.get("base/shards/shard-00000.journal");
  REQUIRE(std::count(journal.begin(), journal.end(), '\n') == 6);
  // every number of every record, changed (and each ok record's key): the worker resumes before it
  const std::regex field(R"re("(end|offset|frames|key)":("?)([0-9a-z]+))re");
  int edits = 0;
  size_t pos = journal.find('\n') + 1;  // after the "begin" line
  for (int rec = 0; rec < 5; ++rec) {
    const size_t nl = journal.find('\n', pos);
    const std::string line = journal.substr(pos, nl - pos);
    for (std::sregex_iterator it(line.begin(), line.end(), field), end; it != end; ++it) {
      const std::smatch& m = *it;
      const std::string name = m[1], quote = m[2], value = m[3];
      if (name == "key" && line.find("\"k\":\"err\"") != std::string::npos) continue;  // an error's key is not in the tar
      const std::string changed = name == "key" ? (value == "a2" ? "a3" : "a2") : std::to_string(std::stoll(value) + 512);
      std::string edited = journal;
      edited.replace(pos + size_t(m.position(0)), size_t(m.length(0)), "\"" + name + "\":" + quote + changed);
      CAPTURE(rec);
      CAPTURE(name);
      REQUIRE(box.sh("rm -rf out && cp -r base out").code == 0);
      box.put("out/shards/shard-00000.journal", edited);
      const Run r = box.sh("mimi dataset encode --plan plan --shard 0/1 -o out --max-errors 10");
      CAPTURE(r.err);
      CHECK(r.code == 0);
      CHECK(box.get("out/shards/shard-00000.tar") == box.get("ref/shards/shard-00000.tar"));
      CHECK(box.get("out/shards/shard-00000.index.jsonl") == box.get("ref/shards/shard-00000.index.jsonl"));
      CHECK(box.sh("mimi dataset verify out -q").code == 0);
      ++edits;
    }
    pos = nl + 1;
  }
  CHECK(edits == 14);  // 3 ok records x (end, offset, frames, key) + 2 error records x end
}

TEST_CASE("classes: a weights or config FIFO with no writer is announced") {
  Sandbox box("clsp7fifo");
  write_wav(box / "in.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mkfifo wf cf").code == 0);
  for (const std::string opts : {"--weights wf", "--weights \"$MIMI_WEIGHTS\" --config cf"}) {
    const Run r = box.sh("timeout 8 mimi encode in.wav -o x.mimi " + opts);
    CAPTURE(opts);
    CHECK(r.code == 124);
    CHECK(contains_ci(r.err, "waiting for its writer"));
  }
  // with a writer it reads the weights from the FIFO: the same codes (the config named: none is beside wf)
  const Run r = box.sh("mimi encode in.wav -o a.mimi -q && (cat \"$MIMI_WEIGHTS\" > wf &) && "
                       "mimi encode in.wav -o b.mimi --weights wf --config \"$(dirname \"$MIMI_WEIGHTS\")/config.json\" -q");
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  CHECK(box.get("a.mimi") == box.get("b.mimi"));
}

// ---- the eighth fresh probe's findings, by class

TEST_CASE("classes: a .done edited by hand in any field is not done: status lists it, the worker redoes it") {
  Sandbox box("clsp8done");
  box.sh("mkdir corp");
  for (int i = 0; i < 3; ++i)
    write_wav(box / ("corp/u" + std::to_string(i) + ".wav"), tone(24000 + 3000 * i, 1, 24000), 24000, 1,
              SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan corp -o plan --shards 1 -q && mimi dataset encode --plan plan --shard 0/1 -o ref -q").code == 0);
  const std::string done = box.get("ref/shards/shard-00000.done");
  // every value of the record, changed as little as it can be: a count or number one up, a
  // string's last character
  const std::regex field(R"re("([a-z_0-9]+)":\s*("[^"]*"|[0-9.e+-]+))re");
  int edits = 0;
  for (std::sregex_iterator it(done.begin(), done.end(), field), end; it != end; ++it) {
    const std::smatch& m = *it;
    const std::string name = m[1], value = m[2];
    std::string changed;
    if (value[0] == '"') {
      changed = value;
      changed[changed.size() - 2] = changed[changed.size() - 2] == '0' ? '1' : '0';
    } else if (value.find_first_of(".e") != std::string::npos) {
      changed = json_number_plus(value);
    } else {
      changed = std::to_string(std::stoull(value) + 1);
    }
    std::string edited = done;
    edited.replace(size_t(m.position(0)), size_t(m.length(0)), "\"" + name + "\": " + changed);
    CAPTURE(name);
    REQUIRE(box.sh("rm -rf out && cp -r ref out").code == 0);
    box.put("out/shards/shard-00000.done", edited);
    CHECK(box.sh("mimi dataset status out --todo --format ranges 2>/dev/null").out == "0\n");
    CHECK(box.sh("mimi dataset encode --plan plan --shard 0/1 -o out -q").code == 0);
    CHECK(box.sh("mimi dataset verify out -q").code == 0);
    CHECK(box.get("out/shards/shard-00000.tar") == box.get("ref/shards/shard-00000.tar"));
    ++edits;
  }
  CHECK(edits >= 18);
}

TEST_CASE("classes: every container and sample format is written as asked or refused, --stream too") {
  Sandbox box("clsp8fmt");
  write_wav(box / "in.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode in.wav -o in.mimi -q").code == 0);
  const std::map<std::string, int> sub = {{"s16", SF_FORMAT_PCM_16}, {"s24", SF_FORMAT_PCM_24}, {"f32", SF_FORMAT_FLOAT}};
  int written = 0, refused = 0;
  for (const std::string mode : {"", "--stream "})
    for (const std::string ext : {"wav", "flac", "ogg"})
      for (const auto& [sf, code] : sub) {
        const std::string out = "o." + ext;
        const Run r = box.sh("rm -f " + out + "; mimi decode " + mode + "in.mimi -q -o " + out + " --sample-format " + sf);
        CAPTURE(mode);
        CAPTURE(out);
        CAPTURE(sf);
        if (r.code == 2) {
          CHECK(!fs::exists(box / out));
          ++refused;
          continue;
        }
        REQUIRE(r.code == 0);
        const SF_INFO i = sound_info(box / out);
        if (ext == "ogg") CHECK((i.format & SF_FORMAT_SUBMASK) == SF_FORMAT_VORBIS);  // s16 only: Vorbis has no other
        else CHECK((i.format & SF_FORMAT_SUBMASK) == code);
        ++written;
      }
  CHECK(written == 2 * 6);  // WAV x 3, FLAC s16/s24, OGG s16
  CHECK(refused == 2 * 3);  // FLAC f32, OGG s24/f32
  // the same codes give the same bytes (no clock in a float WAV's header)
  REQUIRE(box.sh("mimi decode in.mimi -q -o a.wav --sample-format f32 && sleep 1.1 && "
                 "mimi decode in.mimi -q -o b.wav --sample-format f32").code == 0);
  CHECK(box.get("a.wav") == box.get("b.wav"));
}

TEST_CASE("classes: --recover keeps the frames before damage in text tokens too, file and stream alike") {
  Sandbox box("clsp8recover");
  const std::string good = "1 2 3 4 5 6 7 8\n2 3 4 5 6 7 8 9\n";
  for (const std::string damage : {"1 2 3\n", "1 2 x 4 5 6 7 8\n", "1 2 3 4 5 6 7 8 9\n"}) {
    box.put("t.txt", good + damage + good);
    CAPTURE(damage);
    for (const std::string cmd : {"mimi decode t.txt -o o.wav", "mimi decode --stream t.txt -o o.wav",
                                  "mimi decode --stream - -o o.wav < t.txt", "mimi convert t.txt -o o.mimi"}) {
      CAPTURE(cmd);
      const std::string out = cmd.find("convert") != std::string::npos ? "o.mimi" : "o.wav";
      Run r = box.sh("rm -f " + out + "; " + cmd);
      CHECK(r.code == 3);
      CHECK(!fs::exists(box / out));
      r = box.sh("rm -f " + out + "; " + cmd + " --recover");
      CHECK(r.code == 0);
      CHECK(contains_ci(r.err, "2 "));  // the two frames kept are named
      if (out == "o.wav") CHECK(sound_info(box / out).frames == 2 * 1920);
      else CHECK(box.sh("mimi info o.mimi --json | grep -c '\"frames\":2,'").out == "1\n");
    }
  }
}

TEST_CASE("classes: every --json record of a command has the same fields in every mode; info names every file") {
  Sandbox box("clsp8json");
  write_wav(box / "in.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode in.wav -o in.mimi -q").code == 0);
  auto keys = [&](const std::string& cmd) {
    const Run r = box.sh(cmd + " --json -q -f");
    REQUIRE(r.code == 0);
    std::set<std::string> k;
    const std::regex key(R"re("([a-z_]+)":)re");
    for (std::sregex_iterator it(r.out.begin(), r.out.end(), key), end; it != end; ++it) k.insert((*it)[1]);
    return k;
  };
  for (const auto& [file, stream] :
       {std::pair{std::string("mimi encode in.wav -o a.mimi"), std::string("mimi encode --stream in.wav -o b.mimi")},
        std::pair{std::string("mimi decode in.mimi -o a.wav"), std::string("mimi decode --stream in.mimi -o b.wav")}}) {
    const std::set<std::string> f = keys(file), s = keys(stream);
    CAPTURE(file);
    for (const std::string& k : f) CHECK_MESSAGE(s.count(k), k);
  }
  box.put("bad.wav", "RIFFjunk");
  box.put("bad.mimi", "MIMI");
  const Run lines = box.sh("mimi info in.mimi bad.wav in.wav bad.mimi --json");
  CHECK(lines.code == 3);
  CHECK(std::count(lines.out.begin(), lines.out.end(), '\n') == 4);
  CHECK(box.sh("mimi info in.mimi bad.wav in.wav bad.mimi | grep -c '\"file\"'").out == "4\n");
  // a plan whose every entry is bad names no skipped-entries file it does not write
  box.put("m.jsonl", "{\"path\":\"f.wav\"}\n");  // a FIFO: a bad entry that --skip-bad leaves out
  const Run p = box.sh("mkfifo f.wav && mimi dataset plan m.jsonl -o P --shards 1 --skip-bad");
  CHECK(p.code == 3);
  CHECK(p.err.find("skipped.txt") == std::string::npos);
  CHECK(!fs::exists(box / "P"));
}
