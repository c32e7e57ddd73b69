// A run computes with exactly the weights it fingerprinted, or fails cleanly (issue 26, class 5).
// The loader reads every tensor with pread() into memory the process owns and fingerprints those
// bytes; no mapping of the file survives the load. So a weights file overwritten in place or
// truncated after the load changes nothing (the model of an untouched file gives the same bits,
// on every engine path: cached plans, uncached plans rebuilt per chunk, device-style placement
// after the change), and a file changed or truncated *during* the load is Error(Weights) naming
// it, never a SIGBUS and never a model of mixed bytes. Also: a load for one direction (weights.h
// Parts) keeps only that direction's weights, with the same fingerprint and bits; EMFILE opening
// the weights is the environment's error (exit 75), not the weights'.
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
#include "codec/test_weights.h"
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
  return test_weights_file(generate_test_weights(test_config("tiny"), seed), d);
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
  o.chunk_frames = 2;
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
    o.chunk_frames = 2;
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
