#include "codec/open_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

namespace mimi {
namespace {

std::atomic<WaitNotice> g_notice{nullptr};

}  // namespace

void set_wait_notice(WaitNotice notice) { g_notice.store(notice); }

int open_for_reading(const std::string& path, ErrorKind kind, const std::string& doing) {
  // O_NONBLOCK: open() of a FIFO returns at once instead of waiting for a writer in silence
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw sys_error(errno, kind, path, doing);
  struct stat st{};
  if (::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode)) {
    // until a writer sends data or closes (POLLIN or POLLHUP; a FIFO that never had a writer
    // reports neither)
    for (bool told = false;;) {
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, told ? -1 : 2000);
      if (r > 0) break;
      if (r == 0) {
        if (WaitNotice n = g_notice.load()) n(path);
        told = true;
      } else if (errno != EINTR) {
        const int e = errno;
        ::close(fd);
        throw sys_error(e, kind, path, "cannot wait for");
      }
    }
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int e = errno;
    ::close(fd);
    throw sys_error(e, kind, path, doing);
  }
  return fd;
}

}  // namespace mimi
