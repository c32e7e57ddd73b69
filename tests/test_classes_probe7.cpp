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
#include <doctest/doctest.h>
#include <sndfile.h>

#include <algorithm>
#include <regex>
#include <tuple>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli.h"

using namespace mimi::test;

namespace {

struct HelpOption {
  std::string name;   // the long name (or the only name)
  std::string value;  // a valid value when it takes one, else empty
};

// The options a subcommand's --help lists, with a value each one accepts.
std::vector<HelpOption> help_options(const Sandbox& box, const std::string& cmd) {
  const Run r = box.sh("mimi " + cmd + " --help");
  REQUIRE(r.code == 0);
  std::vector<HelpOption> out;
  const std::regex line(R"(^\s+(?:-\w,)?(--[a-z0-9-]+)(?:\s+([A-Z]+)(?::\{([a-z0-9,]+)\})?)?)");
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (!std::regex_search(l, m, line) || m[1] == "--help") continue;
    HelpOption o{m[1], ""};
    if (m[2].matched) {
      const std::string type = m[2];
      if (m[3].matched) o.value = std::string(m[3]).substr(0, std::string(m[3]).find(','));
      else o.value = type == "TEXT" ? "x" : "2";
    }
    out.push_back(o);
  }
  return out;
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
