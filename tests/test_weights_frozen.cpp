// A run computes with exactly the weights it fingerprinted, or fails cleanly (issue 26, class 5).
// The loader reads every tensor with pread() into memory the process owns and fingerprints those
// bytes; no mapping of the file survives the load. So a weights file overwritten in place or
// truncated after the load changes nothing (the model of an untouched file gives the same bits,
// on every engine path: cached plans, uncached plans rebuilt per chunk, device-style placement
// after the change), and a file changed or truncated *during* the load is Error(Weights) naming
// it, never a SIGBUS and never a model of mixed bytes. Also: a load for one direction (weights.h
// Parts) keeps only that direction's weights, with the same fingerprint and bits; EMFILE opening
// the weights is the environment's error (exit 75), not the weights'; weights and configs from a
// stream (pipe, FIFO, /dev/stdin) are read once and load as the same bytes from a file do.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "codec/error.h"
#include "codec/prng_weights.h"
#include "codec/weights.h"
#include "support/golden.h"

using namespace mimi;
using namespace mimi::test;
namespace fs = std::filesystem;

namespace {

// A SIGBUS (a read of a truncated file's mapping) fails the test with a message, not a core.
extern "C" void on_sigbus(int) {
  static const char msg[] = "test_weights_frozen: SIGBUS: the model read a truncated weights file's mapping\n";
  fflush(stdout);  // (not async-signal-safe, but the process ends here: the failed checks before it show)
  (void)!write(2, msg, sizeof msg - 1);
  _exit(99);
}
[[maybe_unused]] const bool sigbus_reported = [] {
  struct sigaction sa {};
  sa.sa_handler = on_sigbus;
  sigaction(SIGBUS, &sa, nullptr);
  return true;
}();

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("mimi-frozen-" + std::to_string(getpid()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::vector<uint8_t> weights_bytes(Dialect d, uint64_t seed) {
  return prng_weights_file(generate_prng_weights(test_config("tiny"), seed), d);
}

void write_file(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  REQUIRE(f.good());
}

// In place: the same inode, its bytes rewritten (no O_TRUNC), as `cp` onto an existing file of
// the same size or a re-download into the same file leaves it.
void overwrite_in_place(const std::string& path, const std::vector<uint8_t>& b) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(pwrite(fd, b.data(), b.size(), 0) == ssize_t(b.size()));
  ::close(fd);
}

void truncate_to(const std::string& path, off_t size) { REQUIRE(::truncate(path.c_str(), size) == 0); }

// Sets the file's mtime an hour back, so that a change during the load shows in its timestamps
// even where they are coarse (the file was written a moment before).
void age(const std::string& path) {
  struct timespec t[2];
  REQUIRE(clock_gettime(CLOCK_REALTIME, &t[0]) == 0);
  t[0].tv_sec -= 3600;
  t[1] = t[0];
  REQUIRE(utimensat(AT_FDCWD, path.c_str(), t, 0) == 0);
}

std::shared_ptr<const Model> load_tiny(const std::string& path) {
  LoadOptions lo;
  lo.config_path = data_dir() + "/tiny/config.json";
  auto m = load_model(path, lo);
  REQUIRE(m->cfg == test_config("tiny"));
  return m;
}

std::vector<float> tone(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = 0.3f * std::sin(0.013f * float(i)) + 0.05f * std::sin(0.41f * float(i));
  return v;
}

struct Run {
  std::vector<int32_t> codes;
  std::vector<float> audio;
};

// The engine paths that read the weights: cached plans (chunks of 2 frames, so the weights are
// read again for every chunk), plans rebuilt per chunk (cache off), and the device code path
// on the CPU (weights copied into "device" memory when the engine is built, i.e. after the change).
enum class Path { Cached, Uncached, DeviceStyle };

Run run(const std::shared_ptr<const Model>& m, Path path) {
  EngineOptions o;
  o.with_chunk_frames(2);
  if (path == Path::Uncached) o.plan_cache_capacity = 0;
  if (path == Path::DeviceStyle) o.kernels = &cpu_as_device();
  Engine e(m, o);
  const auto pcm = tone(5 * 1920 + 333);
  Run r;
  const Codes c = e.encode(pcm.data(), int64_t(pcm.size()), m->cfg.n_q);
  r.codes = c.data;
  r.audio = e.decode(c);
  return r;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Whether any mapping or open descriptor of this process refers to `path`.
bool process_holds(const std::string& path) {
  const std::string canon = fs::weakly_canonical(path).string();
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.size() >= canon.size() && line.compare(line.size() - canon.size(), canon.size(), canon) == 0) return true;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(e.path(), ec).string() == canon) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("frozen weights: a file overwritten or truncated after the load changes nothing") {
  for (Dialect d : {Dialect::Moshi, Dialect::HuggingFace}) {
    const std::string dialect = dialect_name(d);
    CAPTURE(dialect);
    TempDir dir;
    const std::vector<uint8_t> original = weights_bytes(d, 1), other = weights_bytes(d, 2);
    REQUIRE(other.size() == original.size());
    REQUIRE(other != original);
    // the reference: a file nobody touches
    write_file(dir.file("pristine.safetensors"), original);
    const auto ref_model = load_tiny(dir.file("pristine.safetensors"));
    // (per path: the device path composes the resblock from ops, other float sums)
    const Run refs[] = {run(ref_model, Path::Cached), run(ref_model, Path::Uncached),
                        run(ref_model, Path::DeviceStyle)};
    // (the other weights do give other results, so an equal result below is not luck)
    write_file(dir.file("other.safetensors"), other);
    CHECK(run(load_tiny(dir.file("other.safetensors")), Path::Cached).codes != refs[0].codes);

    struct Change {
      const char* what;
      std::function<void(const std::string&)> apply;
    };
    const Change changes[] = {
        {"overwritten in place, same size", [&](const std::string& p) { overwrite_in_place(p, other); }},
        {"truncated to half", [&](const std::string& p) { truncate_to(p, off_t(original.size() / 2)); }},
        {"truncated to 0", [&](const std::string& p) { truncate_to(p, 0); }},
    };
    for (const Change& change : changes) {
      for (Path path : {Path::Cached, Path::Uncached, Path::DeviceStyle}) {
        const std::string what = change.what;
        const int engine_path = int(path);
        CAPTURE(what);
        CAPTURE(engine_path);
        const std::string p = dir.file("model.safetensors");
        write_file(p, original);
        const auto m = load_tiny(p);
        CHECK(m->fingerprint == ref_model->fingerprint);
        // nothing of the file is kept: no mapping (a later read could see other bytes, or SIGBUS)
        // and no descriptor
        CHECK_FALSE(process_holds(p));
        change.apply(p);
        const Run r = run(m, path), &ref = refs[int(path)];
        CHECK(r.codes == ref.codes);
        CHECK(bit_identical(r.audio, ref.audio));
        CHECK(m->fingerprint == ref_model->fingerprint);
      }
    }
  }
}

namespace {

// What the hook does before the n-th tensor read of a load (1-based), then it disarms.
struct HookPlan {
  int at = 0, seen = 0;
  std::function<void(const std::string&)> act;
};
HookPlan g_plan;

void before_read(const std::string& path, const std::string& /*tensor*/) {
  if (g_plan.at > 0 && ++g_plan.seen == g_plan.at) g_plan.act(path);
}

struct HookGuard {
  HookGuard(int at, std::function<void(const std::string&)> act) {
    g_plan = {at, 0, std::move(act)};
    safetensors_testing::before_tensor_read = before_read;
  }
  ~HookGuard() {
    safetensors_testing::before_tensor_read = nullptr;
    g_plan = {};
  }
};

std::string load_error(const std::string& path) {
  try {
    load_tiny(path);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Weights);
    return e.what();
  }
  FAIL("expected the load to fail");
  return "";
}

}  // namespace

TEST_CASE("frozen weights: a file changed during the load is an error naming it, never a signal") {
  for (Dialect d : {Dialect::Moshi, Dialect::HuggingFace}) {
    const std::string dialect = dialect_name(d);
    CAPTURE(dialect);
    TempDir dir;
    const std::vector<uint8_t> original = weights_bytes(d, 1), other = weights_bytes(d, 2);
    const std::string p = dir.file("model.safetensors");
    const auto contains = [](const std::string& s, const std::string& part) {
      return s.find(part) != std::string::npos;
    };

    for (int at : {1, 7}) {  // before the first tensor's bytes are read, and in the middle
      CAPTURE(at);
      for (off_t size : {off_t(0), off_t(original.size() / 2), off_t(original.size() - 1)}) {
        CAPTURE(size);
        write_file(p, original);
        HookGuard hook(at, [size](const std::string& path) { truncate_to(path, size); });
        const std::string msg = load_error(p);
        CHECK(g_plan.seen >= at);
        CHECK(msg.rfind(p + ": ", 0) == 0);
        // the last byte cut: only the final check sees it (the size changed)
        CHECK((contains(msg, "truncated while being read") || contains(msg, "changed while being read")));
      }
      // the same size, other bytes: the timestamps changed
      write_file(p, original);
      age(p);
      HookGuard hook(at, [&](const std::string& path) { overwrite_in_place(path, other); });
      const std::string msg = load_error(p);
      CHECK(msg.rfind(p + ": ", 0) == 0);
      CHECK(contains(msg, "changed while being read"));
    }

    // Replaced by a rename (how downloaders finish): the open file is the old one, read whole and
    // consistent; the load computes with it and says so by its fingerprint.
    write_file(dir.file("pristine.safetensors"), original);
    const std::string fp = load_tiny(dir.file("pristine.safetensors"))->fingerprint;
    write_file(p, original);
    write_file(dir.file("new.safetensors"), other);
    std::shared_ptr<const Model> m;
    {
      HookGuard hook(5, [&](const std::string& path) { fs::rename(dir.file("new.safetensors"), path); });
      m = load_tiny(p);
    }
    CHECK(m->fingerprint == fp);
    CHECK(load_tiny(p)->fingerprint != fp);  // (the new file is another)
  }
}

TEST_CASE("frozen weights: a load for one direction keeps only its weights, with the same fingerprint and bits") {
  for (Dialect d : {Dialect::Moshi, Dialect::HuggingFace}) {
    const std::string dialect = dialect_name(d);
    CAPTURE(dialect);
    TempDir dir;
    const std::string p = dir.file("model.safetensors");
    write_file(p, weights_bytes(d, 1));
    const auto both = load_tiny(p);
    const Run ref = run(both, Path::Cached);
    LoadOptions lo;
    lo.config_path = data_dir() + "/tiny/config.json";
    lo.parts.decoder = false;
    const auto enc = load_model(p, lo);
    lo.parts = {};
    lo.parts.encoder = false;
    const auto dec = load_model(p, lo);
    CHECK(enc->fingerprint == both->fingerprint);
    CHECK(dec->fingerprint == both->fingerprint);
    CHECK((enc->has_encoder && !enc->has_decoder && !dec->has_encoder && dec->has_decoder));
    CHECK((both->has_encoder && both->has_decoder));
    // the other direction's tensors are empty (shapes kept); the codebooks are in both
    CHECK(enc->dec_tf[0].linear1.empty());
    CHECK(enc->dec_in.weight.empty());
    CHECK(enc->upsample.weight.empty());
    CHECK(enc->semantic.output_proj.empty());
    CHECK(enc->dec_in.shape.out_channels == both->dec_in.shape.out_channels);
    CHECK(dec->enc_tf[0].in_proj.empty());
    CHECK(dec->enc_out.weight.empty());
    CHECK(dec->downsample.weight.empty());
    CHECK(dec->acoustic.input_proj.empty());
    CHECK(dec->acoustic.books[0].sq_norm.empty());
    CHECK_FALSE(enc->acoustic.books[0].embedding.empty());
    CHECK_FALSE(dec->acoustic.books[0].embedding.empty());
    // each computes its direction exactly as the whole model (same chunking as run())
    EngineOptions o;
    o.with_chunk_frames(2);
    Engine e(enc, o), de(dec, o);
    const auto pcm = tone(5 * 1920 + 333);
    const Codes c = e.encode(pcm.data(), int64_t(pcm.size()), enc->cfg.n_q);
    CHECK(c.data == ref.codes);
    CHECK(bit_identical(de.decode(c), ref.audio));
  }
}

TEST_CASE("frozen weights: no descriptor left to open the weights is the environment's error, not theirs") {
  TempDir dir;
  const std::string p = dir.file("model.safetensors");
  write_file(p, weights_bytes(Dialect::Moshi, 1));
  struct rlimit old {};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &old) == 0);
  const int lowest = ::open("/dev/null", O_RDONLY);  // the lowest free descriptor
  REQUIRE(lowest >= 0);
  ::close(lowest);
  struct rlimit lim = old;
  lim.rlim_cur = rlim_t(lowest);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &lim) == 0);
  ErrorKind kind = ErrorKind::Internal;
  std::string msg;
  try {
    load_model(p);  // (no config beside it: no other file is opened first)
  } catch (const Error& e) {
    kind = e.kind();
    msg = e.what();
  }
  REQUIRE(setrlimit(RLIMIT_NOFILE, &old) == 0);
  CAPTURE(msg);
  CHECK(kind == ErrorKind::Environment);
  CHECK(msg.rfind(p + ": ", 0) == 0);
}

// ---- Weights and configs from a stream (a pipe, FIFO, /dev/stdin, a device) ----
// Such a source has no size (st_size 0) and can be read only once, so the reader takes it in
// once, front to back: the weights exactly as far as their header declares (into memory of the
// model's own, like a file's), a config to its end, kept for later reads of the same stream in
// the process (a run reads its config twice: resolve_config, then the load). The same bytes give
// the same model and fingerprint whichever way they come; a stream cut short, /dev/zero or an
// endless stream is a weights error (exit 4) naming the path, at once.

// test_weights links codec/ only (tests/CMakeLists.txt); locate_weights, the CLI's first look at
// --weights, is self-contained, so its source is compiled in here.
#include "app/engine_io/weights_locate.cpp"

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

namespace {

// A reader that blocks for good (a FIFO opened twice, a stream read to an end that never comes)
// fails the test with a message instead of hanging ctest.
extern "C" void on_alarm(int) {
  static const char msg[] = "test_weights_frozen: a stream test hung (blocked reading a pipe or FIFO)\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(98);
}
struct Watchdog {
  explicit Watchdog(unsigned seconds) {
    signal(SIGALRM, on_alarm);
    alarm(seconds);
  }
  ~Watchdog() { alarm(0); }
};

// A writer gone (the reader stopped early) is an EPIPE for the feeding thread, not a SIGPIPE.
[[maybe_unused]] const bool sigpipe_ignored = [] { return signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();

// How bytes reach the reader: a regular file, an anonymous pipe named by /proc/self/fd/N (what
// `<(cat f)` gives), the same pipe as /dev/stdin, or a named FIFO.
enum class Via { File, Pipe, Stdin, Fifo };
const char* via_name(Via v) {
  switch (v) {
    case Via::File: return "file";
    case Via::Pipe: return "pipe /proc/self/fd/N";
    case Via::Stdin: return "/dev/stdin (a pipe)";
    case Via::Fifo: return "FIFO";
  }
  return "?";
}

// `bytes` at a path of the kind `via`, fed by a thread (then, when `endless`, `filler` forever:
// the reader must stop by itself). Destroyed: the reader is gone, the thread ends.
class Source {
 public:
  Source(Via via, const TempDir& dir, std::vector<uint8_t> bytes, bool endless = false, uint8_t filler = 'y')
      : via_(via) {
    static int made = 0;  // (a fresh name each: a FIFO stays in the directory)
    const std::string name = std::to_string(++made) + ".src";
    if (via == Via::File) {
      path_ = dir.file(name);
      write_file(path_, bytes);
      return;
    }
    int wfd = -1;
    if (via == Via::Fifo) {
      path_ = dir.file(name);
      REQUIRE(mkfifo(path_.c_str(), 0600) == 0);
    } else {
      int fds[2];
      REQUIRE(pipe(fds) == 0);
      rfd_ = fds[0];
      wfd = fds[1];
      if (via == Via::Stdin) {
        saved_stdin_ = dup(0);
        REQUIRE(dup2(rfd_, 0) == 0);
        path_ = "/dev/stdin";
      } else {
        path_ = "/proc/self/fd/" + std::to_string(rfd_);
      }
    }
    writer_ = std::thread([this, wfd, bytes = std::move(bytes), endless, filler]() mutable {
      if (via_ == Via::Fifo) wfd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);  // waits for the reader
      connected_ = true;
      auto put = [&](const uint8_t* p, size_t n) {
        while (n > 0) {
          const ssize_t k = ::write(wfd, p, n);
          if (k < 0 && errno == EINTR) continue;
          if (k <= 0) return false;  // EPIPE: the reader is done
          p += k, n -= size_t(k);
        }
        return true;
      };
      bool ok = put(bytes.data(), bytes.size());
      const std::vector<uint8_t> fill(size_t(1) << 16, filler);
      while (ok && endless) ok = put(fill.data(), fill.size());
      if (wfd >= 0) ::close(wfd);
    });
  }
  ~Source() {
    if (via_ == Via::File) return;
    if (via_ == Via::Fifo && !connected_) {  // never opened by the reader: release the writer
      const int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) ::close(fd);
    }
    if (saved_stdin_ >= 0) dup2(saved_stdin_, 0), ::close(saved_stdin_);
    if (rfd_ >= 0) ::close(rfd_);  // the last read end: a writer still writing gets EPIPE
    writer_.join();
  }
  const std::string& path() const { return path_; }

 private:
  Via via_;
  std::string path_;
  int rfd_ = -1, saved_stdin_ = -1;
  std::atomic<bool> connected_{false};
  std::thread writer_;
};

std::vector<uint8_t> tiny_config_bytes() {
  const std::string s = test_config("tiny").to_json().dump(2);
  return {s.begin(), s.end()};
}

// The CLI's load (app/engine_io/pipeline.cpp make_engine): locate the weights, resolve the config (for the
// log), load (which resolves it again).
std::shared_ptr<const Model> cli_load(const std::string& weights, const std::string& config) {
  LoadOptions lo;
  lo.config_path = config;
  const std::string path = app::locate_weights(weights);
  std::string origin;
  resolve_config(path, lo, &origin);
  CHECK(origin == config);
  return load_model(path, lo);
}

// The weights error of cli_load, and how long it took to come.
std::string cli_load_error(const std::string& weights, const std::string& config, double* seconds = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    cli_load(weights, config);
    FAIL("expected the load to fail");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Weights);
    msg = e.what();
  }
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return msg;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("streams: the same weights and config bytes from a file, a pipe, /dev/stdin or a FIFO load identically") {
  Watchdog dog(120);
  const Via vias[] = {Via::File, Via::Pipe, Via::Stdin, Via::Fifo};
  for (Dialect d : {Dialect::Moshi, Dialect::HuggingFace}) {
    const std::string dialect = dialect_name(d);
    CAPTURE(dialect);
    TempDir dir;
    const std::vector<uint8_t> weights = weights_bytes(d, 1), config = tiny_config_bytes();
    write_file(dir.file("ref.safetensors"), weights);
    const auto ref = load_tiny(dir.file("ref.safetensors"));
    const Run ref_run = run(ref, Path::Cached);
    for (Via wv : vias)
      for (Via cv : vias) {
        if (wv == Via::Stdin && cv == Via::Stdin) continue;  // (one stdin)
        const std::string w_via = via_name(wv), c_via = via_name(cv);
        CAPTURE(w_via);
        CAPTURE(c_via);
        const Source w(wv, dir, weights), c(cv, dir, config);
        const auto m = cli_load(w.path(), c.path());
        CHECK(m->cfg == test_config("tiny"));
        CHECK(m->fingerprint == ref->fingerprint);
        CHECK(m->source == w.path());
        // the stream's config, read again later in the process (`info` does, once per file)
        CHECK(Config::from_file(c.path()) == test_config("tiny"));
        if (cv == Via::File || wv != Via::File) continue;  // (one engine run per stream kind)
        const Run r = run(m, Path::Cached);
        CHECK(r.codes == ref_run.codes);
        CHECK(bit_identical(r.audio, ref_run.audio));
      }
  }
}

TEST_CASE("streams: weights or a config cut short anywhere is a weights error naming the path") {
  Watchdog dog(120);
  TempDir dir;
  const std::vector<uint8_t> weights = weights_bytes(Dialect::HuggingFace, 1), config = tiny_config_bytes();
  const uint64_t header = 8 + (uint64_t(weights[0]) | uint64_t(weights[1]) << 8 | uint64_t(weights[2]) << 16);
  write_file(dir.file("config.json"), config);
  // the boundaries (empty, inside the length, the header, the data, one byte short), then random
  std::vector<size_t> cuts = {0, 1, 7, 8, 9, size_t(header) - 1, size_t(header), size_t(header) + 1,
                              weights.size() - 1};
  std::mt19937_64 rng(26);
  for (int i = 0; i < 24; ++i) cuts.push_back(size_t(rng() % weights.size()));
  for (size_t i = 0; i < cuts.size(); ++i) {
    const size_t cut = cuts[i];
    const Via via = i % 3 == 2 ? Via::Fifo : Via::Pipe;
    const std::string kind = via_name(via);
    CAPTURE(cut);
    CAPTURE(kind);
    {
      const Source w(via, dir, {weights.begin(), weights.begin() + long(cut)});
      const std::string msg = cli_load_error(w.path(), dir.file("config.json"));
      CAPTURE(msg);
      CHECK(msg.rfind(w.path() + ": ", 0) == 0);
      if (cut == 0) CHECK(has(msg, "is empty"));
      else CHECK(has(msg, "truncated: the stream ended after " + std::to_string(cut) + " "));
    }
    // (the same bytes in a file: an error naming it too)
    const Source f(Via::File, dir, {weights.begin(), weights.begin() + long(cut)});
    CHECK(cli_load_error(f.path(), dir.file("config.json")).rfind(f.path() + ": ", 0) == 0);
    // a config cut short, through a stream
    const size_t ccut = size_t(rng() % config.size());
    CAPTURE(ccut);
    write_file(dir.file("model.safetensors"), weights);
    const Source c(via, dir, {config.begin(), config.begin() + long(ccut)});
    const std::string msg = cli_load_error(dir.file("model.safetensors"), c.path());
    CHECK(msg.rfind(c.path() + ": not valid JSON", 0) == 0);
  }
}

TEST_CASE("streams: /dev/zero, endless and oversized streams are refused at once; a longer one is read as far as declared") {
  Watchdog dog(120);
  TempDir dir;
  const std::vector<uint8_t> weights = weights_bytes(Dialect::Moshi, 1), config = tiny_config_bytes();
  write_file(dir.file("config.json"), config);
  write_file(dir.file("model.safetensors"), weights);
  const std::string cfg = dir.file("config.json");
  double s = 0;

  std::string msg = cli_load_error("/dev/zero", cfg, &s);
  CHECK(msg.rfind("/dev/zero: not a safetensors file: header length 0", 0) == 0);
  CHECK(s < 5);
  msg = cli_load_error(dir.file("model.safetensors"), "/dev/zero", &s);
  CHECK(msg.rfind("/dev/zero: more than 16 MiB: not a model config", 0) == 0);
  CHECK(s < 5);
  // endless text (`yes`): its first 8 bytes are no header length; as a config, too long
  for (Via via : {Via::Pipe, Via::Fifo}) {
    const std::string kind = via_name(via);
    CAPTURE(kind);
    {
      const Source w(via, dir, {}, /*endless=*/true);
      msg = cli_load_error(w.path(), cfg, &s);
      CHECK(msg.rfind(w.path() + ": not a safetensors file: header length ", 0) == 0);
      CHECK(s < 5);
    }
    {
      const Source c(via, dir, {}, /*endless=*/true);
      msg = cli_load_error(dir.file("model.safetensors"), c.path(), &s);
      CHECK(msg.rfind(c.path() + ": more than 16 MiB: not a model config", 0) == 0);
      CHECK(s < 5);
    }
    // a header declaring a petabyte of tensors, then endless zeros: refused before any is read
    {
      std::string h = R"({"w":{"dtype":"U8","shape":[1125899906842624],"data_offsets":[0,1125899906842624]}})";
      h.append((8 - h.size() % 8) % 8, ' ');
      std::vector<uint8_t> b(8);
      for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t((uint64_t(h.size()) >> (8 * i)) & 0xff);
      b.insert(b.end(), h.begin(), h.end());
      const Source w(via, dir, b, /*endless=*/true, 0);
      msg = cli_load_error(w.path(), cfg, &s);
      CHECK(msg.rfind(w.path() + ": its header declares 1125899906842624 bytes of tensor data, more than", 0) == 0);
      CHECK(s < 5);
    }
    // the weights, then endless bytes: read as far as the header declares, never to an end
    {
      const Source w(via, dir, weights, /*endless=*/true);
      const auto m = cli_load(w.path(), cfg);
      CHECK(m->fingerprint == load_tiny(dir.file("model.safetensors"))->fingerprint);
    }
  }
}

TEST_CASE("streams: --weights names a stream as it is; only a missing path does not exist") {
  TempDir dir;
  write_file(dir.file("model.safetensors"), weights_bytes(Dialect::Moshi, 1));
  fs::create_directories(dir.path / "empty");
  REQUIRE(mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const std::string pipe_path = "/proc/self/fd/" + std::to_string(fds[0]);
  for (const std::string& p : {dir.file("model.safetensors"), dir.file("fifo"), std::string("/dev/zero"), pipe_path})
    CHECK(app::locate_weights(p) == p);
  CHECK(app::locate_weights(dir.path.string()) == dir.file("model.safetensors"));
  ::close(fds[0]);
  ::close(fds[1]);
  auto error = [](const std::string& p) {
    try {
      app::locate_weights(p);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::Weights);
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(error(dir.file("missing")) == "--weights '" + dir.file("missing") + "' does not exist");
  CHECK(error(dir.file("model.safetensors/x")) == "--weights '" + dir.file("model.safetensors/x") + "' does not exist");
  CHECK(error((dir.path / "empty").string()) == "--weights '" + (dir.path / "empty").string() +
                                                    "' is a directory without model.safetensors");
}
