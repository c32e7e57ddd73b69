// The prepared-weights cache (issue 29, codec/prepared_weights.h): a hit maps the entry, a change
// of any identity field of the weights file (or of the config) rebuilds it, a damaged entry is
// never used, concurrent first runs agree, a cache that cannot be written is a warning, and the
// codes are the same with and without it.
#include <doctest/doctest.h>
#include <sndfile.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include "support/cli.h"

using namespace mimi::test;

namespace {

std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> v;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) v.push_back(e.path());
  std::sort(v.begin(), v.end());
  return v;
}

struct CacheBox {
  Sandbox box{"wcache"};
  std::string enc(const std::string& out, const std::string& extra = "") {
    return "MIMI_CACHE_DIR=$PWD/../" + box.dir.filename().string() + ".c mimi encode a.wav -o " + out + " -f -v --weights w/m.safetensors" + extra;
  }
  fs::path cache() const { return box.dir.parent_path() / (box.dir.filename().string() + ".c"); }
  CacheBox() {
    std::error_code ec;
    fs::remove_all(cache(), ec);
    write_wav(box / "a.wav", tone(24000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
    REQUIRE(box.sh("mkdir w && mimi gen-weights --config tiny -o w/m.safetensors -q && mimi gen-weights --config tiny --seed 2 -o other.safetensors -q").code == 0);
    REQUIRE(box.sh("mimi encode a.wav -o ref.mimi --no-cache -q --weights w/m.safetensors").code == 0);
    settle();
  }
  // A weights file is cached only once its timestamps would show a further change (100 ms on a
  // file system with nanoseconds: SourceIdentity::settled): each change below waits that long.
  void settle() const { REQUIRE(box.sh("sleep 0.15").code == 0); }
  ~CacheBox() {
    std::error_code ec;
    fs::remove_all(cache(), ec);
  }
};

}  // namespace

TEST_CASE("weights cache: built once, then mapped; the codes are those without it") {
  CacheBox c;
  const Run first = c.box.sh(c.enc("x1.mimi"));
  REQUIRE(first.code == 0);
  CHECK(first.err.find("weights prepared into") != std::string::npos);
  const std::vector<fs::path> e = entries(c.cache());
  REQUIRE(e.size() == 1);
  struct stat st {};
  REQUIRE(::stat(e[0].c_str(), &st) == 0);
  CHECK((st.st_mode & 0222) == 0);  // read-only
  const ino_t ino = st.st_ino;
  const Run second = c.box.sh(c.enc("x2.mimi"));
  CHECK(second.code == 0);
  CHECK(second.err.find("mapped from their prepared copy") != std::string::npos);
  REQUIRE(::stat(e[0].c_str(), &st) == 0);
  CHECK(st.st_ino == ino);  // not rewritten
  CHECK(c.box.get("x1.mimi") == c.box.get("ref.mimi"));
  CHECK(c.box.get("x2.mimi") == c.box.get("ref.mimi"));
  // decode and roundtrip too: audio identical with and without
  CHECK(c.box.sh("MIMI_CACHE_DIR=" + c.cache().string() + " mimi decode ref.mimi -o d1.wav -q --weights w/m.safetensors && "
                 "mimi decode ref.mimi -o d2.wav -q --no-cache --weights w/m.safetensors && cmp d1.wav d2.wav").code == 0);
  // --no-cache and MIMI_NO_CACHE=1 make none and use none
  std::error_code ec;
  fs::remove_all(c.cache(), ec);
  CHECK(c.box.sh(c.enc("x3.mimi", " --no-cache")).code == 0);
  CHECK(c.box.sh("MIMI_NO_CACHE=1 " + c.enc("x4.mimi")).code == 0);
  CHECK(c.box.sh("MIMI_NO_CACHE=Yes " + c.enc("x4.mimi")).code == 0);
  CHECK(entries(c.cache()).empty());
  // info and --help never touch the weights
  CHECK(c.box.sh("MIMI_CACHE_DIR=" + c.cache().string() + " mimi info ref.mimi >/dev/null && mimi --help >/dev/null").code == 0);
  CHECK(entries(c.cache()).empty());
  // a switch, spelled as switches are: off keeps the cache, a value that is neither is exit 2
  for (const char* keep : {"0", "false", "no", "OFF"}) {
    CAPTURE(keep);
    CHECK(c.box.sh(std::string("MIMI_NO_CACHE=") + keep + " " + c.enc("x5.mimi")).code == 0);
    CHECK(entries(c.cache()).size() == 1);
  }
  const Run bad = c.box.sh("MIMI_NO_CACHE=x " + c.enc("x6.mimi"));
  CHECK(bad.code == 2);
  CHECK(bad.err.find("MIMI_NO_CACHE") != std::string::npos);
  // a home that is not there gets no cache folder made in it
  CHECK(c.box.sh("env -u MIMI_CACHE_DIR -u XDG_CACHE_HOME HOME=$PWD/nohome/h mimi encode a.wav -o x7.mimi -f -q --weights w/m.safetensors").code == 0);
  CHECK(!fs::exists(c.box / "nohome"));
}

TEST_CASE("weights cache: every identity field of the weights file, and the config, rebuild it") {
  CacheBox c;
  REQUIRE(c.box.sh(c.enc("x.mimi")).code == 0);
  struct Change {
    std::string what;
    std::string cmd;
    bool same_codes;
  };
  const std::vector<Change> changes = {
      {"mtime", "touch -d '2001-02-03' w/m.safetensors", true},
      {"ctime (mode)", "chmod 600 w/m.safetensors", true},
      {"inode (a copy moved in)", "cp w/m.safetensors w/t && mv w/t w/m.safetensors", true},
      {"contents, same size and mtime", "touch -r w/m.safetensors stamp && cp other.safetensors w/m.safetensors && touch -r stamp w/m.safetensors", false},
      // (the same values under moshi's names: another size, the same codes)
      {"size", "mimi gen-weights --config tiny --dialect moshi -o w/m.safetensors -f -q", true},
  };
  for (const Change& ch : changes) {
    CAPTURE(ch.what);
    REQUIRE(c.box.sh(ch.cmd).code == 0);
    c.settle();
    const Run r = c.box.sh(c.enc("y.mimi"));
    CHECK(r.code == 0);
    CHECK(r.err.find("weights prepared into") != std::string::npos);
    // the codes are those of the file as it is now, as without the cache
    REQUIRE(c.box.sh("mimi encode a.wav -o z.mimi -f -q --no-cache --weights w/m.safetensors").code == 0);
    CHECK(c.box.get("y.mimi") == c.box.get("z.mimi"));
    const bool same = c.box.get("y.mimi") == c.box.get("ref.mimi");
    CHECK(same == ch.same_codes);
    const Run again = c.box.sh(c.enc("y2.mimi"));
    CHECK(again.err.find("mapped from their prepared copy") != std::string::npos);
  }
  // another config for the same file: another entry
  REQUIRE(c.box.sh("mimi gen-weights --config tiny -o w/m.safetensors -f -q").code == 0);
  c.settle();
  REQUIRE(c.box.sh(c.enc("y.mimi")).code == 0);
  std::string cfg = c.box.get("w/config.json");
  const size_t at = cfg.find("\"rope_theta\": ");
  REQUIRE(at != std::string::npos);
  const size_t end = cfg.find(',', at);
  c.box.put("cfg2.json", cfg.substr(0, at) + "\"rope_theta\": 5000.0" + cfg.substr(end));
  const Run r = c.box.sh(c.enc("c2.mimi", " --config cfg2.json"));
  CHECK(r.code == 0);
  CHECK(r.err.find("weights prepared into") != std::string::npos);
  CHECK(c.box.sh("mimi encode a.wav -o c3.mimi -f -q --no-cache --config cfg2.json --weights w/m.safetensors").code == 0);
  CHECK(c.box.get("c2.mimi") == c.box.get("c3.mimi"));
  // the folder keeps its newest entries only
  CHECK(entries(c.cache()).size() <= 4);
}

TEST_CASE("weights cache: a damaged or truncated entry is never used: rebuilt") {
  CacheBox c;
  REQUIRE(c.box.sh(c.enc("x.mimi")).code == 0);
  const fs::path e = entries(c.cache()).at(0);
  const std::string good = slurp(e);
  const unsigned seed = test_seed();
  std::vector<std::pair<std::string, std::string>> damage = {
      {"empty", ""},
      {"magic", "X" + good.substr(1)},
      {"header byte", good.substr(0, 60) + char(good[60] ^ 1) + good.substr(61)},
      {"cut in the data", good.substr(0, good.size() - 4096)},
      {"one byte short", good.substr(0, good.size() - 1)},
      {"grown", good + std::string(64, '\0')},
      {"header only", good.substr(0, 4096)},
  };
  for (int k = 0; k < 3; ++k) {  // a byte of the header, anywhere
    const size_t at = 48 + (seed * 7919u + unsigned(k) * 104729u) % 600;
    std::string d = good;
    d[at] = char(d[at] ^ 0x20);
    damage.emplace_back("header at " + std::to_string(at), d);
  }
  for (const auto& [what, bytes] : damage) {
    CAPTURE(what);
    ::chmod(e.c_str(), 0644);
    spit(e, bytes);
    const Run r = c.box.sh(c.enc("y.mimi"));
    CHECK(r.code == 0);
    CHECK(r.err.find("weights prepared into") != std::string::npos);
    CHECK(c.box.get("y.mimi") == c.box.get("ref.mimi"));
    CHECK(slurp(e) == good);  // rebuilt whole
  }
  // a whole entry that others may write is not trusted either
  for (const mode_t mode : {mode_t(0664), mode_t(0646)}) {
    CAPTURE(mode);
    ::chmod(e.c_str(), mode);
    const Run r = c.box.sh(c.enc("y.mimi"));
    CHECK(r.err.find("weights prepared into") != std::string::npos);
    struct stat st {};
    REQUIRE(::stat(e.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0444);
  }
}

TEST_CASE("weights cache: first runs at once agree; a cache that cannot be written is a warning") {
  CacheBox c;
  std::string cmd;
  for (int i = 0; i < 4; ++i) cmd += c.enc("p" + std::to_string(i) + ".mimi") + " 2>/dev/null & ";
  cmd += "wait";
  REQUIRE(c.box.sh(cmd).code == 0);
  for (int i = 0; i < 4; ++i) CHECK(c.box.get("p" + std::to_string(i) + ".mimi") == c.box.get("ref.mimi"));
  const std::vector<fs::path> e = entries(c.cache());
  CHECK(e.size() == 1);  // one entry, no temporaries left
  CHECK(c.box.sh(c.enc("q.mimi")).err.find("mapped from their prepared copy") != std::string::npos);
  // a folder that cannot be made or written (even by root): a warning, the codes all the same
  for (const std::string& dir : {std::string("/proc/version/x"), std::string("/proc/self")}) {
    CAPTURE(dir);
    const Run r = c.box.sh("MIMI_CACHE_DIR=" + dir + " mimi encode a.wav -o u.mimi -f --weights w/m.safetensors");
    CHECK(r.code == 0);
    CHECK(r.err.find("warning") != std::string::npos);
    CHECK(r.err.find("prepared-weights cache could not be written") != std::string::npos);
    CHECK(c.box.get("u.mimi") == c.box.get("ref.mimi"));
  }
  // weights from a pipe are read as always, never cached
  const Run p = c.box.sh("MIMI_CACHE_DIR=$PWD/pc mimi encode a.wav -o v.mimi -f -q --weights <(cat w/m.safetensors) --config w/config.json");
  CHECK(p.code == 0);
  CHECK(entries(c.box / "pc").empty());
  CHECK(c.box.get("v.mimi") == c.box.get("ref.mimi"));
}
