#include "app/sys/temporaries.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <vector>

namespace mimi::app {
namespace fs = std::filesystem;

namespace {

// ---- the signal handler's tables

constexpr int kSlots = 64, kFolderSlots = 4;
constexpr size_t kPathMax = 4096;

struct Table {
  char paths[kSlots][kPathMax];
  std::atomic<bool> used[kSlots];
};
Table g_files, g_folders;  // g_folders uses its first kFolderSlots rows

int put(Table& t, int slots, const std::string& path) {
  if (path.size() >= kPathMax) return -1;
  for (int i = 0; i < slots; ++i) {
    bool expected = false;
    if (!t.used[i].load() && t.used[i].compare_exchange_strong(expected, true)) {
      // The handler reads the path only while the flag is set: mark it unused while writing it.
      t.used[i].store(false);
      std::memcpy(t.paths[i], path.c_str(), path.size() + 1);
      t.used[i].store(true);
      return i;
    }
  }
  return -1;  // more outputs open at once than the table holds: not cleaned on a signal, still by the next run
}

// Empties and removes a folder with system calls only (the signal handler may not allocate):
// getdents64 over it, unlinkat of each entry, repeated from the start until a pass finds nothing.
void remove_folder_raw(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    struct Dirent64 {  // the kernel's linux_dirent64
      uint64_t ino;
      int64_t off;
      unsigned short reclen;
      unsigned char type;
      char name[1];
    };
    alignas(8) char buf[4096];
    for (int pass = 0; pass < 1000; ++pass) {
      if (::lseek(fd, 0, SEEK_SET) != 0) break;
      bool removed = false;
      for (;;) {
        const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n <= 0) break;
        for (long at = 0; at < n;) {
          const Dirent64* d = reinterpret_cast<const Dirent64*>(buf + at);
          const char* name = d->name;
          if (!(name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))))
            removed |= ::unlinkat(fd, name, 0) == 0;
          at += d->reclen;
        }
      }
      if (!removed) break;
    }
    ::close(fd);
  }
  ::rmdir(path);
}

std::atomic<int> g_defer{0};         // SignalsDeferred alive
std::atomic<int> g_deferred_sig{0};  // the signal that came meanwhile

extern "C" void on_terminating_signal(int sig) {
  if (g_defer.load() > 0) {
    g_deferred_sig.store(sig);
    return;
  }
  remove_pending_temporaries();
  _exit(128 + sig);
}

// A crash (a bug, or a fault of the machine: SIGBUS on a truncated mapping) still removes the
// temporaries, then dies of the same signal, so a core dump and the 128+N status stay as they were.
extern "C" void on_crash_signal(int sig) {
  remove_pending_temporaries();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string host_name() {
  char h[256] = {0};
  if (::gethostname(h, sizeof h - 1) != 0 || !h[0]) return "host";
  std::string s(h);
  for (char& c : s)
    if (c == '/' || c == '.') c = '_';
  return s;
}

}  // namespace

int register_temporary(const std::string& path) { return put(g_files, kSlots, path); }
void unregister_temporary(int slot) {
  if (slot >= 0) g_files.used[slot].store(false);
}
int register_temporary_folder(const std::string& path) { return put(g_folders, kFolderSlots, path); }
void unregister_temporary_folder(int slot) {
  if (slot >= 0) g_folders.used[slot].store(false);
}

void remove_pending_temporaries() {
  for (int i = 0; i < kSlots; ++i)
    if (g_files.used[i].load()) ::unlink(g_files.paths[i]);
  for (int i = 0; i < kFolderSlots; ++i)
    if (g_folders.used[i].load()) remove_folder_raw(g_folders.paths[i]);
}

SignalsDeferred::SignalsDeferred() { g_defer.fetch_add(1); }
SignalsDeferred::~SignalsDeferred() {
  if (g_defer.fetch_sub(1) == 1) {
    const int sig = g_deferred_sig.exchange(0);
    if (sig) on_terminating_signal(sig);
  }
}

const std::string& temp_marker() {  // ".mimi-tmp.HOST."
  static const std::string m = ".mimi-tmp." + host_name() + ".";
  return m;
}

std::string temporary_name(const std::string& name) {
  static std::atomic<unsigned> counter{0};
  std::random_device rd;
  // the stale-temporary sweep reads only the part from the marker on
  const std::string suffix =
      temp_marker() + std::to_string(::getpid()) + "." + std::to_string(counter++) + std::to_string(rd() % 100000);
  const size_t room = suffix.size() + 1 < 255 ? 255 - suffix.size() - 1 : 0;
  std::string tmp(1, '.');
  tmp.append(name, 0, std::min(room, name.size()));
  return tmp + suffix;
}

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
    // A PID dead here may be alive in another PID namespace of the same host name (containers
    // sharing a volume): every writer holds an flock on its temporary (file or folder) for its
    // whole life, so a lock that cannot be taken is a live writer. Removed only while holding it.
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      std::error_code rm;
      if (it->is_directory(rm) && !it->is_symlink(rm))
        fs::remove_all(it->path(), rm);
      else
        fs::remove(it->path(), rm);
    }
    ::close(fd);
  }
}

void install_signal_handlers() {
  struct sigaction sa{};
  sa.sa_handler = on_terminating_signal;
  sa.sa_flags = SA_RESTART;  // the handler returns only while SignalsDeferred holds it back
  sigemptyset(&sa.sa_mask);
  // Every signal whose default is to end the process, not only INT/TERM/HUP: Slurm's --signal
  // sends USR1 before the time limit, `timeout -s ALRM`, a CPU-time limit sends XCPU. These are
  // caught even when inherited as ignored (a shell ignores INT and QUIT for `mimi ... &`).
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGXCPU, SIGPWR})
    ::sigaction(s, &sa, nullptr);
  // The rest of the signals that end a process by default, each only while it still has its
  // default action: an ignored one stays ignored, a profiler's SIGPROF handler stays its own.
  std::vector<int> others = {SIGPROF, SIGIO, SIGSTKFLT, SIGSYS, SIGTRAP};
  for (int s = SIGRTMIN; s <= SIGRTMAX; ++s) others.push_back(s);
  auto if_default = [](int s, const struct sigaction& act) {
    struct sigaction old{};
    if (::sigaction(s, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL)
      ::sigaction(s, &act, nullptr);
  };
  for (int s : others) if_default(s, sa);
  // Crashes, on an alternate stack of this thread so that a stack overflow still cleans up.
  static char alt[64 << 10];
  stack_t ss{};
  ss.ss_sp = alt;
  ss.ss_size = sizeof alt;
  ::sigaltstack(&ss, nullptr);
  struct sigaction crash{};
  crash.sa_handler = on_crash_signal;
  crash.sa_flags = SA_ONSTACK | SA_NODEFER;
  sigemptyset(&crash.sa_mask);
  for (int s : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) if_default(s, crash);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGXFSZ, SIG_IGN);
}

}  // namespace mimi::app
