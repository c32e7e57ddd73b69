// The ninth fresh probe's findings (issue 26), each swept as the class it belongs to:
//   - libsndfile's error of a failed open is process-wide state: read while other threads open
//     files, it named another file's outcome ("No Error."), and a plan recorded it. Every failed
//     open's message must be its own file's however many threads open files, and a plan of the
//     same corpus the same bytes every time.
//   - an early exit must check what a full run checks: a finished shard said "already done"
//     (exit 0) to other, missing or unusable weights and devices.
//   - an option given where it can do nothing is refused by name (exit 2), never ignored: the
//     common options a command does not act on, --readers without a batch, --no-graphs on the
//     CPU; --recover on a whole-array format says it does nothing; the --stream help lists exactly
//     the options the stream mode accepts.
#include <doctest/doctest.h>
#include <sndfile.h>

#include <algorithm>
#include <atomic>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/formats/audio_io.h"
#include "codec/error.h"
#include "support/cli.h"

using namespace mimi::test;
using json = nlohmann::json;

namespace {

// The message AudioReader gives for `path`, or "" when it opens.
std::string open_error(const std::string& path) {
  try {
    mimi::app::AudioReader r(path);
    return "";
  } catch (const mimi::Error& e) {
    return e.what();
  }
}

const std::vector<std::string> kCommon = {"--weights", "--config", "--device", "--threads",
                                          "--json",    "--quiet",  "--verbose", "--force"};

// A journal's "begin" line as a worker of the output `dataset` (its dataset.json) writes it.
std::string begin_line(const json& dataset, int shard) {
  json b = {{"k", "begin"}, {"shard", shard}, {"t", 1.0e9}};
  for (const char* k : {"shards", "plan_sha256", "n_q", "weights_fingerprint", "config_fingerprint"}) b[k] = dataset.at(k);
  return b.dump() + "\n";
}

}  // namespace

TEST_CASE("classes: a failed audio open names its own file's error, whatever other threads open") {
  Sandbox box("clsp9open");
  // bad inputs of several kinds libsndfile refuses with different words, between good ones
  const std::vector<std::string> bad = {"garbage.wav", "empty.wav", "text.flac", "zeros.ogg", "short.wav"};
  box.put("garbage.wav", "garbage\n");
  box.put("empty.wav", "");
  box.put("text.flac", std::string(300, 'x'));
  box.put("zeros.ogg", std::string(4096, '\0'));
  box.put("short.wav", make_wav({}).substr(0, 20));
  std::vector<std::string> good;
  for (int i = 0; i < 4; ++i) {
    const std::string name = "good" + std::to_string(i) + ".wav";
    write_wav(box / name, tone(2400 * (i + 1), 1 + i % 2, 24000), 24000, 1 + i % 2, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
    good.push_back((box / name).string());
  }
  std::vector<std::string> alone;  // each bad file's message, opened with nobody else opening
  for (const std::string& b : bad) {
    alone.push_back(open_error((box / b).string()));
    CHECK_MESSAGE(!alone.back().empty(), b);
    CHECK(alone.back().find("No Error") == std::string::npos);
  }
  std::atomic<int> differ{0}, good_failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 150; ++i) {
        if ((i + t) % 2) {
          good_failed += !open_error(good[size_t(i + t) % good.size()]).empty();
        } else {
          const size_t k = size_t(i / 2 + t) % bad.size();
          differ += open_error((box / bad[k]).string()) != alone[k];
        }
      }
    });
  for (std::thread& th : threads) th.join();
  CHECK(differ == 0);
  CHECK(good_failed == 0);

  // the plan of a corpus with bad files among good ones: the same bytes every time
  REQUIRE(box.sh("mkdir c && cp good*.wav garbage.wav text.flac zeros.ogg c/ && for i in 1 2 3 4 5 6; do "
                 "cp good0.wav c/more$i.wav; cp garbage.wav c/bad$i.wav; done")
              .code == 0);
  std::set<std::string> plans;
  for (int i = 0; i < 6; ++i) {
    const Run r = box.sh("rm -rf p && mimi dataset plan c -o p --shards 2 --skip-bad --probe-threads 8 -q");
    REQUIRE_MESSAGE(r.code == 0, r.err);
    plans.insert(box.get("p/plan.json") + box.get("p/skipped.txt"));
    CHECK(box.get("p/skipped.txt").find("No Error") == std::string::npos);
  }
  CHECK(plans.size() == 1);
}

TEST_CASE("classes: a finished shard is checked like any other before it is called done") {
  Sandbox box("clsp9done");
  for (int i = 0; i < 3; ++i)
    write_wav(box / ("a" + std::to_string(i) + ".wav"), tone(4800, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mkdir c && mv a*.wav c/ && mimi dataset plan c -o p --shards 1 -q").code == 0);
  REQUIRE(box.sh("mimi dataset encode --plan p --shard 0/1 -o o -q").code == 0);
  REQUIRE(box.sh("mkdir w2 && mimi gen-weights --seed 7 -o w2/model.safetensors -q").code == 0);
  const Listing listing = list_tree(box / "o");
  struct Case {
    std::string args;
    int code;
  };
  for (const Case& c : {Case{"--weights w2/model.safetensors", 4}, Case{"--weights missing.safetensors", 4},
                        Case{"--config w2/config.json --weights w2/model.safetensors", 4}, Case{"--device cuda:63", 6},
                        Case{"--device hip:7", 6}, Case{"--n-q 4", 2}, Case{"", 0}, Case{"--batch 3", 0}}) {
    const Run r = box.sh("mimi dataset encode --plan p --shard 0/1 -o o " + c.args);
    CAPTURE(c.args);
    CAPTURE(r.err);
    check_sane(r);
    CHECK(r.code == c.code);
    CHECK((r.err.find("already done") != std::string::npos) == (c.code == 0));
    CHECK(list_tree(box / "o") == listing);  // nothing written either way
  }
}

TEST_CASE("classes: an option given where it can do nothing is refused by name") {
  Sandbox box("clsp9inert");
  write_wav(box / "in.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode in.wav -o in.mimi -q && mimi convert in.mimi -o in.npy -q && "
                 "mimi convert in.mimi -o in.safetensors -q && mimi convert in.mimi -o in.txt -q")
              .code == 0);
  // the common options a command does not list are unknown to it; those it lists are accepted
  const std::vector<HelpOption> enc = help_options(box, "encode");
  int refused = 0;
  for (const auto& [cmd, args] : {std::pair<std::string, std::string>{"info", "in.mimi"}, {"convert", "in.mimi -o o.npy -f"}}) {
    const std::vector<HelpOption> own = help_options(box, cmd);
    for (const HelpOption& o : enc) {
      if (std::find(kCommon.begin(), kCommon.end(), o.name) == kCommon.end()) continue;
      const bool listed = std::any_of(own.begin(), own.end(), [&](const HelpOption& h) { return h.name == o.name; });
      const std::string value = o.name == "--weights" ? box.weights : o.name == "--config" ? "x.json" : o.value;
      const Run r = box.sh("mimi " + cmd + " " + args + " " + o.name + (value.empty() ? "" : " " + value) + " > /dev/null");
      CAPTURE(cmd);
      CAPTURE(o.name);
      CAPTURE(r.err);
      check_sane(r);
      if (listed) {
        if (o.name != "--config") CHECK(r.code == 0);  // (a missing config matters to weights files only)
      } else {
        CHECK(r.code == 2);
        CHECK(r.err.find(o.name) != std::string::npos);
        ++refused;
      }
    }
  }
  CHECK(refused == 8);  // info: --weights --device --threads --force; convert: --weights --config --device --threads

  // options that act only with another's value
  struct Case {
    std::string cmd;
    int code;
    std::string named;
  };
  REQUIRE(box.sh("mkdir c && cp in.wav c/ && mimi dataset plan c -o p --shards 1 -q").code == 0);
  for (const Case& c : {Case{"mimi encode in.wav -o r1.mimi --readers 3", 2, "--readers"},
                        Case{"mimi encode in.wav -o r2.mimi --batch 1 --readers 0", 2, "--readers"},
                        Case{"mimi encode in.wav -o r3.mimi --batch 2 --readers 3", 0, ""},
                        Case{"mimi dataset encode --plan p --shard 0/1 -o o1 --readers 2", 2, "--readers"},
                        Case{"mimi dataset encode --plan p --shard 0/1 -o o2 --batch 2 --readers 2", 0, ""},
                        Case{"mimi bench --seconds 0.2 --runs 1 --latency-frames 0 --weights " + box.weights + " --no-graphs", 2,
                             "--no-graphs"},
                        Case{"mimi bench --seconds 0.2 --runs 1 --latency-frames 0 --weights " + box.weights +
                                 " --device ref --no-graphs",
                             2, "--no-graphs"},
                        Case{"mimi bench --seconds 0.2 --runs 1 --latency-frames 0 --weights " + box.weights + " -v", 2,
                             "--verbose"}}) {
    const Run r = box.sh(c.cmd + " > /dev/null");
    CAPTURE(c.cmd);
    CAPTURE(r.err);
    check_sane(r);
    CHECK(r.code == c.code);
    if (!c.named.empty()) CHECK(r.err.find(c.named) != std::string::npos);
  }
  CHECK(!fs::exists(box / "r1.mimi"));
  CHECK(!fs::exists(box / "o1"));

  // --recover says it does nothing for the whole-array formats, and stays silent where it acts
  for (const std::string x : {"npy", "safetensors", "mimi", "txt"}) {
    const Run r = box.sh("mimi decode in." + x + " -o d." + x + ".wav --recover");
    CAPTURE(x);
    CHECK(r.code == 0);
    CHECK((r.err.find("--recover does nothing") != std::string::npos) == (x == "npy" || x == "safetensors"));
  }

  // the --stream help lists exactly the options the stream mode accepts (besides the common ones)
  for (const auto& [cmd, input] : {std::pair<std::string, std::string>{"encode", "in.wav"}, {"decode", "in.mimi"}}) {
    const Run help = box.sh("mimi " + cmd + " --help");
    const size_t at = help.out.find("honours ");
    REQUIRE(at != std::string::npos);
    const std::string said = help.out.substr(at, help.out.find(" and the common options", at) - at);
    for (const HelpOption& o : help_options(box, cmd)) {
      if (o.name == "--stream" || std::find(kCommon.begin(), kCommon.end(), o.name) != kCommon.end()) continue;
      const bool listed = std::regex_search(said, std::regex("(^| )" + o.name + "(,|$)"));
      const Run r = box.sh("mimi " + cmd + " --stream " + input + " -o out.bin -f " + o.name +
                           (o.value.empty() ? "" : " " + o.value) + " 2>&1 | grep -c 'excludes\\|Excludes' || true");
      CAPTURE(cmd);
      CAPTURE(o.name);
      CHECK((r.out.substr(0, 1) == "0") == listed);
    }
  }
}

// ---- the tenth probe's findings (issue 26)

TEST_CASE("classes: a stream that is no audio is the input's error from its first bytes, whatever the source") {
  Sandbox box("clsp10stream");
  write_wav(box / "in.wav", tone(24000 * 12, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi roundtrip in.wav -o r.flac -q && mimi roundtrip in.wav -o r.ogg -q").code == 0);
  REQUIRE(box.sh("head -c 600000 /dev/urandom > noise.bin && yes 'not audio' | head -c 500000 > text.bin && "
                 "head -c 400000 /dev/zero > zeros.bin && mkfifo f1")
              .code == 0);
  // no audio: exit 3 at once under a memory limit far below what buffering them would take
  for (const std::string src : {"- < zeros.bin", "- < noise.bin", "- < text.bin", "- < /dev/zero", "/dev/zero", "f1"}) {
    const std::string enc = "(ulimit -v 400000; exec mimi encode " + src + " -o z.mimi)";
    const Run r = box.sh(src == "f1" ? enc + " & pid=$!; head -c 3000000 /dev/zero > f1; wait $pid" : enc, 60);
    CAPTURE(src);
    CAPTURE(r.err);
    check_sane(r);
    CHECK(r.code == 3);
    CHECK(contains_ci(r.err, "not recognised"));
    CHECK(!fs::exists(box / "z.mimi"));
  }
  // audio of a format libsndfile must read whole (it seeks): the same codes as from the file
  for (const std::string x : {"flac", "ogg"}) {
    REQUIRE(fs::file_size(box / ("r." + x)) > 65536);  // past the prefix the format is told from
    const Run r = box.sh("mimi encode - -o s." + x + ".mimi -q < r." + x + " && mimi encode r." + x + " -o f." + x + ".mimi -q");
    CAPTURE(x);
    CHECK(r.code == 0);
    CHECK(box.get("s." + x + ".mimi") == box.get("f." + x + ".mimi"));
  }
}

TEST_CASE("classes: a manifest path names the file the kernel opens, '..' after a link included") {
  Sandbox box("clsp10dotdot");
  write_wav(box / "x.wav", tone(12000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);  // 0.5 s
  REQUIRE(box.sh("mkdir -p other/sub2 real && ln -s other/sub2 lnk && ln -s ../other/sub2 real/lnk2").code == 0);
  write_wav(box / "other/x.wav", tone(26400, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);  // 1.1 s
  const std::string abs = box.dir.string();
  struct Case {
    std::string manifest, text;
  };
  for (const Case& c : {Case{"l.list", "lnk/../x.wav\n"}, Case{"a.list", abs + "/lnk/../x.wav\n"},
                        Case{"j.jsonl", "{\"path\": \"lnk/../x.wav\", \"id\": \"u\"}\n"},
                        Case{"k.jsonl", "{\"path\": \"./real/lnk2/../../lnk/../x.wav\", \"id\": \"u\"}\n"}}) {
    box.put(c.manifest, c.text);
    const std::string path = c.text.find('"') != std::string::npos
                                 ? c.text.substr(10, c.text.find("\", \"id") - 10)
                                 : c.text.substr(0, c.text.size() - 1);
    const Run r = box.sh("rm -rf p o && mimi dataset plan " + c.manifest + " -o p --shards 1 -q && "
                         "mimi dataset encode --plan p --shard 0/1 -o o -q && mimi encode " + path + " -o f.mimi -q -f && "
                         "mimi info f.mimi --json");
    CAPTURE(c.manifest);
    CAPTURE(r.err);
    REQUIRE(r.code == 0);
    const std::string index = box.get("o/shards/shard-00000.index.jsonl");
    std::smatch m;
    REQUIRE(std::regex_search(r.out, m, std::regex(R"("frames":(\d+))")));
    const std::string frames = m[1];
    CHECK(frames == "14");  // other/x.wav, as the kernel resolves the path
    CHECK(index.find("\"frames\":" + frames) != std::string::npos);
  }
}

TEST_CASE("classes: extensions name formats whatever their case") {
  Sandbox box("clsp10case");
  write_wav(box / "in.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode in.wav -o ref.mimi -q").code == 0);
  for (const std::string x : {"MIMI", "Npy", "SAFETENSORS", "TXT"}) {
    const std::string l = lower(x);  // the same steps with the lower-case name give the same bytes
    const Run r = box.sh("mimi encode in.wav -o a." + x + " -q && mimi convert a." + x + " -o b." + x +
                         ".mimi -q && mimi decode a." + x + " -o d." + x + ".WAV -q && mimi encode in.wav -o a." + l +
                         " -q && mimi convert a." + l + " -o b." + l + ".mimi -q && mimi info a." + x + " --json");
    CAPTURE(x);
    CAPTURE(r.err);
    CHECK(r.code == 0);
    CHECK(box.get("a." + x) == box.get("a." + l));
    CHECK(box.get("b." + x + ".mimi") == box.get("b." + l + ".mimi"));
    CHECK(r.out.find("\"format\":\"" + lower(x == "TXT" ? "text" : x) + "\"") != std::string::npos);
  }
}

TEST_CASE("classes: status lists only shards the worker will run; info --config without weights is refused") {
  Sandbox box("clsp10status");
  for (int i = 0; i < 4; ++i)
    write_wav(box / ("a" + std::to_string(i) + ".wav"), tone(4800, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mkdir c && mv a*.wav c/ && mimi dataset plan c -o p --shards 2 -q && "
                 "mimi dataset encode --plan p --shard 0/2 -o o -q")
              .code == 0);
  // every way a shard file can change after planning: an item's path, a byte appended, a line dropped
  for (const std::string edit : {"sed -i 's/a[0-9]/zz/' p/shard-00001.jsonl", "echo >> p/shard-00001.jsonl",
                                 "sed -i '1d' p/shard-00001.jsonl"}) {
    REQUIRE(box.sh("cp p/shard-00001.jsonl keep.jsonl && " + edit).code == 0);
    const Run st = box.sh("mimi dataset status o --todo --format ranges");
    const Run wk = box.sh("mimi dataset encode --plan p --shard 1/2 -o o -q");
    CAPTURE(edit);
    CHECK(wk.code == 3);
    CHECK(st.code == wk.code);
    CHECK(st.err.find("shard-00001.jsonl") != std::string::npos);
    CHECK(st.out.empty());
    REQUIRE(box.sh("cp keep.jsonl p/shard-00001.jsonl").code == 0);
  }
  const Run ok = box.sh("mimi dataset status o --todo --format ranges");
  CHECK(ok.code == 0);
  CHECK(ok.out == "1\n");

  REQUIRE(box.sh("mimi encode c/a0.wav -o t.mimi -q").code == 0);
  for (const std::string& args : std::vector<std::string>{"--config x.json", "t.mimi --config x.json", "c/a0.wav --config " + box.weights}) {
    const Run r = box.sh("mimi info " + args + " > /dev/null");
    CAPTURE(args);
    CHECK(r.code == 2);
    CHECK(r.err.find("--config") != std::string::npos);
  }
  CHECK(box.sh("mimi info " + box.weights + " --config " + fs::path(box.weights).replace_filename("config.json").string() +
               " > /dev/null")
            .code == 0);
}

TEST_CASE("classes: finite but corrupt weights that overflow the model are the weights' error, never all-zero codes") {
  Sandbox box("clsp10huge");
  write_wav(box / "x.wav", tone(12000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  // one element of an encoder tensor set to a huge finite value (what a flipped exponent bit does),
  // in several tensors and places
  const std::string py =
      "import json,struct,sys\n"
      "d=bytearray(open(sys.argv[1],'rb').read()); n=struct.unpack('<Q',d[:8])[0]; h=json.loads(d[8:8+n])\n"
      "names=sorted(k for k in h if k!='__metadata__' and k.startswith('encoder.') and h[k]['dtype']=='F32')\n"
      "t=names[int(sys.argv[3])%len(names)]; b,e=h[t]['data_offsets']; i=int(sys.argv[4])%((e-b)//4)\n"
      "o=8+n+b+4*i; d[o:o+4]=struct.pack('<f',float(sys.argv[5])); open(sys.argv[2],'wb').write(d); print(t)\n";
  box.put("corrupt.py", py);
  box.sh("cp " + Sandbox::escape(fs::path(box.weights).replace_filename("config.json").string()) + " config.json");
  int refused = 0, runs = 0;
  for (const auto& [tensor, at, value] : {std::tuple{0, 0, "1e30"}, std::tuple{0, 5, "-3e38"}, std::tuple{3, 1, "1e25"},
                                          std::tuple{7, 2, "1e30"}, std::tuple{11, 0, "-1e30"}, std::tuple{19, 3, "1e35"}}) {
    const Run mk = box.sh("python3 corrupt.py " + Sandbox::escape(box.weights) + " w.safetensors " + std::to_string(tensor) +
                          " " + std::to_string(at) + " " + value);
    REQUIRE(mk.code == 0);
    const Run r = box.sh("rm -f z.mimi; mimi encode x.wav -o z.mimi --weights w.safetensors --config config.json && "
                         "mimi convert z.mimi -o - --format text -q | grep -v '^#' | tr -d ' 0\\n' | wc -c");
    CAPTURE(mk.out);
    CAPTURE(value);
    CAPTURE(r.err);
    check_sane(r);
    ++runs;
    if (r.code == 4) {
      ++refused;
      CHECK(!fs::exists(box / "z.mimi"));
      CHECK(r.err.find("weights") != std::string::npos);
    } else {
      CHECK(r.code == 0);
      CHECK(r.out != "0\n");  // codes that are not all 0
    }
  }
  CHECK(refused >= 1);
  // the dataset worker stops (4) and records no item as failed
  const Run mk = box.sh("python3 corrupt.py " + Sandbox::escape(box.weights) + " w.safetensors 0 0 1e30");
  REQUIRE(mk.code == 0);
  const Run r = box.sh("mkdir c && cp x.wav c/ && mimi dataset plan c -o p --shards 1 -q && "
                       "mimi dataset encode --plan p --shard 0/1 -o o --weights w.safetensors --config config.json");
  CHECK(r.code == 4);
  CHECK(!fs::exists(box / "o/shards/shard-00000.errors.jsonl"));
  CHECK(!fs::exists(box / "o/shards/shard-00000.done"));
  // ... and leaves no record of those weights behind: the fixed ones run into the same output
  CHECK(!fs::exists(box / "o/dataset.json"));
  const Run st = box.sh("mimi dataset status o --plan p --format ranges");
  CHECK(st.code == 0);
  CHECK(st.out == "0\n");
  const Run fixed = box.sh("mimi dataset encode --plan p --shard 0/1 -o o -q --weights " + Sandbox::escape(box.weights) +
                           " --config config.json && mimi dataset verify o -q");
  CHECK_MESSAGE(fixed.code == 0, fixed.err);
  CHECK(json::parse(box.get("o/dataset.json"))["weights_fingerprint"].is_string());
}

TEST_CASE("classes: settings are bound to an output by its first recorded item, not by a run that recorded none") {
  Sandbox box("clsfirstrec");
  fs::create_directories(box / "c");
  for (int i = 0; i < 3; ++i) write_wav(box / ("c/a" + std::to_string(i) + ".wav"), tone(6000 + 2400 * i, 1, 24000), 24000, 1,
                                        SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan c -o p --shards 3 -q").code == 0);
  // A shard begun with n_q 8 and stopped before its first item (the begin line alone, as a kill
  // at the first item leaves it, and no dataset.json): another n_q is no change of a shard's work.
  const std::string journal = "o/shards/shard-00001.journal";
  REQUIRE(box.sh("mimi dataset encode --plan p --shard 1/3 -o o -q --n-q 8").code == 0);
  const std::string begin = begin_line(json::parse(box.get("o/dataset.json")), 1);
  for (const char* gone : {"o/dataset.json", "o/shards/shard-00001.done", "o/shards/shard-00001.tar",
                                   "o/shards/shard-00001.index.jsonl", "o/shards/shard-00001.errors.jsonl"})
    fs::remove(box / gone);
  box.put(journal, begin);
  Run r = box.sh("mimi dataset status o --plan p --format ranges");
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK(r.out == "0-2\n");
  r = box.sh("mimi dataset encode --plan p --shard 1/3 -o o -q --n-q 4");
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK(json::parse(box.get("o/dataset.json"))["n_q"] == 4);
  CHECK(json::parse(box.get("o/shards/shard-00001.done"))["n_q"] == 4);
  // once an item is recorded the settings are the output's: other ones are refused, shard and output
  r = box.sh("mimi dataset encode --plan p --shard 2/3 -o o -q --n-q 8");
  CHECK(r.code == 2);
  CHECK(r.err.find("n_q") != std::string::npos);
  box.put(journal, begin + "{\"i\":0}\n");  // a begin line of n_q 8 with something recorded after it
  fs::remove(box / "o/shards/shard-00001.done");
  r = box.sh("mimi dataset status o --plan p");
  CHECK(r.code == 2);
  CHECK(r.err.find("holds their work") != std::string::npos);
  r = box.sh("mimi dataset encode --plan p --shard 1/3 -o o -q --n-q 4");
  CHECK(r.code == 2);
  CHECK(r.err.find("holds their work") != std::string::npos);
  // a refused run wrote nothing: shard 2 has no journal, and dataset.json is the first run's
  CHECK(!fs::exists(box / "o/shards/shard-00002.journal"));
  CHECK(json::parse(box.get("o/dataset.json"))["n_q"] == 4);
}

TEST_CASE("classes: a WAV holding less than its header says is an error in the dataset mode, whatever the manifest") {
  Sandbox box("clsp10trunc");
  write_wav(box / "full.wav", tone(26400, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  write_wav(box / "good.wav", tone(12000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  const std::string full = box.get("full.wav");
  for (const size_t keep : {full.size() / 2, full.size() - 2000, size_t(200)})  // cut at several places
    box.put("cut" + std::to_string(keep) + ".wav", full.substr(0, keep));
  REQUIRE(box.sh("mkdir d && cp good.wav cut*.wav d/ && ls " + box.dir.string() + "/cut*.wav > l.list && echo " +
                 box.dir.string() + "/good.wav >> l.list")
              .code == 0);
  box.put("j.jsonl", "{\"path\": \"cut" + std::to_string(full.size() / 2) + ".wav\"}\n{\"path\": \"good.wav\"}\n");
  for (const std::string m : {"d", "l.list", "j.jsonl"}) {
    const Run r = box.sh("rm -rf p && mimi dataset plan " + m + " -o p --shards 1");
    CAPTURE(m);
    CAPTURE(r.err);
    CHECK(r.code == 3);
    CHECK(r.err.find("truncated") != std::string::npos);
    const Run s = box.sh("rm -rf p && mimi dataset plan " + m + " -o p --shards 1 --skip-bad -q && cat p/skipped.txt");
    CHECK(s.code == 0);
    CHECK(s.out.find("truncated") != std::string::npos);
  }
  // with a duration the header is not read at plan time: the worker's rule makes it the item's error
  box.put("jd.jsonl", "{\"path\": \"cut" + std::to_string(full.size() / 2) + ".wav\", \"duration\": 1.1}\n");
  const Run r = box.sh("rm -rf p o && mimi dataset plan jd.jsonl -o p --shards 1 -q && "
                       "mimi dataset encode --plan p --shard 0/1 -o o -q; cat o/shards/shard-00000.errors.jsonl");
  CHECK(r.out.find("less audio than planned") != std::string::npos);
}

// ---- the eleventh probe's findings (issue 26)

TEST_CASE("classes: stdout or stderr opened by the shell on an input is refused before anything is written") {
  Sandbox box("clsp11std");
  write_wav(box / "in.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode in.wav -o t.mimi -q && cp in.wav keep.wav && cp t.mimi keep.mimi && "
                 "cp " + Sandbox::escape(box.weights) + " w.safetensors")
              .code == 0);
  int runs = 0;
  for (const std::string redir : {">>", "1<>", ">", "2>>"})
    for (const auto& [cmd, victim] :
         std::vector<std::pair<std::string, std::string>>{{"mimi encode in.wav -o - --format text", "in.wav"},
                                                          {"mimi encode in.wav -o o.mimi -f --json", "in.wav"},
                                                          {"mimi decode t.mimi -o -", "t.mimi"},
                                                          {"mimi info t.mimi in.wav", "t.mimi"},
                                                          {"mimi convert t.mimi -o - --format text", "t.mimi"},
                                                          {"mimi encode --stream in.wav -o -", "in.wav"},
                                                          {"mimi encode in.wav -o o.mimi -f -v --weights w.safetensors",
                                                           "w.safetensors"}}) {
      if (redir == ">" && victim == "w.safetensors") continue;  // (the shell empties it before mimi starts)
      REQUIRE(box.sh("cp keep.wav in.wav && cp keep.mimi t.mimi").code == 0);
      const std::string before = box.get(victim);
      const Run r = box.sh(cmd + " " + redir + " " + victim);
      CAPTURE(cmd);
      CAPTURE(redir);
      check_sane(r);
      ++runs;
      if (redir == ">") {  // the shell has emptied the input already: it is an empty input now
        CHECK(r.code != 0);
        continue;
      }
      CHECK(r.code == 5);
      CHECK(box.get(victim) == before);
      if (redir != "2>>") CHECK(r.err.find("is the input file") != std::string::npos);
    }
  CHECK(runs == 27);
}

TEST_CASE("classes: a bookkeeping file that cannot be read is the machine's failure, never a damaged shard") {
  Sandbox box("clsp11eio");
  write_wav(box / "a.wav", tone(12000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mkdir c && mv a.wav c/ && mimi dataset plan c -o P --shards 1 -q && mimi dataset encode --plan P --shard 0/1 -o O -q").code == 0);
  // /proc/self/mem looks like a file and fails every read with EIO in the reading process
  for (const std::string f : {"shard-00000.done", "shard-00000.index.jsonl", "shard-00000.errors.jsonl"}) {
    REQUIRE(box.sh("rm -rf X && cp -a O X && ln -sf /proc/self/mem X/shards/" + f).code == 0);
    const std::string before = box.get("X/shards/shard-00000.tar");
    for (const std::string cmd : {"mimi dataset status X --todo --format ranges", "mimi dataset verify X",
                                  "mimi dataset encode --plan P --shard 0/1 -o X -q"}) {
      const Run r = box.sh(cmd);
      CAPTURE(f);
      CAPTURE(cmd);
      CAPTURE(r.err);
      check_sane(r);
      CHECK(r.code == 75);
      CHECK(r.out.empty());
      CHECK(box.get("X/shards/shard-00000.tar") == before);
    }
  }
}

TEST_CASE("classes: --no-trim says it does nothing where the tokens record no original length") {
  Sandbox box("clsp11trim");
  write_wav(box / "in.wav", tone(24000 + 100, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  for (const std::string x : {"npy", "txt", "mimi", "safetensors"}) {
    const Run r = box.sh("mimi encode in.wav -o t." + x + " -q -f && mimi decode t." + x + " -o d.wav -f --no-trim");
    CAPTURE(x);
    CHECK(r.code == 0);
    const bool records = x == "mimi" || x == "safetensors";
    CHECK((r.err.find("--no-trim does nothing") != std::string::npos) == !records);
  }
}

TEST_CASE("classes: a resume believes the bytes of journaled items, not only their structure") {
  Sandbox box("clsp11bytes");
  for (int i = 0; i < 2; ++i)
    write_wav(box / ("f" + std::to_string(i) + ".wav"), tone(12000 * (i + 1), 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  box.put("bad.wav", "RIFFjunk");
  box.put("m.jsonl", "{\"path\": \"f0.wav\"}\n{\"path\": \"f1.wav\"}\n{\"path\": \"bad.wav\", \"duration\": 9}\n");
  REQUIRE(box.sh("mimi dataset plan m.jsonl -o P --shards 1 -q && mimi dataset encode --plan P --shard 0/1 -o clean -q").code == 0);
  // a run stopped by --max-errors at the bad item leaves both good items journaled in the partial tar
  REQUIRE(box.sh("mimi dataset encode --plan P --shard 0/1 -o base -q --max-errors 0").code == 3);
  const std::string partial = box.get("base/shards/shard-00000.tar.partial");
  REQUIRE(partial.size() >= 2048);
  int flips = 0;
  for (size_t at = 0; at < partial.size(); at += 211) {  // headers, npy bytes, JSON records, padding
    std::string damaged = partial;
    damaged[at] = char(damaged[at] ^ (1 << (at % 8)));
    REQUIRE(box.sh("rm -rf d && cp -a base d").code == 0);
    box.put("d/shards/shard-00000.tar.partial", damaged);
    const Run r = box.sh("mimi dataset encode --plan P --shard 0/1 -o d -q && mimi dataset verify d -q");
    CAPTURE(at);
    CAPTURE(r.err);
    check_sane(r);
    CHECK(r.code == 0);
    CHECK(box.get("d/shards/shard-00000.tar") == box.get("clean/shards/shard-00000.tar"));
    ++flips;
  }
  CHECK(flips >= 9);
}

// ---- the twelfth probe's findings (issue 26)

TEST_CASE("classes: an output naming a descriptor the shell opened on an input is refused") {
  Sandbox box("clsp12fd");
  write_wav(box / "in.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode in.wav -o t.mimi -q && cp in.wav keep.wav && cp t.mimi keep.mimi").code == 0);
  for (const std::string path : {"/dev/fd/3", "/proc/self/fd/3"})
    for (const std::string redir : {"3>>", "3<>"})
      for (const auto& [cmd, victim] : std::vector<std::pair<std::string, std::string>>{
               {"mimi encode in.wav -o", "in.wav"}, {"mimi decode t.mimi -o", "t.mimi"},
               {"mimi convert t.mimi --format text -o", "t.mimi"}, {"mimi roundtrip in.wav -o", "in.wav"}}) {
        REQUIRE(box.sh("cp keep.wav in.wav && cp keep.mimi t.mimi").code == 0);
        const Run r = box.sh(cmd + " " + path + " " + redir + " " + victim);
        CAPTURE(cmd);
        CAPTURE(path);
        CAPTURE(redir);
        check_sane(r);
        CHECK(r.code == 5);
        CHECK(box.get(victim) == box.get(victim == "in.wav" ? "keep.wav" : "keep.mimi"));
      }
  // a descriptor on another file is written as before
  CHECK(box.sh("mimi convert t.mimi --format text -o /dev/fd/3 3> o.txt").code == 0);
  CHECK(!box.get("o.txt").empty());
}

TEST_CASE("classes: the tool's own JSON Lines read back with their exact ids; a mismatch allowance says when it has nothing to allow") {
  Sandbox box("clsp12hex");
  REQUIRE(box.sh("mkdir bx").code == 0);
  for (const std::string name : {"caf\xe9", "caf\xe8", "x\xff\xfe", "\xe6\xbc\xa2"})
    write_wav(box / ("bx/" + name + ".wav"), tone(4800, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  const Run r = box.sh("mimi dataset plan bx -o p1 --shards 1 -q && mimi dataset plan p1/shard-00000.jsonl -o p2 --shards 1 -q");
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  const std::regex key(R"("key":"[^"]*")");
  auto keys = [&](const std::string& text) {
    std::vector<std::string> k;
    for (std::sregex_iterator it(text.begin(), text.end(), key), end; it != end; ++it) k.push_back(it->str());
    return k;
  };
  CHECK(keys(box.get("p1/shard-00000.jsonl")).size() == 4);
  CHECK(keys(box.get("p1/shard-00000.jsonl")) == keys(box.get("p2/shard-00000.jsonl")));
  box.put("bad.jsonl", "{\"path\": \"bx/x.wav\", \"id_hex\": \"6\"}\n");
  CHECK(box.sh("mimi dataset plan bad.jsonl -o p3 --shards 1 -q").code == 3);

  write_wav(box / "in.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  for (const std::string x : {"npy", "txt", "mimi", "safetensors"}) {
    const Run d = box.sh("mimi encode in.wav -o t." + x + " -q -f && mimi decode t." + x + " -o d.wav -f --allow-weights-mismatch");
    CAPTURE(x);
    CHECK(d.code == 0);
    CHECK((d.err.find("--allow-weights-mismatch does nothing") != std::string::npos) == (x == "npy" || x == "txt"));
  }
}

// ---- the thirteenth probe's findings (issue 26)

TEST_CASE("classes: a first run that failed before recording an item binds the output to nothing") {
  Sandbox box("clsp13bind");
  fs::create_directories(box / "c");
  for (int i = 0; i < 2; ++i) write_wav(box / ("c/a" + std::to_string(i) + ".wav"), tone(6000 + 2400 * i, 1, 24000), 24000, 1,
                                        SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan c -o p --shards 2 -q && mimi dataset encode --plan p --shard 0/2 -o ref -q --n-q 8").code == 0);
  const std::string begin = begin_line(json::parse(box.get("ref/dataset.json")), 1);
  // What a run with n_q 8 leaves when the disk fills at its first item (the dataset.json it wrote
  // before the record, a journal begun), in every combination, with and without a partial tar.
  for (const bool journal : {false, true})
    for (const bool partial : {false, true}) {
      REQUIRE(box.sh("rm -rf o && mkdir -p o/shards && cp ref/dataset.json o/").code == 0);
      if (journal) box.put("o/shards/shard-00001.journal", begin);
      if (partial) box.put("o/shards/shard-00001.tar.partial", std::string(700, 'x'));
      CAPTURE(journal);
      CAPTURE(partial);
      const Run st = box.sh("mimi dataset status o --plan p --format ranges");
      CHECK_MESSAGE(st.code == 0, st.err);
      CHECK(st.out == "0-1\n");
      const Run r = box.sh("mimi dataset encode --plan p --shard 1/2 -o o --n-q 4");
      CHECK_MESSAGE(r.code == 0, r.err);
      CHECK(r.err.find("recorded no item") != std::string::npos);
      CHECK(json::parse(box.get("o/dataset.json"))["n_q"] == 4);
      // now bound: shard 0 with n_q 8 is refused, status and verify agree with the worker
      const Run again = box.sh("mimi dataset encode --plan p --shard 0/2 -o o --n-q 8");
      CHECK(again.code == 2);
      CHECK(box.sh("mimi dataset encode --plan p --shard 0/2 -o o --n-q 4 -q && mimi dataset verify o -q").code == 0);
    }
}

TEST_CASE("classes: a file truncated after it was planned is the item's error, by however little") {
  Sandbox box("clsp13trunc");
  fs::create_directories(box / "c");
  write_wav(box / "c/t.wav", tone(24000 * 3, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  write_wav(box / "c/u.wav", tone(12000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan c -o p --shards 1 -q").code == 0);
  const std::string full = box.get("c/t.wav");
  for (const size_t cut : {size_t(2), size_t(960), size_t(4800), full.size() / 3})
    for (const char* batch : {"", " --batch 2"}) {
      box.put("c/t.wav", full.substr(0, full.size() - cut));
      const Run r = box.sh(std::string("rm -rf o; mimi dataset encode --plan p --shard 0/1 -o o -q") + batch +
                           "; cat o/shards/shard-00000.errors.jsonl");
      CAPTURE(cut);
      CAPTURE(batch);
      CHECK(r.code == 0);
      CHECK(r.out.find("t.wav") != std::string::npos);
      CHECK(r.out.find("u.wav") == std::string::npos);
      CHECK(json::parse(box.get("o/shards/shard-00000.done"))["errors"] == 1);
      CHECK(box.sh("mimi dataset plan c -o p2 --shards 1 -q").code == 3);  // as plan judges the same bytes
    }
}

TEST_CASE("classes: a batch the open-file limit cuts to one slot runs wherever the one-by-one run does") {
  Sandbox box("clsp13fds");
  fs::create_directories(box / "c");
  for (int i = 0; i < 3; ++i) write_wav(box / ("c/x" + std::to_string(i) + ".wav"), tone(4800 * (i + 1), 1, 24000), 24000, 1,
                                        SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan c -o p --shards 1 -q && mimi dataset encode --plan p --shard 0/1 -o ref -q").code == 0);
  const std::string want = box.get("ref/shards/shard-00000.tar");
  int compared = 0;
  for (int n = 5; n <= 14; ++n)
    for (const int batch : {2, 3, 8}) {
      const std::string lim = "ulimit -n " + std::to_string(n) + "; ";
      const Run one = box.sh("rm -rf o1; (" + lim + "mimi dataset encode --plan p --shard 0/1 -o o1 -q)");
      if (one.code != 0) continue;  // a limit too low for anything: not this case
      const Run r = box.sh("rm -rf ob; (" + lim + "mimi dataset encode --plan p --shard 0/1 -o ob -q --batch " +
                           std::to_string(batch) + ")");
      CAPTURE(n);
      CAPTURE(batch);
      CHECK_MESSAGE(r.code == 0, r.err);
      if (r.code == 0) CHECK(box.get("ob/shards/shard-00000.tar") == want);
      ++compared;
    }
  CHECK(compared > 0);
}

// ---- the fourteenth probe's findings (issue 26)

TEST_CASE("classes: a shard refused for its journal says which setting differs, with the exit code of that setting") {
  Sandbox box("clsp14kind");
  fs::create_directories(box / "c");
  write_wav(box / "c/a.wav", tone(6000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan c -o p --shards 1 -q && mimi dataset encode --plan p --shard 0/1 -o ref -q && "
                 "mimi gen-weights --config tiny --seed 9 -o wb/w.safetensors -q")
              .code == 0);
  const std::string begin = begin_line(json::parse(box.get("ref/dataset.json")), 0);
  // a journal holding work, its dataset.json removed by hand: other weights are still exit 4
  for (const auto& [args, code, names] : {std::tuple{std::string("--weights wb/w.safetensors"), 4, "weights_fingerprint"},
                                          std::tuple{std::string("--n-q 4"), 2, "n_q 8 there, 4 here"}}) {
    REQUIRE(box.sh("rm -rf o && mkdir -p o/shards").code == 0);
    box.put("o/shards/shard-00000.journal", begin + "{\"i\":0}\n");
    const Run r = box.sh("mimi dataset encode --plan p --shard 0/1 -o o " + args);
    CAPTURE(args);
    CHECK(r.code == code);
    CHECK(r.err.find(names) != std::string::npos);
  }
  // an output directory that cannot be made says why, naming it (not the lock's ENOENT after it)
  box.put("afile", "x");
  const Run r = box.sh("mimi dataset encode --plan p --shard 0/1 -o afile/out");
  CHECK(r.code == 5);
  CHECK(r.err.find("afile/out/shards: cannot create the directory: Not a directory") != std::string::npos);
}
