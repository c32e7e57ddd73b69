#include "app/dataset/entries.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "codec/error.h"

namespace mimi::app::dataset {
namespace fs = std::filesystem;

namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | cp >> 6), out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | cp >> 12), out += char(0x80 | (cp >> 6 & 0x3F)), out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | cp >> 18), out += char(0x80 | (cp >> 12 & 0x3F)), out += char(0x80 | (cp >> 6 & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// UTF-16 after its byte-order mark -> UTF-8; an unpaired surrogate or an odd byte count is refused
// with the line it is on.
std::string utf16_to_utf8(const std::string& raw, bool big_endian, const std::string& what) {
  const auto unit = [&](size_t i) {
    const uint8_t a = uint8_t(raw[i]), b = uint8_t(raw[i + 1]);
    return uint32_t(big_endian ? (a << 8 | b) : (b << 8 | a));
  };
  std::string out;
  out.reserve(raw.size());
  size_t line = 1;
  auto bad = [&](const std::string& why) {
    return Error(ErrorKind::Input, what + ":" + std::to_string(line) + ": not valid UTF-16 (" + why +
                                       "); save the manifest as UTF-8");
  };
  if (raw.size() % 2) throw bad("an odd number of bytes");
  for (size_t i = 2; i < raw.size(); i += 2) {
    uint32_t u = unit(i);
    if (u >= 0xD800 && u <= 0xDBFF) {
      if (i + 3 >= raw.size()) throw bad("a high surrogate at the end");
      const uint32_t lo = unit(i + 2);
      if (lo < 0xDC00 || lo > 0xDFFF) throw bad("a high surrogate without its low one");
      u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
      i += 2;
    } else if (u >= 0xDC00 && u <= 0xDFFF) {
      throw bad("a low surrogate without its high one");
    }
    if (u == '\n') ++line;
    append_utf8(out, u);
  }
  return out;
}

const std::set<std::string> kAudioExtensions = {".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif",
                                                ".aiff", ".au", ".caf", ".w64", ".rf64", ".wave"};

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// stat(2) or lstat(2); an error of the machine (EIO, ENOMEM, ...) is thrown, any other is returned.
int stat_of(const std::string& path, struct stat& st, bool follow) {
  if ((follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) == 0) return 0;
  const int err = errno;
  if (errno_kind(err, ErrorKind::Input) == ErrorKind::Environment)
    throw sys_error(err, ErrorKind::Input, path, "cannot look at it");
  return err;
}

std::string link_target(const std::string& path) {
  std::string buf(4096, '\0');
  const ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size());
  return n < 0 ? "?" : buf.substr(0, size_t(n));
}

}  // namespace

std::string decode_manifest_text(const std::string& raw, const std::string& what) {
  const auto at = [&](size_t i) { return i < raw.size() ? uint8_t(raw[i]) : 0x100; };
  if (at(0) == 0xFF && at(1) == 0xFE && at(2) == 0 && at(3) == 0)
    throw Error(ErrorKind::Input, what + ": UTF-32 text is not supported; save the manifest as UTF-8");
  // an audio file given where a manifest goes: its bytes would be read as a list of paths
  // (each magic with what follows it in the format, so no text line starting the same is taken)
  const auto starts = [&](const char* m, size_t at_ = 0) {
    return raw.size() >= at_ + std::strlen(m) && raw.compare(at_, std::strlen(m), m) == 0;
  };
  if (((starts("RIFF") || starts("RF64")) && starts("WAVE", 8)) || (starts("FORM") && (starts("AIFF", 8) || starts("AIFC", 8))) ||
      (starts("OggS") && at(4) == 0) || (starts("fLaC") && (at(4) & 0x7F) == 0) || (starts("ID3") && at(3) <= 5))
    throw Error(ErrorKind::Usage, what + ": is an audio file, not a manifest: dataset plan takes folders, JSON Lines, "
                                         "wav.scp or lists of paths (give its folder, or list it in a file)");
  if (at(0) == 0xEF && at(1) == 0xBB && at(2) == 0xBF) return raw.substr(3);
  if (at(0) == 0xFF && at(1) == 0xFE) return utf16_to_utf8(raw, false, what);
  if (at(0) == 0xFE && at(1) == 0xFF) return utf16_to_utf8(raw, true, what);
  if (raw.size() >= 2 && (at(0) == 0) != (at(1) == 0))  // "a\0b\0" or "\0a\0b": UTF-16 without its mark
    throw Error(ErrorKind::Input, what + ": looks like UTF-16 without a byte-order mark; save the manifest as UTF-8 "
                                         "(or UTF-16 with its byte-order mark)");
  return raw;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string l = text.substr(pos, nl - pos);
    if (!l.empty() && l.back() == '\r') l.pop_back();
    lines.push_back(std::move(l));
    pos = nl + 1;
  }
  return lines;
}

std::string manifest_base(const std::string& manifest_path) {
  // "" when the current directory is gone: only a relative path of the list needs it (manifest.cpp)
  const std::string cwd = current_dir();
  if (manifest_path == "-") return cwd;
  const std::string abs = absolute_path(manifest_path);
  // /dev/stdin, /dev/fd/63 (bash's <(...)), /proc/self/fd/N: the folder is no place of the user's
  if (starts_with(abs, "/dev/") || starts_with(abs, "/proc/")) return cwd;
  struct stat st{};
  if (stat_of(abs, st, true) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return cwd;  // a pipe
  return fs::path(abs).parent_path().string();
}

EntryCheck check_entry(const std::string& path) {
  EntryCheck c;
  auto refuse = [&](EntryCheck::Kind k, std::string why) {
    c.kind = k;
    c.why = std::move(why);
    return c;
  };
  if (path.find('\0') != std::string::npos) return refuse(EntryCheck::Refused, "the path holds a NUL byte");
  struct stat st{};
  // stat, never open: opening a FIFO blocks until a writer comes, and reading a device may never end
  if (const int err = stat_of(path, st, true); err != 0) {
    if (err == ELOOP) return refuse(EntryCheck::Refused, "a loop of symbolic links");
    if (err == ENAMETOOLONG) return refuse(EntryCheck::Refused, "the path is too long");
    struct stat lst{};
    if (err == ENOENT && stat_of(path, lst, false) == 0 && S_ISLNK(lst.st_mode))
      return refuse(EntryCheck::Unreadable, "a dangling symbolic link (to '" + link_target(path) + "')");
    return refuse(EntryCheck::Unreadable, std::strerror(err));
  }
  if (S_ISREG(st.st_mode)) {
    c.dev = st.st_dev;
    c.ino = st.st_ino;
    return c;
  }
  if (S_ISDIR(st.st_mode)) return refuse(EntryCheck::Refused, "a directory, not an audio file");
  if (S_ISFIFO(st.st_mode))
    return refuse(EntryCheck::Refused, "a FIFO (named pipe), not a file: reading it could wait forever");
  if (S_ISSOCK(st.st_mode)) return refuse(EntryCheck::Refused, "a socket, not a file");
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
    return refuse(EntryCheck::Refused, "a device, not a file: reading it might never end");
  return refuse(EntryCheck::Refused, "not a regular file");
}

void refuse_unless_file(const std::string& path) {
  const EntryCheck c = check_entry(path);
  if (c.kind == EntryCheck::Refused) throw Error(ErrorKind::Input, path + ": " + c.why);
}

bool has_audio_extension(const std::string& name) {
  std::string ext = fs::path(name).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  return kAudioExtensions.count(ext) > 0;
}

WalkResult walk_directory(const std::string& dir) {
  WalkResult r;
  std::string root = absolute_path(dir);
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  using Id = std::pair<dev_t, ino_t>;
  std::set<Id> dirs, files, ancestors;
  struct stat st{};
  if (const int err = stat_of(root, st, true); err != 0)
    throw Error(ErrorKind::Input, dir + ": cannot list: " + std::strerror(err));
  dirs.insert({st.st_dev, st.st_ino});
  // The folders that hold the corpus: a link to one of them (`..`, `/`) would walk all around it.
  for (fs::path p = fs::path(root).parent_path();; p = p.parent_path()) {
    struct stat a{};
    if (stat_of(p.string(), a, true) == 0) ancestors.insert({a.st_dev, a.st_ino});
    if (p == p.root_path() || p.empty()) break;
  }
  std::vector<std::string> links;  // met in the walk of real folders, followed after it
  // Depth first, names sorted: the same tree always gives the same first names.
  auto walk_real = [&](const std::string& top) {
    std::vector<std::string> stack{top};
    while (!stack.empty()) {
      const std::string d = stack.back();
      stack.pop_back();
      DIR* h = ::opendir(d.c_str());
      if (!h) {
        const int err = errno;
        if (errno_kind(err, ErrorKind::Input) == ErrorKind::Environment)
          throw sys_error(err, ErrorKind::Input, d, "cannot list");
        if (d == root) throw Error(ErrorKind::Input, d + ": cannot list: " + std::strerror(err));
        r.refused.push_back(d + ": cannot list this folder: " + std::strerror(err));
        continue;
      }
      std::vector<std::string> names;
      errno = 0;
      while (const dirent* e = ::readdir(h)) {
        const std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
      }
      const int err = errno;
      ::closedir(h);
      if (err) throw sys_error(err, ErrorKind::Input, d, "cannot list");
      std::sort(names.begin(), names.end());
      std::vector<std::string> subdirs;
      for (const std::string& n : names) {
        const std::string child = d + "/" + n;
        struct stat cs{};
        // Every name the folder lists is planned or said: only one removed meanwhile goes in silence.
        if (const int err = stat_of(child, cs, false); err != 0) {
          if (err == ENOENT) continue;  // gone meanwhile
          if (err == EACCES) {  // a folder that can be listed but not searched (r--): none of its entries
            r.refused.push_back(d + ": cannot look into this folder (" + std::strerror(err) + "): its " +
                                std::to_string(names.size()) + " entries are not planned");
            break;
          }
          // (ENAMETOOLONG: a path past PATH_MAX. Refused whatever its name: one that is not audio
          // may be a folder of it, and nothing under it could be read by its path either.)
          r.refused.push_back(child + ": cannot look at it: " + std::strerror(err));
          continue;
        }
        if (S_ISDIR(cs.st_mode)) {
          if (dirs.insert({cs.st_dev, cs.st_ino}).second) subdirs.push_back(child);
          else ++r.repeated_dirs;  // a bind mount: one folder under two names
        } else if (S_ISLNK(cs.st_mode)) {
          links.push_back(child);
        } else if (has_audio_extension(n)) {
          if (!S_ISREG(cs.st_mode)) r.files.push_back(child);  // check_entry refuses it by name
          else if (files.insert({cs.st_dev, cs.st_ino}).second) r.files.push_back(child);
          else ++r.repeated_files;
        }
      }
      for (auto it = subdirs.rbegin(); it != subdirs.rend(); ++it) stack.push_back(*it);
    }
  };
  walk_real(root);
  // Links last, so a folder or file is listed under its real name when it has one in the tree.
  for (size_t i = 0; i < links.size(); ++i) {
    const std::string l = links[i];  // a copy: walk_real may grow `links`
    const bool audio = has_audio_extension(fs::path(l).filename().string());
    struct stat ts{};
    if (const int err = stat_of(l, ts, true); err != 0) {
      if (audio) r.files.push_back(l);  // check_entry says what is wrong with it
      else
        r.notes.push_back(l + ": not followed: " +
                          (err == ELOOP    ? std::string("a loop of symbolic links")
                           : err == ENOENT ? "a dangling symbolic link (to '" + link_target(l) + "')"
                                           : "a link to '" + link_target(l) + "': " + std::strerror(err)));
      continue;
    }
    if (S_ISDIR(ts.st_mode)) {
      if (ancestors.count({ts.st_dev, ts.st_ino}))
        r.notes.push_back(l + ": not followed: a link to '" + link_target(l) +
                          "', a folder that holds the whole corpus");
      else if (dirs.insert({ts.st_dev, ts.st_ino}).second) walk_real(l);
      else ++r.repeated_dirs;
    } else if (audio) {
      if (!S_ISREG(ts.st_mode)) r.files.push_back(l);
      else if (files.insert({ts.st_dev, ts.st_ino}).second) r.files.push_back(l);
      else ++r.repeated_files;
    }
  }
  std::sort(r.files.begin(), r.files.end());
  return r;
}

}  // namespace mimi::app::dataset
