#include "app/sys/file_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <vector>

#include <spdlog/spdlog.h>

#include "app/sys/temporaries.h"
#include "codec/error.h"
#include "codec/open_file.h"

namespace mimi::app {
namespace fs = std::filesystem;

namespace {

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

int open_input(const std::string& path) { return open_for_reading(path, ErrorKind::Input); }

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

void refuse_std_streams_onto(const std::vector<std::string>& inputs, const char* role) {
  for (const int fd : {2, 1}) {
    struct stat out{};
    if (::fstat(fd, &out) != 0 || !S_ISREG(out.st_mode)) continue;
    for (const std::string& p : inputs) {
      struct stat in{};
      if (p.empty() || p == "-" || ::stat(p.c_str(), &in) != 0 || in.st_dev != out.st_dev || in.st_ino != out.st_ino)
        continue;
      if (fd == 2) {  // nothing may be written there, this message included
        const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (null >= 0) ::dup2(null, 2), ::close(null);
      }
      throw Error(ErrorKind::Output, std::string(fd == 1 ? "stdout" : "stderr") + " is the " + role + " file " + p +
                                         " (the shell opened it for the output: >>, 1<>): refused, nothing written to it");
    }
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

namespace {

// N when `path` names this process's open descriptor N (/dev/stdout, /dev/stderr, /dev/fd/N,
// /proc/self/fd/N, /proc/PID/fd/N of this process), else -1.
int descriptor_path(const std::string& path) {
  if (path == "/dev/stdin") return 0;
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  const std::string own = "/proc/" + std::to_string(::getpid()) + "/fd/";
  for (const std::string& prefix : {std::string("/dev/fd/"), std::string("/proc/self/fd/"),
                                   std::string("/proc/thread-self/fd/"), own}) {
    if (path.compare(0, prefix.size(), prefix) != 0 || path.size() == prefix.size()) continue;
    const std::string n = path.substr(prefix.size());
    if (n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos) return -1;
    return std::stoi(n);
  }
  return -1;
}

// The file a chain of symbolic links ends at (the path itself when it is none): an output is
// published there, so the link stays a link (the temporary and the rename replaced it before).
std::string resolve_symlinks(const std::string& path) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st{};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::string link(size_t(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
    const ssize_t n = ::readlink(p.c_str(), link.data(), link.size());
    if (n < 0) throw sys_error(errno, ErrorKind::Output, path, "cannot read the symbolic link");
    link.resize(size_t(n));
    const fs::path l(link);
    p = l.is_absolute() ? link : (fs::path(p).parent_path() / l).string();
  }
  throw Error(ErrorKind::Output, path + ": too many levels of symbolic links");
}

}  // namespace

OutputFile::OutputFile(const std::string& path, bool force) : path_(path), force_(force) {
  if (path == "-") {
    fd_ = 1;
    return;
  }
  // /dev/stdout and its kin are the descriptor the caller opened (a shell's `> file`): written
  // in place, as "-" is. Given a temporary and a rename they replaced the /dev/stdout symlink
  // itself (as root, the system's) and left the redirected file empty.
  if (const int n = descriptor_path(path); n >= 0) {
    fd_ = ::fcntl(n, F_DUPFD_CLOEXEC, 3);
    if (fd_ < 0) throw sys_error(errno, ErrorKind::Output, path, "cannot write (not an open descriptor)");
    // a descriptor the shell opened on an input (`-o /dev/fd/3 3>> in.wav`) is the input
    struct stat st{};
    if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && protected_inputs().count({st.st_dev, st.st_ino})) {
      ::close(fd_);
      fd_ = -1;
      throw Error(ErrorKind::Output, path + ": the descriptor is open on an input of this command; not written");
    }
    return;
  }
  if (!path.empty() && path.back() == '/')  // a folder's name: no file can be published under it
    throw Error(ErrorKind::Usage, path + ": names a directory (it ends in '/'); give a file name");
  target_ = resolve_symlinks(path);
  const std::string& target_path = target_;
  {  // one output per input: a/x.wav and b/x.wav into out/ never both land in out/x.mimi (with
     // --force the later would silently replace the earlier; without, it races it)
    OutputClaims& c = output_claims();
    std::lock_guard<std::mutex> lock(c.mu);
    std::error_code aec;  // the file the kernel would write: links and ".." resolved where they exist
    const fs::path abs = fs::weakly_canonical(fs::absolute(target_path, aec), aec);
    if (c.on && !c.paths.insert(aec ? target_path : abs.string()).second)
      throw Error(ErrorKind::Output, path + ": already the output of another input of this command; not written "
                                            "twice (inputs with the same name into one directory?)");
  }
  struct stat st{};
  if (::stat(target_path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw Error(ErrorKind::Output, path + ": is a directory");
    if (!S_ISREG(st.st_mode)) {  // /dev/null, a FIFO, a terminal: write to it, never replace it
      fd_ = ::open(target_path.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd_ < 0) throw sys_error(errno, ErrorKind::Output, path, "cannot open for writing");
      return;
    }
    if (protected_inputs().count({st.st_dev, st.st_ino}))
      throw Error(ErrorKind::Output, path + ": is an input of this command; refusing to overwrite it");
    if (!force) throw Error(ErrorKind::Output, path + ": exists (use --force to overwrite)");
  }
  const fs::path target(target_path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  // a directory that could not be made says why (a read-only file system, no permission), not
  // the "No such file or directory" of the temporary's open below
  if (ec && !fs::is_directory(dir)) throw sys_error(ec.value(), ErrorKind::Output, dir.string(), "cannot create the directory");
  clean_stale_temporaries(dir);
  for (int attempt = 0; attempt < 8 && fd_ < 0; ++attempt) {
    const std::string tmp_name = temporary_name(target.filename().string());
    tmp_ = (dir / tmp_name).string();
    fd_ = ::open(tmp_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    const int err = errno;
    tmp_.clear();
    throw sys_error(err, ErrorKind::Output, path, "cannot create");
  }
  // held until the process ends or closes it: the stale-temporary sweep of another process (in
  // another PID namespace, where our PID means nothing) sees a live writer (no lock manager: none)
  ::flock(fd_, LOCK_EX | LOCK_NB);
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
  int rc = ::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, target_.c_str(), force_ ? 0 : RENAME_NOREPLACE);
  if (rc != 0 && !force_ && (errno == EINVAL || errno == ENOSYS)) {  // file system without NOREPLACE
    rc = ::link(tmp_.c_str(), target_.c_str());
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

bool is_stdout_path(const std::string& path) { return path == "-" || descriptor_path(path) == 1; }

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
  // Beside the input only where inputs are files: /dev/stdin, /dev/fd/63 (a shell's <(...)) or a
  // device would name an output in /dev (made there by root), not the user's.
  struct stat st {};
  const std::string abs = absolute_path(input);
  if (abs.rfind("/dev/", 0) == 0 || abs.rfind("/proc/", 0) == 0 || (::stat(input.c_str(), &st) == 0 && !S_ISREG(st.st_mode)))
    throw Error(ErrorKind::Usage, input + " is not a file to write an output beside (a device, a pipe or a "
                                          "descriptor): give -o OUTPUT, or '-' as the input for stdout");
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
  const long long free_now = open_file_room();
  if (free_now == std::numeric_limits<long long>::max()) return n;
  const long long room = free_now - kReserve;
  // at least one slot: the run then needs what a one-by-one run needs, and a descriptor that is
  // still missing fails as the environment (EMFILE: exit 75), never as an input
  const long long fit = std::max<long long>(room / per_slot, 1);
  if (fit < n) {
    rlimit r{};
    (void)getrlimit(RLIMIT_NOFILE, &r);
    spdlog::warn("--batch {}: the open-file limit (ulimit -n {}) holds {} slot{}; using {}", asked,
                 (long long)r.rlim_cur, fit, fit == 1 ? "" : "s", fit);
    n = int(fit);
  }
  return n;
}

long long open_file_room() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return std::numeric_limits<long long>::max();
  long long open_now = 0;  // (counts the listing's own descriptor too: one short, never one over)
  std::error_code ec;
  for (fs::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++open_now;
  return (long long)r.rlim_cur - open_now;
}

void reserve_open_files(int n) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= rlim_t(n)) return;
  r.rlim_cur = r.rlim_max == RLIM_INFINITY ? rlim_t(n) : std::min(r.rlim_max, rlim_t(n));
  (void)setrlimit(RLIMIT_NOFILE, &r);
}

std::string current_dir() {
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  if (ec) {
    if (is_environment_errno(ec.value())) throw sys_error(ec.value(), ErrorKind::Input, ".", "cannot get the current directory");
    return "";
  }
  return cwd.string();
}

Error cwd_gone(const std::string& path) {
  return Error(ErrorKind::Usage, "'" + path + "' is a relative path and the current directory is gone (deleted or "
                                 "moved away): run from an existing directory, or give absolute paths");
}

fs::path normal_keeping_parents(const fs::path& p) {
  fs::path out;
  for (const fs::path& c : p)
    if (!c.empty() && c != ".") out /= c;
  if (out.empty()) out = p.has_root_directory() ? p.root_path() : fs::path(".");
  return out;
}

std::string absolute_path(const std::string& path) {
  const fs::path p(path);
  if (p.is_absolute()) return normal_keeping_parents(p).string();
  const std::string cwd = current_dir();
  if (cwd.empty()) throw cwd_gone(path);
  return normal_keeping_parents(fs::path(cwd) / p).string();
}

}  // namespace mimi::app
