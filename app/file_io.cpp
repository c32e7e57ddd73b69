#include "app/file_io.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>

#include <spdlog/spdlog.h>

#include "codec/error.h"

namespace mimi::app {
namespace fs = std::filesystem;

namespace {

// ---- temporaries: the signal handler's table, and stale ones of dead processes

constexpr int kSlots = 64;
constexpr size_t kPathMax = 4096;
char g_tmp_paths[kSlots][kPathMax];
std::atomic<bool> g_tmp_used[kSlots];

int register_temporary(const std::string& path) {
  if (path.size() >= kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!g_tmp_used[i].load() && g_tmp_used[i].compare_exchange_strong(expected, true)) {
      // The handler reads the path only while the flag is set: mark it unused while writing it.
      g_tmp_used[i].store(false);
      std::memcpy(g_tmp_paths[i], path.c_str(), path.size() + 1);
      g_tmp_used[i].store(true);
      return i;
    }
  }
  return -1;  // more than 64 outputs open at once: not cleaned on a signal, still by the next run
}

void unregister_temporary(int slot) {
  if (slot >= 0) g_tmp_used[slot].store(false);
}

}  // namespace

void remove_pending_temporaries() {
  for (int i = 0; i < kSlots; ++i)
    if (g_tmp_used[i].load()) ::unlink(g_tmp_paths[i]);
}

namespace {

extern "C" void on_terminating_signal(int sig) {
  remove_pending_temporaries();
  _exit(128 + sig);
}

std::string host_name() {
  char h[256] = {0};
  if (::gethostname(h, sizeof h - 1) != 0 || !h[0]) return "host";
  std::string s(h);
  for (char& c : s)
    if (c == '/' || c == '.') c = '_';
  return s;
}

const std::string& temp_marker() {  // ".mimi-tmp.HOST."
  static const std::string m = ".mimi-tmp." + host_name() + ".";
  return m;
}

// Removes ".NAME.mimi-tmp.HOST.PID.N" files of this host whose process is gone (a SIGKILL, a
// power cut), once per directory per run. Temporaries of other hosts (a shared file system) and
// of live processes are left alone.
void clean_stale_temporaries(const fs::path& dir) {
  static std::mutex mu;
  static std::set<std::string> done;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!done.insert(dir.string()).second) return;
  }
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] != '.') continue;
    const size_t m = name.find(temp_marker());
    if (m == std::string::npos) continue;
    const std::string rest = name.substr(m + temp_marker().size());  // PID.N
    const size_t dot = rest.find('.');
    if (dot == std::string::npos) continue;
    char* endp = nullptr;
    const long pid = std::strtol(rest.c_str(), &endp, 10);
    if (endp != rest.c_str() + dot || pid <= 0) continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::error_code rm;
    fs::remove(it->path(), rm);
  }
}

std::set<std::pair<dev_t, ino_t>>& protected_inputs() {
  static std::set<std::pair<dev_t, ino_t>> s;
  return s;
}

// The regular outputs this command has opened, by normalized absolute path (set_protected_inputs
// turns the check on for the commands that map inputs to outputs).
struct OutputClaims {
  std::mutex mu;
  bool on = false;
  std::set<std::string> paths;
};
OutputClaims& output_claims() {
  static OutputClaims c;
  return c;
}

}  // namespace

// ---- input

int open_input(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // no wait for a FIFO's writer
  if (fd < 0) throw sys_error(errno, ErrorKind::Input, path, "cannot open");
  struct stat st{};
  if (::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode)) {
    for (bool told = false;;) {  // until a writer sends data or closes (POLLIN or POLLHUP)
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, told ? -1 : 2000);
      if (r > 0) break;
      if (r == 0) {
        spdlog::warn("{}: a FIFO (or pipe) with no data after 2 s: waiting for its writer; nothing after it runs "
                     "until then (Ctrl-C stops)",
                     path);
        told = true;
      } else if (errno != EINTR) {
        const int e = errno;
        ::close(fd);
        throw sys_error(e, ErrorKind::Input, path, "cannot wait for");
      }
    }
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int e = errno;
    ::close(fd);
    throw sys_error(e, ErrorKind::Input, path, "cannot open");
  }
  return fd;
}

std::vector<uint8_t> read_input(const std::string& path, const PrefixCheck& check) {
  const bool in = path == "-";
  const std::string name = in ? std::string("stdin") : path;
  int fd = in ? 0 : open_input(path);
  struct FdCloser {
    int fd;
    bool own;
    ~FdCloser() {
      if (own) ::close(fd);
    }
  } closer{fd, !in};
  struct stat st{};
  if (::fstat(fd, &st) != 0) throw sys_error(errno, ErrorKind::Input, name, "cannot stat");
  if (S_ISDIR(st.st_mode)) throw Error(ErrorKind::Input, name + ": is a directory");
  const bool regular = S_ISREG(st.st_mode);
  const uint64_t limit = regular ? uint64_t(st.st_size) : kMaxStreamedInputBytes;
  std::vector<uint8_t> b;
  if (regular) b.reserve(size_t(st.st_size));
  constexpr size_t kPrefix = 64 << 10;
  bool checked = !check;
  uint8_t buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw sys_error(errno, ErrorKind::Input, name, "read failed");
    }
    if (n == 0) break;
    if (b.size() + size_t(n) > limit) {
      if (regular) break;  // grew while being read: take what it held when opened
      throw Error(ErrorKind::Input, name + ": more than " + std::to_string(kMaxStreamedInputBytes >> 30) +
                                        " GiB from a stream; not an input mimi reads");
    }
    b.insert(b.end(), buf, buf + n);
    if (!checked && b.size() >= kPrefix) {
      check(b.data(), b.size());
      checked = true;
    }
  }
  if (!checked) check(b.data(), b.size());
  return b;
}

void set_protected_inputs(const std::vector<std::string>& inputs) {
  auto& s = protected_inputs();
  s.clear();
  {
    std::lock_guard<std::mutex> lock(output_claims().mu);
    output_claims().on = true;
  }
  for (const std::string& p : inputs) {
    struct stat st{};
    if (p != "-" && ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) s.insert({st.st_dev, st.st_ino});
  }
}

// ---- output

void write_all(int fd, const void* data, size_t n, const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw sys_error(errno, ErrorKind::Output, what, "write failed");
    }
    p += w;
    n -= size_t(w);
  }
}

OutputFile::OutputFile(const std::string& path, bool force) : path_(path), force_(force) {
  if (path == "-") {
    fd_ = 1;
    return;
  }
  {  // one output per input: a/x.wav and b/x.wav into out/ never both land in out/x.mimi (with
     // --force the later would silently replace the earlier; without, it races it)
    OutputClaims& c = output_claims();
    std::lock_guard<std::mutex> lock(c.mu);
    std::error_code aec;
    const fs::path abs = fs::absolute(path, aec);
    if (c.on && !c.paths.insert(aec ? path : abs.lexically_normal().string()).second)
      throw Error(ErrorKind::Output, path + ": already the output of another input of this command; not written "
                                            "twice (inputs with the same name into one directory?)");
  }
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw Error(ErrorKind::Output, path + ": is a directory");
    if (!S_ISREG(st.st_mode)) {  // /dev/null, a FIFO, a terminal: write to it, never replace it
      fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd_ < 0) throw sys_error(errno, ErrorKind::Output, path, "cannot open for writing");
      return;
    }
    if (protected_inputs().count({st.st_dev, st.st_ino}))
      throw Error(ErrorKind::Output, path + ": is an input of this command; refusing to overwrite it");
    if (!force) throw Error(ErrorKind::Output, path + ": exists (use --force to overwrite)");
  }
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  // a directory that could not be made says why (a read-only file system, no permission), not
  // the "No such file or directory" of the temporary's open below
  if (ec && !fs::is_directory(dir)) throw sys_error(ec.value(), ErrorKind::Output, dir.string(), "cannot create the directory");
  clean_stale_temporaries(dir);
  static std::atomic<unsigned> counter{0};
  std::random_device rd;
  for (int attempt = 0; attempt < 8 && fd_ < 0; ++attempt) {
    // ".NAME.mimi-tmp.HOST.PID.N", NAME cut short where the whole would pass NAME_MAX (255 bytes):
    // an output name of up to 255 bytes must be writable (the stale-temporary sweep reads only
    // the part from the marker on)
    const std::string suffix = temp_marker() + std::to_string(::getpid()) + "." + std::to_string(counter++) +
                               std::to_string(rd() % 100000);
    const std::string name = target.filename().string();
    const size_t room = suffix.size() + 1 < 255 ? 255 - suffix.size() - 1 : 0;
    std::string tmp_name(1, '.');
    tmp_name.append(name, 0, std::min(room, name.size()));
    tmp_name += suffix;
    tmp_ = (dir / tmp_name).string();
    fd_ = ::open(tmp_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    const int err = errno;
    tmp_.clear();
    throw sys_error(err, ErrorKind::Output, path, "cannot create");
  }
  slot_ = register_temporary(tmp_);
  seekable_ = true;
}

OutputFile::~OutputFile() {
  if (fd_ > 1) ::close(fd_);
  if (!tmp_.empty() && !committed_) ::unlink(tmp_.c_str());
  unregister_temporary(slot_);
}

void OutputFile::write(const void* data, size_t n) {
  if (error_) throw sys_error(error_, ErrorKind::Output, path_ == "-" ? "stdout" : path_, "write failed");
  write_all(fd_, data, n, path_ == "-" ? "stdout" : path_);
  written_ += n;
}

void OutputFile::commit() {
  const std::string what = path_ == "-" ? "stdout" : path_;
  if (error_) throw sys_error(error_, ErrorKind::Output, what, "write failed");
  if (tmp_.empty()) {  // stdout or a device: nothing to publish
    committed_ = true;
    return;
  }
  if (::fsync(fd_) != 0) throw sys_error(errno, ErrorKind::Output, what, "fsync failed");
  if (::close(fd_) != 0) {
    const int err = errno;
    fd_ = -1;
    throw sys_error(err, ErrorKind::Output, what, "close failed");
  }
  fd_ = -1;
  // Without --force the final name is taken only if still free: two writers of the same output
  // cannot both succeed (no check-then-rename race).
  int rc = ::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, path_.c_str(), force_ ? 0 : RENAME_NOREPLACE);
  if (rc != 0 && !force_ && (errno == EINVAL || errno == ENOSYS)) {  // file system without NOREPLACE
    rc = ::link(tmp_.c_str(), path_.c_str());
    if (rc == 0) ::unlink(tmp_.c_str());
  }
  if (rc != 0) {
    const int e = errno;
    if (e == EEXIST) throw Error(ErrorKind::Output, path_ + ": exists (use --force to overwrite)");
    throw sys_error(e, ErrorKind::Output, path_, "cannot rename into place");
  }
  committed_ = true;
  unregister_temporary(slot_);
  slot_ = -1;
}

void write_output(const std::string& path, const std::vector<uint8_t>& bytes, bool force) {
  OutputFile f(path, force);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void install_signal_handlers() {
  struct sigaction sa{};
  sa.sa_handler = on_terminating_signal;
  sigemptyset(&sa.sa_mask);
  // Every signal whose default is to end the process, not only INT/TERM/HUP: Slurm's --signal
  // sends USR1 before the time limit, `timeout -s ALRM`, a CPU-time limit sends XCPU.
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGXCPU, SIGPWR})
    ::sigaction(s, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGXFSZ, SIG_IGN);
}

bool is_directory_target(const std::string& out) {
  std::error_code ec;
  return !out.empty() && out != "-" && (out.back() == '/' || fs::is_directory(out, ec));
}

std::string output_path(const std::string& input, const std::string& out, const std::string& ext) {
  if (out == "-") return "-";
  const std::string stem = input == "-" ? "stdin" : fs::path(input).stem().string();
  if (is_directory_target(out)) return (fs::path(out) / (stem + ext)).string();
  if (!out.empty()) return out;
  if (input == "-") return "-";
  return (fs::path(input).parent_path() / (stem + ext)).string();
}

int batch_slots(int asked, size_t items, int fds_per_slot) {
  int n = asked;
  if (items > 0 && size_t(n) > items) n = int(items);
  n = std::max(n, 1);
  // The batched runners (codec/batch.cpp) keep a step in flight while the next one is filled: a
  // slot whose item has pushed its last chunk takes the next item at once, while the item that
  // ended stays open until the codes (samples) of that step are collected. So a slot holds up to
  // two items, each with its `fds_per_slot` descriptors (counting one per slot, as before, let
  // twice the limit's worth of inputs open: EMFILE, exit 75, on every rerun).
  constexpr int kItemsPerSlot = 2;
  const long long per_slot = (long long)std::max(fds_per_slot, 1) * kItemsPerSlot;
  constexpr int kReserve = 8;  // the weights, a journal, a tar, a lock, an output written at a time
  reserve_open_files(int(std::min<long long>(n * per_slot + kReserve + 64, 1 << 30)));
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return n;
  int open_now = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++open_now;
  const long long room = (long long)r.rlim_cur - open_now - kReserve;
  // at least one slot: the run then needs what a one-by-one run needs, and a descriptor that is
  // still missing fails as the environment (EMFILE: exit 75), never as an input
  const long long fit = std::max<long long>(room / per_slot, 1);
  if (fit < n) {
    spdlog::warn("--batch {}: the open-file limit (ulimit -n {}) holds {} slot{}; using {}", asked,
                 (long long)r.rlim_cur, fit, fit == 1 ? "" : "s", fit);
    n = int(fit);
  }
  return n;
}

void reserve_open_files(int n) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= rlim_t(n)) return;
  r.rlim_cur = r.rlim_max == RLIM_INFINITY ? rlim_t(n) : std::min(r.rlim_max, rlim_t(n));
  (void)setrlimit(RLIMIT_NOFILE, &r);
}

}  // namespace mimi::app
