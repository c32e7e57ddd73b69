// The dataset mode against corpora nobody checked (issue 26), as generated sweeps: file names
// that are any bytes, trees of symbolic links (loops, parents, dangling), FIFOs, sockets and
// devices in manifests, manifests read from pipes, from other platforms (CRLF, byte-order marks,
// UTF-16), and hundreds of bad lines. Invariants: a documented exit code (never 70), a message
// that names each bad entry, every good file planned exactly once, distinct keys, and the exact
// bytes of every path back from plan -> worker -> tar.
// The sweeps are seeded (MIMI_TEST_SEED, default 26) so that a failure can be replayed.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "app/dataset/dataset.h"
#include "app/dataset/entries.h"
#include "app/dataset/tar.h"
#include "app/sys/json_bytes.h"
#include "codec/error.h"
#include "support/cli.h"

using namespace mimi;
using namespace mimi::test;
namespace ds = mimi::app::dataset;
using nlohmann::json;

namespace {

// A short tone as WAV bytes (made once): every generated file is one of these.
const std::string& tiny_wav() {
  static const std::string w = [] {
    WavSpec s;
    s.data = s16_bytes(tone(2400, 1, 24000));  // 0.1 s
    return make_wav(s);
  }();
  return w;
}

void put_wav(const fs::path& p) {
  fs::create_directories(p.parent_path());
  spit(p, tiny_wav());
}

// A random file name: pieces that break naive code (blanks, quotes, backslashes, newlines, leading
// dashes, '#', dots), UTF-8 (CJK, accents, emoji) and bytes that are not UTF-8 (lone continuation
// bytes, Latin-1, a cut sequence, a surrogate, an overlong '/'). Never '/' or NUL.
std::string random_name(std::mt19937& rng) {
  static const std::vector<std::string> pieces = {
      "a", "B", "z9", "x_y", " ", "\t", "\n", "\r", "'", "\"", "\\", "-", "--", "#", "*", "?", "$", "`", ";", "&",
      "|", "<", ">", "~", "=", "+", ",", "@", ":", "%", ".", "..", "\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac",
      "\xe4\xb8\xad\xe5\x9b\xbd", "\xf0\x9f\x8e\xb5", "\xc2\xa0", "\xe9", "\xe8", "\xff", "\x80", "\xc3",
      "\xed\xa0\x80", "\xc0\xaf", "\x01", "\x7f"};
  std::string n;
  const int k = 1 + int(rng() % 6);
  for (int i = 0; i < k; ++i) n += pieces[rng() % pieces.size()];
  if (rng() % 5 == 0) n = "-" + n;  // a leading dash
  return n;
}

// Name -> exact path bytes for a generated corpus; ids are the relative paths without extension.
std::string without_ext(const std::string& rel) {
  const fs::path p(rel);
  return (p.parent_path() / p.stem()).string();
}

struct Corpus {
  std::vector<std::string> rel;  // relative to the corpus folder
};

Corpus random_corpus(const fs::path& root, std::mt19937& rng, int files) {
  Corpus c;
  std::set<std::string> names;
  static const char* exts[] = {".wav", ".WAV", ".Wav"};
  // pairs that only differ in bytes a key replaces, and names that look alike
  for (const char* n : {"\xe6\x97\xa5\xe6\x9c\xac.wav", "\xe4\xb8\xad\xe5\x9b\xbd.wav", "caf\xe9.wav", "caf\xe8.wav",
                        "a b.wav", "a_b.wav", "x.y.wav", "x_y.wav", "-rf.wav", "\n.wav", " lead.wav", "trail .wav"})
    names.insert(n);
  std::set<std::string> stems;  // "a.wav" and "a.WAV" would be one id
  for (const std::string& n : names) stems.insert(without_ext(n));
  while (int(names.size()) < files) {
    std::string n = random_name(rng), dir;
    if (rng() % 3 == 0) dir = random_name(rng);  // one folder down, itself oddly named
    if (dir == "." || dir == ".." || n.size() + dir.size() > 80 || !stems.insert(dir.empty() ? n : dir + "/" + n).second)
      continue;
    names.insert((dir.empty() ? n : dir + "/" + n) + exts[rng() % 3]);
  }
  for (const std::string& n : names) {
    put_wav(root / n);
    c.rel.push_back(n);
  }
  return c;
}

// Every item of a plan: path -> its shard line.
std::map<std::string, json> plan_items(const fs::path& plan) {
  const json meta = json::parse(slurp(plan / "plan.json"));
  std::map<std::string, json> out;
  for (int s = 0; s < meta["shards"].get<int>(); ++s) {
    const std::string text = slurp(plan / (ds::shard_name(s) + ".jsonl"));
    for (size_t pos = 0, nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
      const json j = json::parse(text.substr(pos, nl - pos));
      const std::string path = app::get_path(j, "path");
      CHECK_MESSAGE(!out.count(path), "planned twice: " << app::printable(path));
      out[path] = j;
    }
  }
  return out;
}

std::string errors_text(const std::string& err) { return err.substr(0, 4000); }

}  // namespace

TEST_CASE("dataset paths: random byte names plan, encode and come back byte for byte (directory, JSONL, list)") {
  Sandbox box("dsp");
  std::mt19937 rng(test_seed());
  INFO("MIMI_TEST_SEED=" << test_seed());
  const Corpus c = random_corpus(box / "corpus", rng, 40);
  const std::string root = (box / "corpus").string();
  std::set<std::string> want;
  for (const std::string& r : c.rel) want.insert(root + "/" + r);

  // the directory, planned and encoded; every item's record holds the exact bytes of its file
  Run r = box.sh("mimi dataset plan corpus -o plan --shards 3");
  REQUIRE_MESSAGE(r.code == 0, errors_text(r.err));
  std::map<std::string, json> items = plan_items(box / "plan");
  std::set<std::string> keys;
  for (const auto& [path, j] : items) {
    CHECK(want.count(path));
    CHECK(keys.insert(j["key"].get<std::string>()).second);
    CHECK(j["key"] == ds::key_for(app::get_path(j, "id")));
    CHECK(app::get_path(j, "id") == without_ext(path.substr(root.size() + 1)));
  }
  CHECK(items.size() == want.size());
  for (int s = 0; s < 3; ++s) {
    r = box.sh("mimi dataset encode --plan plan --shard " + std::to_string(s) + "/3 -o out -q");
    REQUIRE_MESSAGE(r.code == 0, errors_text(r.err));
  }
  r = box.sh("mimi dataset verify out");
  CHECK_MESSAGE(r.code == 0, errors_text(r.err));
  CHECK(box.sh("mimi dataset status out").code == 0);
  std::set<std::string> encoded, tar_keys;
  for (int s = 0; s < 3; ++s) {
    const std::string tar = box.get("out/shards/" + ds::shard_name(s) + ".tar");
    const std::vector<uint8_t> bytes(tar.begin(), tar.end());
    for (const ds::TarMember& m : ds::read_tar(bytes, "tar")) {
      if (m.name.size() < 5 || m.name.substr(m.name.size() - 5) != ".json") continue;
      const json rec = json::parse(tar.substr(m.data_offset, m.size));
      const std::string path = app::get_path(rec, "path");
      CHECK_MESSAGE(encoded.insert(path).second, "encoded twice: " << app::printable(path));
      CHECK(m.name == rec["key"].get<std::string>() + ".json");
      CHECK(tar_keys.insert(rec["key"].get<std::string>()).second);
      CHECK(app::get_path(rec, "id") == app::get_path(items.at(path), "id"));
    }
    // the index and the errors file are valid JSON whatever the names
    for (const char* ext : {".index.jsonl", ".errors.jsonl"}) {
      const std::string t = box.get("out/shards/" + ds::shard_name(s) + ext);
      for (size_t pos = 0, nl; (nl = t.find('\n', pos)) != std::string::npos; pos = nl + 1)
        CHECK(json::accept(t.substr(pos, nl - pos)));
    }
  }
  CHECK(encoded == want);

  // the same files through a JSON Lines manifest (names that are not UTF-8 as "path_hex") and a
  // plain list (names a line can hold: no newline, no '\r' at the end, no '#' first, not blank)
  std::string jsonl, list;
  std::set<std::string> listed;
  for (const std::string& rel : c.rel) {
    json j;
    app::put_path(j, "path", "corpus/" + rel);
    jsonl += app::json_dump(j) + "\n";
    if (rel.find('\n') == std::string::npos && rel.back() != '\r') {
      list += "corpus/" + rel + "\n";
      listed.insert(root + "/" + rel);
    }
  }
  box.put("m.jsonl", jsonl);
  box.put("list.txt", list);
  r = box.sh("mimi dataset plan m.jsonl -o pj --shards 2 -q");
  REQUIRE_MESSAGE(r.code == 0, errors_text(r.err));
  std::set<std::string> got;
  for (const auto& [path, j] : plan_items(box / "pj")) {
    got.insert(path);
    CHECK(!j.contains("probe_error"));
  }
  CHECK(got == want);
  r = box.sh("mimi dataset plan list.txt -o pl --shards 2 -q");
  REQUIRE_MESSAGE(r.code == 0, errors_text(r.err));
  got.clear();
  for (const auto& [path, j] : plan_items(box / "pl")) {
    got.insert(path);
    CHECK(!j.contains("probe_error"));
  }
  CHECK(got == listed);
}

TEST_CASE("dataset paths: keys of distinct ids stay distinct; ids that need no change keep their key") {
  std::mt19937 rng(test_seed());
  std::map<std::string, std::string> key_of;
  std::set<std::string> keys;
  for (int i = 0; i < 5000; ++i) {
    std::string id = random_name(rng);
    if (rng() % 4 == 0) id += "/" + random_name(rng);
    if (rng() % 7 == 0) id = "/" + id + "//x/";
    if (key_of.count(id)) continue;
    const std::string k = ds::key_for(id);
    key_of[id] = k;
    CHECK_MESSAGE(keys.insert(k).second, "two ids, one key: " << app::printable(k));
    CHECK(k.find('.') == std::string::npos);
    CHECK(k.front() != '/');
    CHECK(k.find("//") == std::string::npos);
    for (char ch : k) CHECK((std::isalnum(static_cast<unsigned char>(ch)) || std::strchr("_-/+=,@", ch)));
  }
  for (const char* plain : {"utt1", "spk/utt-2", "a_b", "x+y=z,w@v", "c/garbage", "seg_500-2250_ch1"})
    CHECK(ds::key_for(plain) == plain);
  CHECK(ds::key_for("\xe6\x97\xa5\xe6\x9c\xac") != ds::key_for("\xe4\xb8\xad\xe5\x9b\xbd"));
  CHECK(ds::key_for("a b") != ds::key_for("a_b"));
  CHECK(ds::key_for("a//b") != ds::key_for("a/b"));
}

namespace {

void make_socket(const fs::path& p) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  REQUIRE(p.string().size() < sizeof a.sun_path);
  std::strcpy(a.sun_path, p.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  ::close(fd);
}

using Inode = std::pair<dev_t, ino_t>;

// The model of a directory walk, written apart from the one under test: breadth first over
// canonical folder names (not device and inode), following every link, never into a folder that
// holds the root. Returns the distinct regular audio files (by inode) and the count of entries
// with audio names that are not regular files or lead nowhere, split into refused (FIFO, socket,
// link loop) and dangling.
struct WalkModel {
  std::set<Inode> files;
  std::set<std::string> refused_names, dangling_names;
  size_t refused = 0;
};

WalkModel model_walk(const fs::path& root_in) {
  WalkModel m;
  const fs::path root = fs::canonical(root_in);
  std::set<fs::path> seen{root};
  std::vector<fs::path> queue{root};
  auto holds_root = [&](const fs::path& d) {
    const std::string r = root.string(), s = d.string();
    return r == s || r.rfind(s == "/" ? s : s + "/", 0) == 0;
  };
  for (size_t q = 0; q < queue.size(); ++q)
    for (const auto& e : fs::directory_iterator(queue[q])) {
      const std::string name = e.path().filename().string();
      const bool audio = ds::has_audio_extension(name);
      std::error_code ec;
      const fs::file_status st = fs::status(e.path(), ec);
      if (ec) {  // a dangling link or a loop
        if (!audio) continue;
        struct stat s{};
        if (::stat(e.path().c_str(), &s) != 0 && errno == ELOOP) ++m.refused, m.refused_names.insert(name);
        else m.dangling_names.insert(name);
        continue;
      }
      if (fs::is_directory(st)) {
        const fs::path c = fs::canonical(e.path());
        if (!holds_root(c) && seen.insert(c).second) queue.push_back(c);
      } else if (audio && fs::is_regular_file(st)) {
        struct stat s{};
        REQUIRE(::stat(e.path().c_str(), &s) == 0);
        m.files.insert({s.st_dev, s.st_ino});
      } else if (audio) {
        ++m.refused, m.refused_names.insert(name);
      }
    }
  return m;
}

// A random tree under `top`/root with links of every kind, folders beside it ("outside") that
// links may lead to, hard links, and (when `odd`) FIFOs and sockets with audio names.
void random_tree(const fs::path& top, std::mt19937& rng, bool odd) {
  const fs::path root = top / "root";
  std::vector<fs::path> dirs{root, top / "outside"};
  for (int i = 0; i < 6; ++i) dirs.push_back(dirs[rng() % dirs.size()] / ("d" + std::to_string(i)));
  for (const auto& d : dirs) fs::create_directories(d);
  std::vector<fs::path> files;
  for (int i = 0; i < 10; ++i) {
    const fs::path f = dirs[rng() % dirs.size()] / ("f" + std::to_string(i) + (i % 4 ? ".wav" : ".flac"));
    put_wav(f);
    files.push_back(f);
  }
  spit(dirs[rng() % dirs.size()] / "notes.txt", "not audio");
  auto rel = [](const fs::path& to, const fs::path& from_dir) { return fs::relative(to, from_dir).string(); };
  for (int i = 0; i < 10; ++i) {
    const fs::path at = dirs[rng() % dirs.size()];
    const std::string n = "l" + std::to_string(i);
    switch (rng() % 9) {
      case 0: fs::create_symlink(".", at / n); break;                    // a loop to itself
      case 1: fs::create_symlink("..", at / n); break;                   // its parent
      case 2: fs::create_symlink("../..", at / n); break;                // further up
      case 3: fs::create_symlink(rel(dirs[rng() % dirs.size()], at), at / n); break;  // any folder
      case 4: fs::create_symlink(rel(files[rng() % files.size()], at), at / (n + ".wav")); break;  // a file
      case 5: fs::create_symlink("nowhere/x.wav", at / (n + ".wav")); break;  // dangling, audio name
      case 6: fs::create_symlink("nowhere", at / n); break;                    // dangling folder link
      case 7: fs::create_hard_link(files[rng() % files.size()], at / (n + ".wav")); break;
      default: fs::create_symlink(root.string(), at / n); break;         // the root, absolute
    }
  }
  if (odd) {
    const fs::path at = dirs[rng() % dirs.size()];
    REQUIRE(::mkfifo((at / "pipe.wav").c_str(), 0644) == 0);
    make_socket(dirs[rng() % dirs.size()] / "sock.flac");
    fs::create_symlink("loop2.wav", at / "loop1.wav");  // a loop of links with audio names
    fs::create_symlink("loop1.wav", at / "loop2.wav");
  }
}

}  // namespace

TEST_CASE("dataset paths: random trees of links, FIFOs and sockets: each real file once, each bad entry named") {
  std::mt19937 rng(test_seed());
  INFO("MIMI_TEST_SEED=" << test_seed());
  size_t with_refused = 0, with_dangling = 0, planned_files = 0;  // the sweep must not degenerate
  for (int t = 0; t < 24; ++t) {
    CAPTURE(t);
    Sandbox box("dst");
    const bool odd = t % 2;
    random_tree(box / "t", rng, odd);
    const WalkModel m = model_walk(box / "t/root");
    with_refused += m.refused > 0, with_dangling += !m.dangling_names.empty(), planned_files += m.files.size();
    // the CLI: refused entries make the plan fail, each named, without blocking
    Run r = box.sh("timeout 60 mimi dataset plan t/root -o plan --shards 2", 90);
    CHECK(r.code != 70);
    CHECK(!r.timed_out);
    const bool nothing = m.files.empty() && m.dangling_names.empty();
    if (nothing && !m.refused) {
      CHECK(r.code == 3);
      CHECK(r.err.find("no audio") != std::string::npos);
    } else if (m.refused) {
      CHECK(r.code == 3);
      CHECK(r.err.find(std::to_string(m.refused) + " bad manifest entr") != std::string::npos);
      for (const std::string& n : m.refused_names) CHECK_MESSAGE(r.err.find(n) != std::string::npos, n);
      CHECK(!fs::exists(box / "plan/plan.json"));
    } else {
      REQUIRE_MESSAGE(r.code == 0, errors_text(r.err));
    }
    for (const std::string& n : m.dangling_names) CHECK_MESSAGE(r.err.find(n) != std::string::npos, n);
    // skip_bad (the API): the rest is planned, each real file exactly once, dangling links as
    // items that cannot be read now
    ds::PlanOptions o;
    o.manifests = {(box / "t/root").string()};
    o.out = (box / "plan2").string();
    o.shards = 2;
    o.skip_bad = true;
    if (nothing) {
      CHECK_THROWS(ds::make_plan(o));  // nothing to plan
      continue;
    }
    REQUIRE_NOTHROW(ds::make_plan(o));
    std::set<Inode> planned;
    size_t unreadable = 0;
    for (const auto& [path, j] : plan_items(box / "plan2")) {
      struct stat s{};
      if (::stat(path.c_str(), &s) != 0) {
        ++unreadable;
        CHECK(j.contains("probe_error"));
        continue;
      }
      CHECK_MESSAGE(planned.insert({s.st_dev, s.st_ino}).second, "one file planned twice: " << path);
      CHECK(S_ISREG(s.st_mode));
    }
    CHECK(planned == m.files);
    CHECK(unreadable >= m.dangling_names.size());
    CHECK(json::parse(box.get("plan2/plan.json"))["skipped_entries"] == m.refused);
  }
  CHECK(with_refused >= 4);
  CHECK(with_dangling >= 4);
  CHECK(planned_files >= 100);
}

TEST_CASE("dataset paths: FIFOs, sockets, devices, folders, loops and NULs in JSONL, list and wav.scp are refused by name") {
  Sandbox box("dse");
  put_wav(box / "a.wav");
  REQUIRE(::mkfifo((box / "f.wav").c_str(), 0644) == 0);
  make_socket(box / "s.wav");
  fs::create_directories(box / "d.wav");
  fs::create_symlink("l.wav", box / "l.wav");
  fs::create_symlink("gone.wav", box / "g.wav");  // dangling: planned, named, recorded at encode
  const std::vector<std::string> bad = {"f.wav", "s.wav", "/dev/null", "/dev/zero", "d.wav", "l.wav"};
  std::string list = "a.wav\n", jsonl = "{\"path\": \"a.wav\"}\n", scp = "a a.wav\n";
  for (size_t i = 0; i < bad.size(); ++i) {
    list += bad[i] + "\n";
    jsonl += "{\"path\": \"" + bad[i] + "\"}\n";
    scp += "r" + std::to_string(i) + " " + bad[i] + "\n";
  }
  list += "g.wav\nmissing.wav\n";
  jsonl += "{\"path\": \"g.wav\"}\n{\"path\": \"missing.wav\"}\n{\"path\": \"a.wav\\u0000.flac\", \"id\": \"nul\"}\n";
  box.put("list.txt", list);
  box.put("m.jsonl", jsonl);
  box.put("wav.scp", scp);
  for (const char* m : {"list.txt", "m.jsonl", "wav.scp"}) {
    CAPTURE(m);
    const Run r = box.sh(std::string("timeout 30 mimi dataset plan ") + m + " -o p --shards 1", 60);
    CHECK(!r.timed_out);
    CHECK(r.code == 3);
    for (size_t i = 0; i < bad.size(); ++i)
      CHECK_MESSAGE(r.err.find(std::string(m) + ":" + std::to_string(i + 2) + ": ") != std::string::npos, bad[i]);
    if (std::string(m) != "wav.scp") {
      CHECK(r.err.find("g.wav: a dangling symbolic link") != std::string::npos);
      CHECK(r.err.find("missing.wav") != std::string::npos);
    }
    if (std::string(m) == "m.jsonl") CHECK(r.err.find("m.jsonl:10: the path holds a NUL byte (after 'a.wav')") != std::string::npos);
    CHECK(!fs::exists(box / "p/plan.json"));
  }
}

TEST_CASE("dataset paths: manifests from pipes and /dev/stdin resolve against the current folder") {
  Sandbox box("dss");
  put_wav(box / "sub/a.wav");
  put_wav(box / "sub/x/b.wav");
  box.put("list.txt", "a.wav\nx/b.wav\n");
  const std::string want_a = (box / "sub/a.wav").string(), want_b = (box / "sub/x/b.wav").string();
  for (const char* how : {"mimi dataset plan <(cat ../list.txt) -o ../p0 --shards 1",
                          "mimi dataset plan /dev/stdin -o ../p1 --shards 1 < ../list.txt",
                          "cat ../list.txt | mimi dataset plan - -o ../p2 --shards 1",
                          "mimi dataset plan /proc/self/fd/0 -o ../p3 --shards 1 < ../list.txt"}) {
    CAPTURE(how);
    const Run r = box.sh(std::string("cd sub && ") + how);
    REQUIRE_MESSAGE(r.code == 0, r.err);
    CHECK(r.err.find("cannot be read now") == std::string::npos);
    const std::string n = std::string(1, how[std::string(how).find("../p") + 4]);
    const auto items = plan_items(box / ("p" + n));
    CHECK(items.size() == 2);
    CHECK(items.count(want_a));
    CHECK(items.count(want_b));
    if (items.count(want_b)) CHECK(app::get_path(items.at(want_b), "id") == "x/b");
  }
}

TEST_CASE("dataset paths: CRLF, UTF-8 byte-order marks and UTF-16 manifests plan as UTF-8 ones do") {
  Sandbox box("dsu");
  const std::vector<std::string> names = {"a.wav", "caf\xc3\xa9.wav", "\xe6\x97\xa5\xe6\x9c\xac.wav", "\xf0\x9f\x8e\xb5.wav"};
  std::string list, jsonl;
  for (const std::string& n : names) {
    put_wav(box / n);
    list += n + "\n";
    jsonl += "{\"path\": \"" + n + "\"}\n";
  }
  // UTF-8 -> UTF-16 (little or big endian), with its byte-order mark
  auto utf16 = [](const std::string& s, bool be) {
    std::u32string cps;
    for (size_t i = 0; i < s.size();) {
      const unsigned char c = uint8_t(s[i]);
      const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      char32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
      for (int k = 1; k < n; ++k) cp = cp << 6 | (uint8_t(s[i + size_t(k)]) & 0x3F);
      cps += cp;
      i += size_t(n);
    }
    std::string out = be ? "\xfe\xff" : "\xff\xfe";
    auto unit = [&](uint16_t u) { out += be ? std::string{char(u >> 8), char(u & 0xFF)} : std::string{char(u & 0xFF), char(u >> 8)}; };
    for (char32_t cp : cps) {
      if (cp >= 0x10000) unit(uint16_t(0xD800 + ((cp - 0x10000) >> 10))), unit(uint16_t(0xDC00 + ((cp - 0x10000) & 0x3FF)));
      else unit(uint16_t(cp));
    }
    return out;
  };
  auto crlf = [](std::string s) {
    for (size_t p = 0; (p = s.find('\n', p)) != std::string::npos; p += 2) s.insert(p, "\r");
    return s;
  };
  const std::map<std::string, std::string> variants = {
      {"plain.txt", list}, {"crlf.txt", crlf(list)}, {"bom.txt", "\xef\xbb\xbf" + list},
      {"bomcrlf.txt", "\xef\xbb\xbf" + crlf(list)}, {"le.txt", utf16(list, false)}, {"be.txt", utf16(crlf(list), true)},
      {"plain.jsonl", jsonl}, {"crlf.jsonl", crlf(jsonl)}, {"bom.jsonl", "\xef\xbb\xbf" + crlf(jsonl)},
      {"le.jsonl", utf16(jsonl, false)}, {"bom-nox.lst", "\xef\xbb\xbf" + jsonl}};
  box.put("plain.txt", list);
  REQUIRE(box.sh("mimi dataset plan plain.txt -o p-plain.txt --shards 1 -q").code == 0);
  for (const auto& [name, text] : variants) {
    CAPTURE(name);
    if (name == "plain.txt") continue;
    box.put(name, text);
    const Run r = box.sh("mimi dataset plan " + name + " -o p-" + name + " --shards 1");
    REQUIRE_MESSAGE(r.code == 0, r.err);
    CHECK(r.err.find("cannot be read now") == std::string::npos);
    CHECK(box.get("p-" + name + "/shard-00000.jsonl") == box.get("p-plain.txt/shard-00000.jsonl"));
  }
  // UTF-16 without its mark, UTF-32, and a cut surrogate are refused, saying so
  box.put("nobom.txt", utf16(list, false).substr(2));
  box.put("u32.txt", std::string("\xff\xfe\x00\x00" "a\x00\x00\x00", 8));
  box.put("cut.txt", utf16(list, false).substr(0, utf16(list, false).size() - 4) + "\x3c\xd8");
  for (const auto& [name, words] : std::map<std::string, std::string>{{"nobom.txt", "UTF-16 without a byte-order mark"},
                                                                      {"u32.txt", "UTF-32"},
                                                                      {"cut.txt", "not valid UTF-16"}}) {
    CAPTURE(name);
    const Run r = box.sh("mimi dataset plan " + name + " -o q --shards 1");
    CHECK(r.code == 3);
    CHECK(r.err.find(words) != std::string::npos);
    CHECK(r.err.find(name) != std::string::npos);
  }
}

TEST_CASE("dataset paths: every bad line of the manifests is reported in one run") {
  Sandbox box("dsb");
  std::mt19937 rng(test_seed());
  put_wav(box / "a.wav");
  const std::vector<std::string> kinds = {
      "not json", "{\"id\": \"x\"}", "{\"path\": 3}", "{\"path\": \"a.wav\", \"duration\": -1}",
      "{\"path\": \"a.wav\", \"channel\": \"left\"}", "{\"path\": \"/\"}", "{\"path\": \"a.wav\", \"start\": 2, \"end\": 1}",
      "{\"path\": \"a.wav\\u0000b\"}", "[1, 2]", "{\"path_hex\": \"zz\"}", "{\"path\": \"a.wav\", \"id\": \"\"}"};
  std::string text;
  std::vector<size_t> bad_lines;
  for (size_t line = 1; line <= 200; ++line) {
    if (rng() % 4 == 0) {
      text += "{\"path\": \"a.wav\", \"id\": \"good" + std::to_string(line) + "\"}\n";
    } else {
      text += kinds[rng() % kinds.size()] + "\n";
      bad_lines.push_back(line);
    }
  }
  box.put("m.jsonl", text);
  box.put("list.txt", "a.wav\nd/\n..\nx\n");  // a folder, a parent, and a missing file (not bad: planned)
  const Run r = box.sh("mimi dataset plan m.jsonl list.txt -o p --shards 1");
  CHECK(r.code == 3);
  const size_t n = bad_lines.size() + 2;
  CHECK(r.err.find(std::to_string(n) + " bad manifest entries") != std::string::npos);
  for (size_t i = 0; i < bad_lines.size() && i < ds::Problems::kPrinted; ++i)
    CHECK_MESSAGE(r.err.find("m.jsonl:" + std::to_string(bad_lines[i]) + ":") != std::string::npos, bad_lines[i]);
  if (n > ds::Problems::kPrinted)
    CHECK(r.err.find("and " + std::to_string(n - ds::Problems::kPrinted) + " more") != std::string::npos);
  CHECK(!fs::exists(box / "p/plan.json"));
  // the list's own bad lines, alone
  const Run l = box.sh("mimi dataset plan list.txt -o p --shards 1");
  CHECK(l.code == 3);
  CHECK(l.err.find("list.txt:2:") != std::string::npos);
  CHECK(l.err.find("list.txt:3:") != std::string::npos);
  CHECK(l.err.find("2 bad manifest entries") != std::string::npos);
}
