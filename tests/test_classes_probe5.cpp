// The fifth fresh probe's findings (issue 26), each swept as the class it belongs to:
//   - the same WAV bytes by file, by stdin and through a pipe give the same outcome and the same
//     codes (8-bit, 64-bit float, mu-law... failed from stdin; a data size of 0 read 0 samples
//     from a file and all of them from stdin)
//   - an output path that is an open descriptor (/dev/stdout ...) is written in place, and one
//     that is a symlink is published where the link points, the link left a link (the temporary
//     and rename replaced /dev/stdout itself)
//   - every signal that ends a process by default leaves no temporary behind
//   - a temporary whose writer is alive elsewhere (another PID namespace: its PID means nothing
//     here) is never swept: the writer's lock says it is alive
//   - a small stack limit runs (it crashed with SIGSEGV)
//   - a deleted current directory: absolute paths work, relative ones are a usage error, never 70
//   - a file named like an option gets a hint; --raw-rate/--raw-channels need --raw-format
// Whole-number options read as decimal are swept in test_classes_probe3.cpp with the other
// number-option values.
#include <doctest/doctest.h>
#include <sndfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "support/cli.h"

using namespace mimi::test;

namespace {

// n frames of a tone in the sample encoding of (tag, bits): 1 = integer PCM (8-bit unsigned),
// 3 = IEEE float, 6 = A-law, 7 = mu-law (one byte each, any byte is a sample)
std::string samples(uint16_t tag, uint16_t bits, int64_t n, int channels) {
  std::string s;
  for (int64_t i = 0; i < n * channels; ++i) {
    const double v = 0.4 * std::sin(2 * M_PI * 330.0 * double(i / channels) / 24000.0);
    if (tag == 6 || tag == 7) {
      s += char(uint8_t(int(i * 37) & 0xff));
    } else if (tag == 3 && bits == 64) {
      char b[8];
      std::memcpy(b, &v, 8);
      s.append(b, 8);
    } else if (tag == 3) {
      const float f = float(v);
      char b[4];
      std::memcpy(b, &f, 4);
      s.append(b, 4);
    } else if (bits == 8) {
      s += char(uint8_t(128 + std::lround(v * 127)));
    } else {
      const int64_t q = std::llround(v * double((int64_t(1) << (bits - 1)) - 1));
      for (int k = 0; k < bits / 8; ++k) s += char(uint8_t(q >> (8 * k)));
    }
  }
  return s;
}

}  // namespace

TEST_CASE("classes: the same WAV bytes by file, by stdin and through a pipe give the same outcome") {
  Sandbox box("clsp5wav");
  struct Enc {
    uint16_t tag, bits;
  };
  int checked = 0, encoded = 0;
  for (const Enc e : {Enc{1, 8}, Enc{1, 16}, Enc{1, 24}, Enc{1, 32}, Enc{3, 32}, Enc{3, 64}, Enc{6, 8}, Enc{7, 8}}) {
    for (const int channels : {1, 2}) {
      for (const int64_t data_size : {int64_t(-1), int64_t(0), int64_t(0xFFFFFFFF)}) {
        WavSpec w;
        w.tag = e.tag;
        w.bits = e.bits;
        w.channels = uint16_t(channels);
        w.data = samples(e.tag, e.bits, 7000, channels);
        w.data_size = data_size;
        if (data_size == 0xFFFFFFFF) w.riff_size = 0xFFFFFFFF;
        box.put("in.wav", make_wav(w));
        const Run file = box.sh("mimi encode in.wav -o f.mimi -f -q 2>&1");
        const Run redirect = box.sh("mimi encode - -o r.mimi -f -q < in.wav 2>&1");
        const Run pipe = box.sh("cat in.wav | mimi encode - -o p.mimi -f -q 2>&1");
        CAPTURE(e.tag);
        CAPTURE(e.bits);
        CAPTURE(channels);
        CAPTURE(data_size);
        CAPTURE(file.out);
        CAPTURE(redirect.out);
        for (const Run* r : {&file, &redirect, &pipe}) check_sane(*r);
        CHECK(file.code == redirect.code);
        CHECK(file.code == pipe.code);
        if (file.code == 0 && redirect.code == 0 && pipe.code == 0) {
          CHECK(box.get("f.mimi") == box.get("r.mimi"));
          CHECK(box.get("f.mimi") == box.get("p.mimi"));
          ++encoded;
        }
        ++checked;
      }
    }
  }
  CHECK(checked == 48);
  CHECK(encoded == 48);  // every encoding, whole or streamed, with a true, 0 or 0xFFFFFFFF data size
}

TEST_CASE("classes: an output path that is an open descriptor or a symlink") {
  Sandbox box("clsp5out");
  write_wav(box / "in.wav", tone(12000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode in.wav -o - -q > ref.mimi").code == 0);
  const std::string ref = box.get("ref.mimi");
  REQUIRE(!ref.empty());
  // written into the descriptor the shell opened, with or without --force; /dev/stdout itself untouched
  for (const std::string path : {"/dev/stdout", "/proc/self/fd/1", "/dev/fd/1"}) {
    for (const std::string force : {"", " -f"}) {
      const Run r = box.sh("mimi encode in.wav -o " + path + force + " -q > out.mimi 2>err.txt; echo $?");
      CAPTURE(path);
      CAPTURE(force);
      CAPTURE(box.get("err.txt"));
      CHECK(r.out == "0\n");
      CHECK(box.get("out.mimi") == ref);
    }
  }
  const Run err = box.sh("mimi encode in.wav -o /dev/stderr -q 2> e.mimi; echo $?");
  CHECK(err.out == "0\n");
  CHECK(box.get("e.mimi") == ref);
  struct stat st{};
  REQUIRE(::lstat("/dev/stdout", &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  CHECK(box.sh("mimi encode in.wav -o /dev/fd/9 -q; echo $?").out == "5\n");  // not open: not written

  // symlinks: relative, absolute, a chain, dangling; the link stays, the target gets the output
  box.sh("mkdir -p t && echo old > t/a.mimi && echo old > t/b.mimi && ln -s t/a.mimi rel.mimi && "
         "ln -s \"$PWD/t/b.mimi\" abs.mimi && ln -s rel.mimi chain.mimi && ln -s t/new.mimi dangling.mimi");
  struct Link {
    std::string link, target;
  };
  for (const Link& l : {Link{"rel.mimi", "t/a.mimi"}, Link{"abs.mimi", "t/b.mimi"}, Link{"chain.mimi", "t/a.mimi"},
                        Link{"dangling.mimi", "t/new.mimi"}}) {
    CAPTURE(l.link);
    const bool existed = box.get(l.target) == "old\n";
    if (existed) {  // an existing target needs --force, like any output
      CHECK(box.sh("mimi encode in.wav -o " + l.link + " -q").code == 5);
      CHECK(box.get(l.target) == "old\n");
    }
    const Run r = box.sh("mimi encode in.wav -o " + l.link + " -f -q 2>&1");
    CAPTURE(r.out);
    CHECK(r.code == 0);
    REQUIRE(::lstat((box / l.link).c_str(), &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
    CHECK(box.get(l.target) == ref);
    box.put(l.target, "old\n");
  }
  CHECK(box.sh("ls -A t | grep -c mimi-tmp").out == "0\n");
}

TEST_CASE("classes: every signal that ends a process by default leaves no temporary") {
  Sandbox box("clsp5sig");
  std::vector<std::string> sigs = {"PROF", "IO", "SYS", "TRAP", "STKFLT", "RTMIN", "RTMIN+5", "RTMAX-1", "RTMAX"};
#if !defined(__SANITIZE_ADDRESS__)  // ASan keeps its own handlers for the crash signals
  for (const std::string s : {"SEGV", "BUS", "ILL", "FPE", "ABRT"}) sigs.push_back(s);
#endif
  for (const std::string& sig : sigs) {
    // a streaming encode that has written its first frames and waits for more input
    // fed through a FIFO the shell holds open (no feeder process outliving the test's command)
    const Run r = box.sh("rm -rf s f; mkdir s; mkfifo f; mimi encode --stream - --raw-format s16le -o s/o.mimi -q < f & "
                         "p=$!; exec 3>f; head -c 96000 /dev/zero >&3; "
                         "for i in $(seq 100); do [ -n \"$(ls -A s)\" ] && break; sleep 0.05; done; sleep 0.3; "
                         "kill -" + sig + " $p; wait $p; echo $? $(kill -l " + sig + "); exec 3>&-; ls -A s", 60);
    CAPTURE(sig);
    CAPTURE(r.out);
    int code = -1, num = -2;
    REQUIRE(std::sscanf(r.out.c_str(), "%d %d", &code, &num) == 2);
    CHECK(code == 128 + num);
    CHECK(r.out.find("mimi-tmp") == std::string::npos);
  }
}

TEST_CASE("classes: a temporary whose writer holds its lock is never swept, a dead one is") {
  Sandbox box("clsp5tmp");
  write_wav(box / "in.wav", tone(2400, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  char host[256] = {0};
  REQUIRE(::gethostname(host, sizeof host - 1) == 0);
  std::string h(host);
  for (char& c : h)
    if (c == '/' || c == '.') c = '_';
  // a PID that is dead here, as a writer's in another PID namespace is
  const std::string tmp = "out/.x.mimi.mimi-tmp." + h + ".$dead.1";
  const std::string setup = "mkdir -p out; true & dead=$!; wait $dead; t=" + tmp + "; echo partial > \"$t\"; ";
  // held by a live process (flock(1) holds it for the command's life): left alone
  const Run live = box.sh(setup + "flock \"$t\" sleep 3 & sleep 0.5; mimi encode in.wav -o out/a.mimi -q; "
                          "echo $?; ls -A out | grep -c mimi-tmp; wait", 60);
  CHECK(live.out == "0\n1\n");
  // nobody holds it: swept by the next run into the folder
  const Run dead = box.sh("mimi encode in.wav -o out/b.mimi -q; echo $?; ls -A out | grep -c mimi-tmp", 60);
  CHECK(dead.out == "0\n0\n");
}

TEST_CASE("classes: small stack limits run and give the same codes") {
#if !defined(__SANITIZE_ADDRESS__)
  Sandbox box("clsp5stack");
  write_wav(box / "in.wav", tone(24000, 2, 24000), 24000, 2, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode in.wav -o ref.mimi -q").code == 0);
  for (const int kib : {32, 64, 128, 512}) {
    const Run r = box.sh("ulimit -s " + std::to_string(kib) + "; mimi encode in.wav -o s.mimi -f -q --threads 2 && "
                         "mimi decode s.mimi -o s.wav -f -q 2>&1");
    CAPTURE(kib);
    CAPTURE(r.out);
    check_sane(r);
    CHECK(r.code == 0);
    CHECK(box.get("s.mimi") == box.get("ref.mimi"));
  }
#endif
}

TEST_CASE("classes: a deleted current directory: absolute paths work, relative ones are a usage error") {
  Sandbox box("clsp5cwd");
  write_wav(box / "in.wav", tone(2400, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  box.put("list.txt", (box / "in.wav").string() + "\n");
  const std::string gone = "B=$PWD; mkdir g && cd g && rmdir ../g; ";
  struct Case {
    std::string cmd;
    int code;
  };
  for (const Case& c : {Case{"echo \"$B/in.wav\" | mimi dataset plan - -o \"$B/p1\" --shards 1", 0},
                        Case{"mimi dataset plan \"$B/list.txt\" -o \"$B/p2\" --shards 1", 0},
                        Case{"mimi encode \"$B/in.wav\" -o \"$B/x.mimi\"", 0},
                        Case{"echo in.wav | mimi dataset plan - -o \"$B/p3\" --shards 1", 2},
                        Case{"mimi dataset plan list.txt -o \"$B/p4\" --shards 1", 2},
                        // a relative output: not written (5), saying why
                        Case{"mimi dataset plan \"$B/list.txt\" -o p5 --shards 1", 5},
                        Case{"mimi encode \"$B/in.wav\" -o x.mimi", 5}}) {
    const Run r = box.sh(gone + c.cmd + " 2>&1", 60);
    CAPTURE(c.cmd);
    CAPTURE(r.out);
    check_sane(r);
    CHECK(r.code == c.code);
    if (c.code != 0) CHECK(contains_ci(r.out, "current directory is gone"));
  }
}

TEST_CASE("classes: option-shaped file names get a hint; raw-input options need --raw-format") {
  Sandbox box("clsp5opt");
  write_wav(box / "-take1.wav", tone(2400, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  const Run r = box.sh("mimi encode -take1.wav 2>&1");
  CHECK(r.code == 2);
  CHECK(r.out.find("./-take1.wav") != std::string::npos);
  CHECK(box.sh("mimi encode -o x.mimi -q -- -take1.wav").code == 0);
  CHECK(box.sh("mimi encode ./-take1.wav -o y.mimi -q").code == 0);
  for (const std::string opt : {"--raw-rate 8000", "--raw-channels 2"}) {
    const Run o = box.sh("mimi encode ./-take1.wav -o z.mimi " + opt + " 2>&1");
    CAPTURE(opt);
    CHECK(o.code == 2);
    CHECK(o.out.find("--raw-format") != std::string::npos);
  }
}

// ---- the sixth fresh probe's findings, by class

TEST_CASE("classes: a finished shard missing any of its files is not done: status lists it, the worker redoes it") {
  Sandbox box("clsp6shard");
  box.sh("mkdir corp");
  for (const std::string n : {"x", "y"}) write_wav(box / ("corp/" + n + ".wav"), tone(6000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi dataset plan corp -o plan --shards 1 -q && mimi dataset encode --plan plan --shard 0/1 -o out -q").code == 0);
  const std::string tar = box.get("out/shards/shard-00000.tar"), index = box.get("out/shards/shard-00000.index.jsonl");
  for (const std::string cut : {"rm out/shards/shard-00000.index.jsonl", "rm out/shards/shard-00000.errors.jsonl",
                                "head -c 10 out/shards/shard-00000.index.jsonl > t && mv t out/shards/shard-00000.index.jsonl",
                                "echo '{}' >> out/shards/shard-00000.errors.jsonl"}) {
    CAPTURE(cut);
    REQUIRE(box.sh(cut).code == 0);
    const Run todo = box.sh("mimi dataset status out --todo --format ranges 2>/dev/null");
    CHECK(todo.out == "0\n");
    CHECK(box.sh("mimi dataset encode --plan plan --shard 0/1 -o out -q").code == 0);
    CHECK(box.sh("mimi dataset verify out -q").code == 0);
    CHECK(box.get("out/shards/shard-00000.tar") == tar);
    CHECK(box.get("out/shards/shard-00000.index.jsonl") == index);
  }
}

TEST_CASE("classes: --json never shares stdout with an output, whatever names stdout") {
  Sandbox box("clsp6json");
  write_wav(box / "in.wav", tone(6000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode in.wav -o in.mimi -q").code == 0);
  int checked = 0;
  for (const std::string out : {"-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"}) {
    for (const std::string cmd : {"encode in.wav", "decode in.mimi", "convert in.mimi --format text", "roundtrip in.wav",
                                  "encode --stream in.wav", "decode --stream in.mimi"}) {
      const Run r = box.sh("mimi " + cmd + " -o " + out + " --json > o.bin 2>err.txt; echo $?");
      CAPTURE(cmd);
      CAPTURE(out);
      CAPTURE(box.get("err.txt"));
      CHECK(r.out == "2\n");
      CHECK(box.get("o.bin").empty());
      ++checked;
    }
  }
  CHECK(checked == 24);
}

TEST_CASE("classes: an output path ending in '/' is not a file name") {
  Sandbox box("clsp6slash");
  write_wav(box / "in.wav", tone(6000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  for (const std::string cmd : {"gen-weights -o newdir/", "gen-weights -o newdir/ -f", "gpu-trace --config tiny -o newdir/"}) {
    const Run r = box.sh("mimi " + cmd + " 2>&1");
    CAPTURE(cmd);
    CAPTURE(r.out);
    check_sane(r);
    CHECK(r.code == 2);
    CHECK(!fs::exists(box / "newdir"));
  }
}

TEST_CASE("classes: a WAV shorter than its header says is named by every reader, --stream too") {
  Sandbox box("clsp6short");
  WavSpec w;
  w.data = s16_bytes(tone(20000, 1, 24000));
  w.data_size = 48000;  // promises 24000 frames, holds 10000
  box.put("short.wav", make_wav(w));
  for (const std::string cmd : {"mimi encode short.wav -o a.mimi", "mimi encode - -o b.mimi < short.wav",
                                "cat short.wav | mimi encode - -o c.mimi", "mimi encode --stream - -o d.mimi < short.wav",
                                "mimi encode --stream short.wav -o e.mimi"}) {
    const Run r = box.sh(cmd + " 2>&1");
    CAPTURE(cmd);
    CAPTURE(r.out);
    CHECK(r.code == 0);
    CHECK(contains_ci(r.out, "truncated"));
  }
}

TEST_CASE("classes: every header field a decode depends on is checked") {
  Sandbox box("clsp6hdr");
  write_wav(box / "in.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode in.wav -o a.mimi -q && mimi encode in.wav -o a.safetensors -q").code == 0);
  // .mimi header JSON fields
  struct Edit {
    std::string from, to;
    int code;
  };
  const MimiParts p = split_mimi(box.get("a.mimi"));
  for (const Edit& e : {Edit{"\"frame_rate\":12.5", "\"frame_rate\":25", 3}, Edit{"\"frame_rate\":12.5", "\"frame_rate\":12.5", 0},
                        Edit{"\"sample_rate\":24000", "\"sample_rate\":16000", 3}}) {
    MimiParts q = p;
    const size_t at = q.header.find(e.from);
    REQUIRE(at != std::string::npos);
    q.header.replace(at, e.from.size(), e.to);
    box.put("e.mimi", join_mimi(q));
    const Run r = box.sh("mimi decode e.mimi -o e.wav -f 2>&1");
    CAPTURE(e.to);
    CAPTURE(r.out);
    CHECK(r.code == e.code);
  }
  // the sample count (safetensors metadata): 13 frames hold 23041..24960 samples
  const std::string st = box.get("a.safetensors");
  for (const auto& [samples, code] : std::vector<std::pair<std::string, int>>{
           {"0", 3}, {"1", 3}, {"23040", 3}, {"23041", 0}, {"24000", 0}, {"24960", 0}, {"24961", 3}}) {
    std::string s = st;
    const std::string key = "\"original_samples\":\"24000\"";
    const size_t at = s.find(key);
    REQUIRE(at != std::string::npos);
    std::string repl = "\"original_samples\":\"" + samples + "\"";
    repl.append(key.size() - std::min(key.size(), repl.size()), ' ');  // keep the header's length
    if (repl.size() > key.size()) continue;
    s.replace(at, key.size(), repl);
    box.put("e.safetensors", s);
    const Run r = box.sh("mimi decode e.safetensors -o e.wav -f 2>&1");
    CAPTURE(samples);
    CAPTURE(r.out);
    CHECK(r.code == code);
  }
}

TEST_CASE("classes: weights from the Hugging Face cache follow refs/main") {
  Sandbox box("clsp6hf");
  write_wav(box / "in.wav", tone(6000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  const std::string w = fs::path(box.weights).parent_path().string();
  const std::string R = "hf/hub/models--kyutai--mimi";
  // the good snapshot named by refs/main, a broken one beside it (older and newer)
  const Run setup = box.sh("mkdir -p " + R + "/snapshots/aaa " + R + "/snapshots/zzz " + R + "/refs && cp '" + box.weights +
                           "' " + R + "/snapshots/zzz/model.safetensors && cp '" + w + "/config.json' " + R +
                           "/snapshots/zzz/ && printf broken > " + R + "/snapshots/aaa/model.safetensors && touch " + R +
                           "/snapshots/aaa && printf 'zzz\\n' > " + R + "/refs/main");
  INFO(setup.err);
  REQUIRE(setup.code == 0);
  CHECK(box.sh("env -u MIMI_WEIGHTS HF_HOME=$PWD/hf mimi encode in.wav -o a.mimi -q").code == 0);
  CHECK(box.sh("env -u MIMI_WEIGHTS -u HF_HOME HF_HUB_CACHE=$PWD/hf/hub mimi encode in.wav -o b.mimi -q").code == 0);
  CHECK(box.get("a.mimi") == box.get("b.mimi"));
  // refs/main naming a broken snapshot (missing, dangling link, a directory in its place) is the
  // weights' error naming it, never another snapshot's model in its place (thirteenth probe)
  for (const std::string& broken : {std::string("rm -f S/model.safetensors"), std::string("ln -sf ../../blobs/gone S/model.safetensors"),
                                    std::string("rm -f S/model.safetensors && mkdir S/model.safetensors")}) {
    std::string cmd = "rm -rf " + R + "/snapshots/new && mkdir -p " + R + "/snapshots/new && cp '" + box.weights + "' " + R +
                      "/snapshots/new/model.safetensors && " + broken + " && printf new > " + R + "/refs/main";
    for (size_t at; (at = cmd.find("S/")) != std::string::npos;) cmd.replace(at, 2, R + "/snapshots/new/");
    REQUIRE(box.sh(cmd).code == 0);
    const Run r = box.sh("rm -f c.mimi; env -u MIMI_WEIGHTS HF_HOME=$PWD/hf mimi encode in.wav -o c.mimi -q");
    CAPTURE(broken);
    CHECK(r.code == 4);
    CHECK(r.err.find("snapshots/new") != std::string::npos);
    CHECK(!fs::exists(box / "c.mimi"));
  }
  // without refs/main, the newest snapshot with a weights entry decides: broken (here a directory
  // in its place), it is the error, never an older snapshot's model (seventeenth probe); gone, the
  // next newest that holds one is taken
  REQUIRE(box.sh("rm " + R + "/refs/main && rm -rf " + R + "/snapshots/aaa").code == 0);
  const Run nr = box.sh("env -u MIMI_WEIGHTS HF_HOME=$PWD/hf mimi encode in.wav -o d.mimi -q");
  CHECK(nr.code == 4);
  CHECK(nr.err.find("snapshots/new") != std::string::npos);
  REQUIRE(box.sh("rm -rf " + R + "/snapshots/new").code == 0);
  CHECK(box.sh("env -u MIMI_WEIGHTS HF_HOME=$PWD/hf mimi encode in.wav -o d.mimi -q").code == 0);
}
