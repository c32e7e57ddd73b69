#include "codec/prepared_weights.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "codec/error.h"
#include "codec/names.h"
#include "codec/sha256.h"

namespace mimi {
namespace {

using nlohmann::json;

constexpr char kMagic[8] = {'M', 'I', 'M', 'I', 'P', 'W', '0', '1'};
// 2: entries are written only for settled identities (an entry of version 1 may record one that
// could not tell a change within the same second)
constexpr int kVersion = 2;
constexpr size_t kPrefix = 8 + 8 + 32;  // magic, header bytes, header digest
constexpr size_t kPage = 4096, kAlign = 64;
constexpr const char* kPrefixName = "weights-";
constexpr const char* kSuffix = ".mimipw";

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) h += d[c >> 4], h += d[c & 15];
  return h;
}

json identity_json(const SourceIdentity& id) {
  return {{"dev", id.dev}, {"ino", id.ino}, {"size", id.size}, {"mtime_ns", id.mtime_ns}, {"ctime_ns", id.ctime_ns}};
}

// The tensors a prepared model holds, by name and shape: the spec's, less the load's own
// cluster_usage, plus each codebook's squared norms.
std::map<std::string, Shape> expected_tensors(const Config& cfg) {
  std::map<std::string, Shape> want;
  for (const TensorSpec& s : mimi_tensor_specs(cfg)) {
    if (s.kind == "cluster_usage") {
      const std::string p = s.name.substr(0, s.name.size() - std::string("cluster_usage").size());
      want[p + "sq_norm"] = {cfg.bins};
      continue;
    }
    want[s.name] = s.shape;
  }
  return want;
}

// Reads exactly n bytes at `at`; false at an early end of file.
bool read_at(int fd, void* dst, size_t n, uint64_t at, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, off_t(at));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw sys_error(errno, ErrorKind::Weights, path, "cannot read the prepared weights");
    if (r == 0) return false;
    p += r, n -= size_t(r), at += uint64_t(r);
  }
  return true;
}

void write_all(int fd, const void* src, size_t n, const std::string& path) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw sys_error(errno, ErrorKind::Output, path, "cannot write the prepared weights");
    p += w, n -= size_t(w);
  }
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Removes temporaries of processes that are gone, and the oldest entries past `keep` (never
// `fresh`, the one just written). Best effort: a folder shared with other users may refuse.
void tidy(const std::string& dir, const std::string& fresh, int keep) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::pair<int64_t, std::string>> entries;  // (mtime, name)
  const std::string fresh_name = fresh.substr(fresh.find_last_of('/') + 1);
  for (dirent* e; (e = ::readdir(d));) {
    const std::string n = e->d_name;
    struct stat st {};
    if (::fstatat(::dirfd(d), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    const int64_t mtime = int64_t(st.st_mtim.tv_sec);
    if (n.rfind(std::string(".") + kPrefixName, 0) == 0 && n.find(".tmp.") != std::string::npos) {
      // ".weights-KEY.mimipw.tmp.PID.N": its writer's pid; gone (on this host) and old, it is litter
      const long pid = std::strtol(n.c_str() + n.find(".tmp.") + 5, nullptr, 10);
      if (pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH && mtime + 60 < int64_t(::time(nullptr)))
        ::unlinkat(::dirfd(d), n.c_str(), 0);
      continue;
    }
    if (n.rfind(kPrefixName, 0) == 0 && n.size() > std::strlen(kSuffix) &&
        n.compare(n.size() - std::strlen(kSuffix), std::string::npos, kSuffix) == 0 && n != fresh_name)
      entries.emplace_back(mtime, n);
  }
  std::sort(entries.begin(), entries.end(), std::greater<>());
  for (size_t i = size_t(std::max(keep - 1, 0)); i < entries.size(); ++i) ::unlinkat(::dirfd(d), entries[i].second.c_str(), 0);
  ::closedir(d);
}

}  // namespace

std::optional<SourceIdentity> SourceIdentity::of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  SourceIdentity id;
  id.dev = uint64_t(st.st_dev), id.ino = uint64_t(st.st_ino), id.size = uint64_t(st.st_size);
  id.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  id.ctime_ns = int64_t(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return id;
}

bool SourceIdentity::settled(int64_t now_ns) const {
  const bool whole_seconds = mtime_ns % 1000000000 == 0 && ctime_ns % 1000000000 == 0;
  const int64_t tick = whole_seconds ? 2000000000 : 100000000;
  return std::max(mtime_ns, ctime_ns) <= now_ns - tick;
}

std::string prepared_path(const std::string& dir, const SourceIdentity& id, const Config& cfg) {
  // (the user's too: each user maps only entries of their own, see map_prepared)
  const std::string key = "v" + std::to_string(kVersion) + "|" + identity_json(id).dump() + "|" + cfg.to_json().dump() +
                          "|" + std::to_string(::geteuid());
  return dir + (dir.empty() || dir.back() == '/' ? "" : "/") + kPrefixName + sha256_hex(key.data(), key.size()).substr(0, 32) +
         kSuffix;
}

std::shared_ptr<const Model> map_prepared(const std::string& path, const SourceIdentity& id, const Config& cfg,
                                          const std::string& source, std::string* why) {
  auto miss = [&](const std::string& w) -> std::shared_ptr<const Model> {
    if (why) *why = w;
    return nullptr;
  };
  Fd f;
  // O_NONBLOCK: an entry that is a FIFO (planted in a shared folder, or made by mistake) must not
  // wait for a writer forever - it is opened at once and refused below as not a regular file;
  // O_NOFOLLOW: entries are never links (one planted would point this run at another file).
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (f.fd < 0) {
    const int err = errno;
    if (err == ELOOP) return miss("a symbolic link, not an entry this run wrote");
    if (err == EMFILE || err == ENFILE || err == ENOMEM) throw sys_error(err, ErrorKind::Weights, path, "cannot open");
    return miss(err == ENOENT ? "not built yet" : std::string("cannot open: ") + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) return miss("not a regular file");
  // Only an entry this user wrote, and that no one else can write, is trusted to hold the weights
  // (a shared cache folder must not let another user choose this run's model).
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) return miss("not this user's own read-only file");
  const uint64_t size = uint64_t(st.st_size);
  char prefix[kPrefix];
  if (size < kPrefix || !read_at(f.fd, prefix, kPrefix, 0, path)) return miss("truncated (no header)");
  if (std::memcmp(prefix, kMagic, 8) != 0) return miss("not a prepared-weights file of this version");
  uint64_t hbytes = 0;
  std::memcpy(&hbytes, prefix + 8, 8);
  if (hbytes > (uint64_t(64) << 20) || kPrefix + hbytes > size) return miss("truncated or damaged header");
  std::string text(size_t(hbytes), '\0');
  if (!read_at(f.fd, text.data(), text.size(), kPrefix, path)) return miss("truncated header");
  Sha256 digest;
  digest.update(text.data(), text.size());
  const std::string want_digest = digest.hex();
  std::string got_digest;
  for (int i = 0; i < 32; ++i) got_digest += "0123456789abcdef"[uint8_t(prefix[16 + i]) >> 4], got_digest += "0123456789abcdef"[uint8_t(prefix[16 + i]) & 15];
  if (got_digest != want_digest) return miss("its header is damaged (digest)");
  const json h = json::parse(text, nullptr, false);
  if (!h.is_object() || h.value("version", 0) != kVersion) return miss("another format version");
  if (!h.contains("source") || h["source"] != identity_json(id)) return miss("made from another version of the weights file");
  if (!h.contains("config") || h["config"] != cfg.to_json()) return miss("made for another config");
  const uint64_t data_at = round_up(kPrefix + hbytes, kPage);
  if (!h.contains("data_bytes") || !h["data_bytes"].is_number_unsigned() || data_at + h["data_bytes"].get<uint64_t>() != size)
    return miss("truncated or extended (its size is not the recorded one)");
  const uint64_t data_bytes = h["data_bytes"].get<uint64_t>();
  Dialect dialect;
  const std::string dn = h.value("dialect", "");
  if (dn == dialect_name(Dialect::Moshi)) dialect = Dialect::Moshi;
  else if (dn == dialect_name(Dialect::HuggingFace)) dialect = Dialect::HuggingFace;
  else return miss("no dialect");
  if (!h.contains("fingerprint") || !h["fingerprint"].is_string() || !h.contains("tensors") || !h["tensors"].is_array())
    return miss("no fingerprint or tensor table");
  // Every tensor the model needs, once, with its shape, aligned, within the data.
  std::map<std::string, Shape> want = expected_tensors(cfg);
  std::map<std::string, std::pair<uint64_t, Shape>> table;
  for (const json& e : h["tensors"]) {
    if (!e.is_array() || e.size() != 3 || !e[0].is_string() || !e[1].is_number_unsigned() || !e[2].is_array())
      return miss("a damaged tensor table");
    const std::string name = e[0].get<std::string>();
    const uint64_t off = e[1].get<uint64_t>();
    Shape shape;
    for (const json& d : e[2]) {
      if (!d.is_number_unsigned()) return miss("a damaged tensor table");
      shape.push_back(d.get<int64_t>());
    }
    const auto w = want.find(name);
    if (w == want.end() || w->second != shape || table.count(name)) return miss("its tensors are not this config's");
    if (off % kAlign || off > data_bytes || uint64_t(numel(shape)) * 4 > data_bytes - off) return miss("a tensor out of bounds");
    table[name] = {off, shape};
  }
  if (table.size() != want.size()) return miss("tensors are missing");
  // Mapped shared and read-only: the page cache's pages, the same for every process using them.
  void* p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_SHARED, f.fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    if (err == ENOMEM || err == EAGAIN) throw sys_error(err, ErrorKind::Weights, path, "cannot map");
    return miss(std::string("cannot map: ") + std::strerror(err));
  }
  const size_t map_bytes = size_t(size);
  std::shared_ptr<const void> mapping(p, [map_bytes](const void* q) { ::munmap(const_cast<void*>(q), map_bytes); });
  const auto* base = static_cast<const char*>(p) + data_at;
  TensorMap t;
  for (const auto& [name, entry] : table) {
    Tensor x;
    x.shape = entry.second;
    x.data = reinterpret_cast<const float*>(base + entry.first);
    x.owner = mapping;
    t.emplace(name, std::move(x));
  }
  auto m = std::make_shared<Model>();
  m->cfg = cfg;
  m->dialect = dialect;
  m->source = source;
  m->fingerprint = h["fingerprint"].get<std::string>();
  m->has_encoder = m->has_decoder = true;
  assemble_model(*m, t);
  // In use: an old entry's time is renewed, so the folder's tidying removes the unused ones first
  // (best effort, at most hourly: a read-only folder is fine).
  if (int64_t(st.st_mtim.tv_sec) + 3600 < int64_t(::time(nullptr))) ::futimens(f.fd, nullptr);
  return m;
}

void write_prepared(const std::string& path, const SourceIdentity& id, const Model& m, const TensorMap& t,
                    const std::string& source, int keep) {
  json tensors = json::array();
  uint64_t at = 0;
  std::vector<std::pair<uint64_t, const Tensor*>> order;
  for (const auto& [name, x] : t) {
    if (x.empty()) continue;
    tensors.push_back({name, at, x.shape});
    order.emplace_back(at, &x);
    at = round_up(at + uint64_t(x.size()) * 4, kAlign);
  }
  const json h = {{"format", "mimi prepared weights"},
                  {"version", kVersion},
                  {"source", identity_json(id)},
                  {"source_path_hex", hex(source)},
                  {"fingerprint", m.fingerprint},
                  {"dialect", dialect_name(m.dialect)},
                  {"config", m.cfg.to_json()},
                  {"tensors", tensors},
                  {"data_bytes", at}};
  const std::string text = h.dump();
  std::string head(kPrefix, '\0');
  std::memcpy(head.data(), kMagic, 8);
  const uint64_t hbytes = text.size();
  std::memcpy(head.data() + 8, &hbytes, 8);
  Sha256 digest;
  digest.update(text.data(), text.size());
  const std::string dh = digest.hex();
  for (int i = 0; i < 32; ++i) head[size_t(16 + i)] = char(std::stoi(dh.substr(size_t(2 * i), 2), nullptr, 16));
  head += text;
  head.resize(round_up(head.size(), kPage), '\0');

  static std::atomic<int> counter{0};
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const std::string tmp = dir + "/." + path.substr(slash == std::string::npos ? 0 : slash + 1) + ".tmp." +
                          std::to_string(::getpid()) + "." + std::to_string(counter++);
  Fd f;
  f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (f.fd < 0) throw sys_error(errno, ErrorKind::Output, tmp, "cannot create");
  try {
    write_all(f.fd, head.data(), head.size(), tmp);
    static const char zeros[kAlign] = {};
    uint64_t written = 0;
    for (const auto& [off, x] : order) {
      if (off > written) write_all(f.fd, zeros, size_t(off - written), tmp);
      write_all(f.fd, x->data, size_t(x->size()) * 4, tmp);
      written = off + uint64_t(x->size()) * 4;
    }
    if (at > written) write_all(f.fd, zeros, size_t(at - written), tmp);
    // (synced before the rename: a crash never leaves a whole-looking file of missing pages)
    if (::fsync(f.fd) != 0) throw sys_error(errno, ErrorKind::Output, tmp, "cannot sync");
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw sys_error(errno, ErrorKind::Output, path, "cannot rename into place");
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  tidy(dir, path, keep);
}

}  // namespace mimi
