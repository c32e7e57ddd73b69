#include "support/cli.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sndfile.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <thread>

#include "app/formats/mimi_container.h"
#include "support/golden.h"

namespace mimi::test {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string quote(const std::string& s) {  // single-quoted for bash
  std::string o = "'";
  for (char c : s) {
    if (c == '\'') o += "'\\''";
    else o += c;
  }
  return o + "'";
}

}  // namespace

const std::string& mimi_binary() {
  static const std::string b = MIMI_BINARY;
  return b;
}

const std::string& mimi_bin_dir() {
  static const std::string d = [] {
    const fs::path p = fs::temp_directory_path() / ("mimi-test-bin-" + std::to_string(::getpid()));
    fs::create_directories(p);
    std::error_code ec;
    fs::remove(p / "mimi", ec);
    if (std::string(MIMI_TEST_EMULATOR).empty()) {
      fs::create_symlink(mimi_binary(), p / "mimi");
    } else {  // a cross build (qemu-user, no binfmt_misc): `mimi` runs the binary through the emulator
      spit(p / "mimi", "#!/bin/sh\nexec " + quote(MIMI_TEST_EMULATOR) + " " + quote(mimi_binary()) + " \"$@\"\n");
      fs::permissions(p / "mimi", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
    }
    // removed at exit (best effort)
    static struct Cleanup {
      fs::path p;
      ~Cleanup() {
        std::error_code e;
        fs::remove_all(p, e);
      }
    } cleanup{p};
    return p.string();
  }();
  return d;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

void spit(const fs::path& p, const std::string& bytes) {
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains_ci(const std::string& hay, const std::string& needle) {
  return lower(hay).find(lower(needle)) != std::string::npos;
}

bool loader_gave_up(const Run& r) {
  return r.code == 127 && (contains_ci(r.err, "error while loading shared libraries") ||
                           contains_ci(r.err, "cannot allocate TLS") || r.err == "out of memory\n");
}

Listing list_tree(const fs::path& dir) {
  Listing l;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return l;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::none, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const fs::path p = it->path();
    Entry e;
    const fs::file_status st = fs::symlink_status(p, ec);
    switch (st.type()) {
      case fs::file_type::regular: {
        e.type = 'f';
        e.size = fs::file_size(p, ec);
        if (e.size <= (64u << 20)) e.hash = std::hash<std::string>{}(slurp(p));
        break;
      }
      case fs::file_type::directory: e.type = 'd'; break;
      case fs::file_type::symlink: e.type = 'l'; break;
      case fs::file_type::fifo: e.type = 'p'; break;
      case fs::file_type::character: e.type = 'c'; break;
      default: e.type = '?';
    }
    l[fs::relative(p, dir, ec).string()] = e;
  }
  return l;
}

Sandbox::Sandbox(const std::string& tag) {
  static std::atomic<int> counter{0};
  const std::string name = "mimi-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  dir = fs::temp_directory_path() / name;
  capture_ = fs::temp_directory_path() / (name + ".capture");
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::remove_all(capture_, ec);
  fs::create_directories(dir);
  fs::create_directories(capture_);
  weights = data_dir() + "/tiny/weights.hf.safetensors";  // config.json beside it
}

Sandbox::~Sandbox() {
  std::error_code ec;
  // a test may have made parts read-only
  ::system(("chmod -R u+rwX " + quote(dir.string()) + " 2>/dev/null").c_str());
  fs::remove_all(dir, ec);
  fs::remove_all(capture_, ec);
}

std::string Sandbox::escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\' || c == '$' || c == '`') o += '\\';
    o += c;
  }
  return o;
}

Run Sandbox::sh(const std::string& cmd, int timeout_s) const {
  const std::string out = (capture_ / "stdout").string(), err = (capture_ / "stderr").string();
#if defined(__SANITIZE_ADDRESS__)
  // ASan reserves terabytes of shadow address space, so `ulimit -v` kills any sanitized process
  // at start. Under ASan the same memory bound is asked of the allocator instead: an allocation
  // beyond it is an ASan report (the process fails), as it would be an exit under the ulimit.
  const std::string prelude =
      "ulimit() { if [ \"$1\" = -v ]; then export ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}"
      "max_allocation_size_mb=$(( $2 / 1024 ))\"; else builtin ulimit \"$@\"; fi; }\n";
#else
  const std::string prelude;
#endif
  const std::string full = prelude + "cd " + quote(dir.string()) + " && export PATH=" + quote(mimi_bin_dir()) +
                           ":\"$PATH\" MIMI_WEIGHTS=" + quote(weights) + " HOME=" + quote(dir.string()) +
                           // the prepared-weights cache beside the sandbox, not in it (a test's
                           // listing of the sandbox holds what the command made, nothing else)
                           " MIMI_CACHE_DIR=" + quote(capture_.string() + "/weights-cache") +
                           " && unset HF_HOME && {\n" + cmd + "\n} >" + quote(out) + " 2>" + quote(err);
  const double t0 = now_s();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::signal(SIGPIPE, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::execl("/bin/bash", "bash", "-c", full.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  ::setpgid(pid, pid);
  Run r;
  r.code = wait_exit(pid, timeout_s);
  r.timed_out = r.code == 124 && now_s() - t0 >= timeout_s;
  r.seconds = now_s() - t0;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

pid_t spawn_mimi(const fs::path& cwd, const std::vector<std::string>& args, const std::string& weights,
                 const fs::path& out_file, const fs::path& err_file) {
  std::vector<std::string> argv = {mimi_binary()};
  if (!std::string(MIMI_TEST_EMULATOR).empty()) argv.insert(argv.begin(), MIMI_TEST_EMULATOR);
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    for (int s : {SIGINT, SIGTERM, SIGPIPE}) ::signal(s, SIG_DFL);
    if (::chdir(cwd.c_str()) != 0) ::_exit(127);
    const int in = ::open("/dev/null", O_RDONLY);
    const int o = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(in, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::setenv("MIMI_WEIGHTS", weights.c_str(), 1);
    ::setenv("MIMI_NO_CACHE", "1", 1);  // (no cache folder to leave behind: Sandbox::sh tests the cache)
    ::unsetenv("HF_HOME");
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    ::_exit(127);
  }
  if (pid > 0) ::setpgid(pid, pid);
  return pid;
}

int wait_exit(pid_t pid, double timeout_s, bool* signaled, int* signal) {
  const double deadline = now_s() + timeout_s;
  int st = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (w < 0) return -1;
    if (now_s() > deadline) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      if (signaled) *signaled = false;
      return 124;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // reap what the group left behind (background jobs of the command line)
  ::kill(-pid, SIGKILL);
  if (signaled) *signaled = WIFSIGNALED(st);
  if (signal) *signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

// ---- audio

void write_wav(const fs::path& path, const std::vector<float>& interleaved, int rate, int channels, int format) {
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = format;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  REQUIRE(f != nullptr);
  sf_writef_float(f, interleaved.data(), sf_count_t(interleaved.size() / size_t(channels)));
  sf_close(f);
}

bool audio_opens(const fs::path& p, WavInfo* out) {
  SF_INFO info{};
  SNDFILE* f = sf_open(p.c_str(), SFM_READ, &info);
  if (!f) return false;
  sf_close(f);
  if (out) *out = {info.samplerate, info.channels, info.frames, info.format};
  return true;
}

WavInfo wav_info(const fs::path& p) {
  WavInfo w;
  REQUIRE(audio_opens(p, &w));
  return w;
}

std::vector<float> read_wav(const fs::path& p) {
  SF_INFO info{};
  SNDFILE* f = sf_open(p.c_str(), SFM_READ, &info);
  REQUIRE(f != nullptr);
  std::vector<float> y(size_t(info.frames));
  sf_readf_float(f, y.data(), info.frames);
  sf_close(f);
  return y;
}

std::vector<float> tone(int64_t n, int channels, int rate) {
  std::vector<float> v(size_t(n * channels));
  for (int64_t i = 0; i < n; ++i)
    for (int c = 0; c < channels; ++c)
      v[size_t(i * channels + c)] = 0.3f * std::sin(6.2831853f * (220.0f + 110.0f * c) * float(i) / float(rate));
  return v;
}

// ---- bytes

std::string le16(uint16_t v) { return {char(v & 0xff), char(v >> 8)}; }
std::string le32(uint32_t v) { return le16(uint16_t(v)) + le16(uint16_t(v >> 16)); }
std::string le64(uint64_t v) { return le32(uint32_t(v)) + le32(uint32_t(v >> 32)); }

std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string s16_bytes(const std::vector<float>& v) {
  std::string o;
  for (float x : v) o += le16(uint16_t(int16_t(std::lrint(std::max(-1.0f, std::min(1.0f, x)) * 32767.0f))));
  return o;
}

std::string make_wav(const WavSpec& w) {
  std::string fmt = le16(w.tag) + le16(w.channels) + le32(w.rate) +
                    le32(uint32_t(uint64_t(w.rate) * w.channels * (w.bits / 8))) +
                    le16(uint16_t(w.channels * (w.bits / 8))) + le16(w.bits);
  std::string body = "WAVE";
  body += "fmt " + le32(w.fmt_size >= 0 ? uint32_t(w.fmt_size) : 16u) + fmt;
  body += w.chunks_before_data;
  body += "data" + le32(w.data_size >= 0 ? uint32_t(w.data_size) : uint32_t(w.data.size())) + w.data;
  return "RIFF" + le32(w.riff_size >= 0 ? uint32_t(w.riff_size) : uint32_t(body.size())) + body;
}

std::string make_npy(const std::string& dict, const std::string& data) {
  std::string h = dict;
  const size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  std::string o = "\x93NUMPY";
  o += char(1);
  o += char(0);
  o += le16(uint16_t(h.size()));
  return o + h + data;
}

std::string make_safetensors(const std::string& header_json, const std::string& data) {
  return le64(header_json.size()) + header_json + data;
}

uint32_t crc32_of(const std::string& s) {
  return app::crc32(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

MimiParts split_mimi(const std::string& b) {
  REQUIRE(b.size() >= 16);
  MimiParts p;
  p.preamble = b.substr(0, 8);
  const uint32_t L = uint32_t(uint8_t(b[8])) | uint32_t(uint8_t(b[9])) << 8 | uint32_t(uint8_t(b[10])) << 16 |
                     uint32_t(uint8_t(b[11])) << 24;
  REQUIRE(b.size() >= 12 + L + 4);
  p.header = b.substr(12, L);
  p.rest = b.substr(12 + L + 4);
  return p;
}

std::string join_mimi(const MimiParts& p) {
  return p.preamble + le32(uint32_t(p.header.size())) + p.header + le32(crc32_of(p.header)) + p.rest;
}

void check_sane(const Run& r, bool signal_ok) {
  CHECK_MESSAGE(!r.timed_out, "did not finish within the time limit");
  if (!signal_ok) CHECK_MESSAGE(!(r.code > 128 && r.code < 160), "died by signal ", r.code - 128);
  CHECK_MESSAGE(r.code != 70, "exit 70 (internal error) for a bad input or environment: ", r.err);
  CHECK_MESSAGE(!contains_ci(r.err, "terminate called"), "uncaught exception");
  CHECK_MESSAGE(!contains_ci(r.err, "internal error"), "reported as an internal error");
}

unsigned test_seed(unsigned fallback) {
  const char* s = std::getenv("MIMI_TEST_SEED");
  return s && *s ? unsigned(std::strtoul(s, nullptr, 10)) : fallback;
}


std::vector<HelpOption> help_options(const Sandbox& box, const std::string& cmd) {
  const Run r = box.sh("mimi " + cmd + " --help");
  REQUIRE(r.code == 0);
  std::vector<HelpOption> out;
  const std::regex line(R"(^\s+(?:-\w,)?(--[a-z0-9-]+)(?:\s+([A-Z]+)(?=[\s:=]|$)(?::\{([a-z0-9,]+)\})?)?)");
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

}  // namespace mimi::test
