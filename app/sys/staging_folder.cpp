#include "app/sys/staging_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "app/sys/file_io.h"
#include "app/sys/temporaries.h"
#include "codec/error.h"

namespace mimi::app {
namespace fs = std::filesystem;

StagingFolder::StagingFolder(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec && !fs::is_directory(dir)) throw sys_error(ec.value(), ErrorKind::Output, dir, "cannot create");
  clean_stale_temporaries(dir);
  int err = 0;
  for (int attempt = 0; attempt < 8; ++attempt) {
    path_ = (fs::path(dir) / temporary_name("staging")).string();
    if (::mkdir(path_.c_str(), 0755) == 0) break;
    err = errno;
    path_.clear();
    if (err != EEXIST) break;
  }
  if (path_.empty()) throw sys_error(err, ErrorKind::Output, dir, "cannot create a temporary folder in");
  slot_ = register_temporary_folder(path_);
  fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) {
    const int e = errno;
    ::rmdir(path_.c_str());
    unregister_temporary_folder(slot_);
    throw sys_error(e, ErrorKind::Output, path_, "cannot open");
  }
  ::flock(fd_, LOCK_EX | LOCK_NB);
}

StagingFolder::~StagingFolder() {
  if (fd_ >= 0) ::close(fd_);
  std::error_code ec;
  fs::remove_all(path_, ec);
  unregister_temporary_folder(slot_);
}

void StagingFolder::write(const std::string& name, const std::string& text) {
  const std::string shown = (fs::path(dir_) / name).string();  // what the user will find there
  const int fd = ::openat(fd_, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw sys_error(errno, ErrorKind::Output, shown, "cannot create");
  names_.push_back(name);
  try {
    write_all(fd, text.data(), text.size(), shown);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw sys_error(errno, ErrorKind::Output, shown, "cannot write");
}

void StagingFolder::publish(const std::function<void()>& before) {
  if (::syncfs(fd_) != 0) throw sys_error(errno, ErrorKind::Output, dir_, "cannot sync");
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) throw sys_error(errno, ErrorKind::Output, dir_, "cannot open");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{dfd};
  SignalsDeferred hold;
  if (before) before();
  for (; published_ < names_.size(); ++published_) {
    const std::string& n = names_[published_];
    if (::renameat(fd_, n.c_str(), dfd, n.c_str()) != 0)
      throw sys_error(errno, ErrorKind::Output, (fs::path(dir_) / n).string(), "cannot rename into place");
  }
  if (::fsync(dfd) != 0) throw sys_error(errno, ErrorKind::Output, dir_, "cannot sync");
}

}  // namespace mimi::app
