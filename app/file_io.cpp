#include "app/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "codec/error.h"

namespace mimi::app {
namespace fs = std::filesystem;

std::vector<uint8_t> read_input(const std::string& path) {
  const bool in = path == "-";
  int fd = in ? 0 : ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(ErrorKind::Input, path + ": cannot open: " + std::strerror(errno));
  if (!in && fs::is_directory(path)) {
    ::close(fd);
    throw Error(ErrorKind::Input, path + ": is a directory");
  }
  std::vector<uint8_t> b;
  uint8_t buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string err = std::strerror(errno);
      if (!in) ::close(fd);
      throw Error(ErrorKind::Input, (in ? std::string("stdin") : path) + ": read failed: " + err);
    }
    b.insert(b.end(), buf, buf + n);
  }
  if (!in) ::close(fd);
  return b;
}

void write_all(int fd, const void* data, size_t n, const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorKind::Output, what + ": write failed: " + std::strerror(errno));
    }
    p += w;
    n -= size_t(w);
  }
}

void write_output(const std::string& path, const std::vector<uint8_t>& bytes, bool force) {
  if (path == "-") {
    write_all(1, bytes.data(), bytes.size(), "stdout");
    return;
  }
  std::error_code ec;
  if (!force && fs::exists(path, ec))
    throw Error(ErrorKind::Output, path + ": exists (use --force to overwrite)");
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  fs::create_directories(dir, ec);  // failure shows up as "cannot create" below
  std::random_device rd;
  const std::string tmp = (dir / ("." + target.filename().string() + ".tmp" + std::to_string(rd() % 1000000))).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) throw Error(ErrorKind::Output, path + ": cannot create: " + std::strerror(errno));
  try {
    write_all(fd, bytes.data(), bytes.size(), path);
    if (::fsync(fd) != 0) throw Error(ErrorKind::Output, path + ": fsync failed: " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (!force && fs::exists(path, ec)) {  // appeared meanwhile
    ::unlink(tmp.c_str());
    throw Error(ErrorKind::Output, path + ": exists (use --force to overwrite)");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error(ErrorKind::Output, path + ": cannot rename into place: " + err);
  }
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

}  // namespace mimi::app
