#include "app/dataset/shard_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/dataset/plan.h"
#include "codec/sha256.h"
#include "app/dataset/tar.h"
#include "app/file_io.h"
#include "app/json_bytes.h"
#include "app/progress.h"
#include "codec/error.h"

namespace mimi::app::dataset {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& what, const char* op) {
  throw sys_error(errno, ErrorKind::Output, what, std::string(op) + " failed");  // EMFILE: the machine (75)
}

void fsync_dir(const std::string& file) {
  const std::string dir = fs::path(file).parent_path().string();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: some file systems refuse fsync on directories
  ::close(fd);
}

uint64_t file_size(int fd, const std::string& what) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) fail(what, "stat");
  return uint64_t(st.st_size);
}

// The file's text, or "" when there is none yet (a shard's first run has no journal).
std::string read_all(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "";
  const std::vector<uint8_t> b = read_input(path);
  return {b.begin(), b.end()};
}

void write_text(const std::string& path, const std::string& text) {
  write_output(path, std::vector<uint8_t>(text.begin(), text.end()), true);
}

}  // namespace

// The path is bytes (put_path); the message is free text, dumped with json_dump (never a type_error).
json JournalEntry::to_json() const {
  if (ok)
    return {{"k", "ok"}, {"i", index}, {"key", key}, {"offset", offset}, {"end", end}, {"frames", frames},
            {"samples", samples}};
  json j = {{"k", "err"}, {"i", index}, {"key", key}};
  put_path(j, "path", path);
  j["stage"] = stage;
  j["message"] = message;
  j["end"] = end;
  return j;
}

JournalEntry JournalEntry::from_json(const json& j) {
  JournalEntry e;
  e.ok = j.at("k") == "ok";
  if (!e.ok && j.at("k") != "err") throw std::runtime_error("unknown journal record");
  e.index = j.at("i").get<size_t>();
  e.key = j.at("key").get<std::string>();
  e.end = j.at("end").get<uint64_t>();
  if (e.ok) {
    e.offset = j.at("offset").get<uint64_t>();
    e.frames = j.at("frames").get<int64_t>();
    e.samples = j.at("samples").get<int64_t>();
  } else {
    e.path = get_path(j, "path");
    e.stage = j.at("stage").get<std::string>();
    e.message = j.at("message").get<std::string>();
  }
  return e;
}

ShardPaths::ShardPaths(const std::string& out_dir, int shard_index) : out(out_dir), shard(shard_index) {
  const std::string b = (fs::path(out) / "shards" / shard_name(shard)).string();
  tar = b + ".tar";
  partial = b + ".tar.partial";
  journal = b + ".journal";
  index = b + ".index.jsonl";
  errors = b + ".errors.jsonl";
  done = b + ".done";
  failed = b + ".failed";
  lock = b + ".lock";
  retry_tar = b + ".retry.tar";
}

json read_done(const ShardPaths& p, std::string* why, const json* dataset) {
  std::error_code ec;
  if (why) why->clear();
  if (!fs::exists(p.done, ec)) return nullptr;
  auto invalid = [&](const std::string& w) -> json {
    if (why) *why = p.done + ": " + w;
    return nullptr;
  };
  json d, ds;
  try {
    d = json::parse(read_all(p.done));
    if (!d.is_object()) return invalid("not a JSON object");
    if (!dataset) {
      const std::string dj = (fs::path(p.out) / "dataset.json").string();
      if (!fs::exists(dj, ec)) return invalid("there is no dataset.json beside it: not taken as done");
      ds = json::parse(read_all(dj));
      dataset = &ds;
    }
    if (fs::file_size(p.tar, ec) != d.at("tar_bytes").get<uint64_t>() || ec)
      return invalid("its tar is missing or not of the recorded size");
  } catch (const std::exception& e) {
    return invalid(std::string("damaged: ") + e.what());
  }
  for (const char* k : {"plan_sha256", "n_q", "weights_fingerprint", "shards"})
    if (d.value(k, json()) != dataset->value(k, json()))
      return invalid(std::string("made with another ") + k + " (" + json_dump(d.value(k, json())) + ") than " +
                     "dataset.json (" + json_dump(dataset->value(k, json())) + "): not taken as done");
  if (d.value("shard", -1) != p.shard) return invalid("made for shard " + json_dump(d.value("shard", json())));
  return d;
}

std::vector<json> read_json_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorKind::Input, path + ": cannot open");
  size_t n = 0;
  for (std::string line; std::getline(f, line);) {
    ++n;
    try {
      out.push_back(json::parse(line));
    } catch (const std::exception& e) {
      throw Error(ErrorKind::Input, path + ":" + std::to_string(n) + ": not JSON: " + e.what());
    }
  }
  return out;
}

ShardWriter::ShardWriter(const ShardPaths& paths, const json& header, int sync_items, double sync_seconds)
    : p_(paths), sync_items_(std::max(1, sync_items)), sync_seconds_(sync_seconds), last_sync_(monotonic_seconds()) {
  std::error_code ec;
  fs::create_directories(fs::path(p_.tar).parent_path(), ec);
  lock_fd_ = ::open(p_.lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) fail(p_.lock, "open");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      throw Error(ErrorKind::Output, p_.lock + ": another worker is writing this shard right now");
    fail(p_.lock, "lock");
  }
  resume(header);
}

ShardWriter::~ShardWriter() {
  if (tar_fd_ >= 0) ::close(tar_fd_);
  if (journal_fd_ >= 0) ::close(journal_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

void ShardWriter::resume(const json& header) {
  // The journal's complete, well-formed, consecutive lines; anything after them is cut off.
  const std::string text = read_all(p_.journal);
  uint64_t good = 0, end = 0;
  bool begun = false;
  size_t pos = 0;
  for (size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    json j;
    try {
      j = json::parse(text.substr(pos, nl - pos));
    } catch (const std::exception&) {
      break;
    }
    if (!begun) {
      if (j.value("k", "") != "begin") break;
      json want = header, got = j;
      want.erase("k"), got.erase("k"), got.erase("t");
      if (got != want)
        throw Error(ErrorKind::Usage, p_.journal + ": this shard was begun with other settings (" + json_dump(j) +
                                          "); remove its files to start it over");
      begun = true;
      begun_at_ = j.value("t", 0.0);
      header_end_ = nl + 1;
    } else if (j.value("k", "") == "sealed") {
      if (j.value("size", uint64_t(0)) != end + 2 * kTarBlock) break;
      sealed_ = true;
    } else {
      JournalEntry e;
      try {
        e = JournalEntry::from_json(j);
      } catch (const std::exception&) {
        break;
      }
      if (e.index != next_ || sealed_) break;
      end = e.end;
      errors_ += !e.ok;
      entries_.push_back(std::move(e));
      line_end_.push_back(nl + 1);
      ++next_;
    }
    good = nl + 1;
  }
  if (sealed_) {
    // Killed while finishing: the tar is complete under one of its two names.
    std::error_code ec;
    if (fs::exists(p_.partial, ec) && fs::file_size(p_.partial, ec) == end + 2 * kTarBlock) {
      if (::rename(p_.partial.c_str(), p_.tar.c_str()) != 0) fail(p_.tar, "rename");
      fsync_dir(p_.tar);
    }
    if (fs::file_size(p_.tar, ec) == end + 2 * kTarBlock && !ec) {
      tar_size_ = end + 2 * kTarBlock;
      return;
    }
    sealed_ = false;  // the tar is gone: redo the shard from the start
    good = 0, end = 0, next_ = 0, errors_ = 0, begun = false;
    entries_.clear();
    line_end_.clear();
  }
  tar_fd_ = ::open(p_.partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (tar_fd_ < 0) fail(p_.partial, "open");
  if (file_size(tar_fd_, p_.partial) < end) {  // the tar lost bytes the journal covers: start over
    good = 0, end = 0, next_ = 0, errors_ = 0, begun = false;
    entries_.clear();
    line_end_.clear();
  }
  if (::ftruncate(tar_fd_, off_t(end)) != 0) fail(p_.partial, "truncate");
  if (::lseek(tar_fd_, off_t(end), SEEK_SET) < 0) fail(p_.partial, "seek");
  tar_size_ = end;
  journal_fd_ = ::open(p_.journal.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (journal_fd_ < 0) fail(p_.journal, "open");
  if (::ftruncate(journal_fd_, off_t(good)) != 0) fail(p_.journal, "truncate");
  if (::lseek(journal_fd_, off_t(good), SEEK_SET) < 0) fail(p_.journal, "seek");
  journal_bytes_ = good;
  if (!begun) {
    json b = header;
    b["k"] = "begin";
    b["t"] = begun_at_ = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const std::string line = json_dump(b) + "\n";
    write_all(journal_fd_, line.data(), line.size(), p_.journal);
    if (::fdatasync(journal_fd_) != 0) fail(p_.journal, "fsync");
    fsync_dir(p_.journal);
    journal_bytes_ = header_end_ = line.size();
  }
}

void ShardWriter::add_item(size_t index, const std::string& key, const std::vector<uint8_t>& members, int64_t frames,
                           int64_t samples) {
  if (index != next_ || sealed_) throw Error(ErrorKind::Internal, "shard items out of order");
  write_all(tar_fd_, members.data(), members.size(), p_.partial);
  JournalEntry e;
  e.index = index;
  e.key = key;
  e.offset = tar_size_;
  tar_size_ += members.size();
  e.end = tar_size_;
  e.frames = frames;
  e.samples = samples;
  record(std::move(e));
}

void ShardWriter::add_error(size_t index, const std::string& key, const std::string& path, const std::string& stage,
                            const std::string& message) {
  if (index != next_ || sealed_) throw Error(ErrorKind::Internal, "shard items out of order");
  JournalEntry e;
  e.index = index;
  e.ok = false;
  e.key = key;
  e.path = path;
  e.stage = stage;
  e.message = message;
  e.end = tar_size_;
  ++errors_;
  record(std::move(e));
}

// The item is done (in the tar, or as an error): its journal line is queued, and written with the
// next batch.
void ShardWriter::record(JournalEntry e) {
  pend(e);
  entries_.push_back(std::move(e));
  ++next_;
  maybe_sync();
}

void ShardWriter::pend(const JournalEntry& e) {
  const std::string line = json_dump(e.to_json()) + "\n";
  pending_ += line;
  journal_bytes_ += line.size();
  line_end_.push_back(journal_bytes_);
}

void ShardWriter::rewind(size_t index) {
  if (sealed_ || index > entries_.size()) throw Error(ErrorKind::Internal, "cannot rewind a sealed shard");
  sync();
  const uint64_t tar_end = index == 0 ? 0 : entries_[index - 1].end;
  const uint64_t journal_end = index == 0 ? header_end_ : line_end_[index - 1];
  // The journal first: it must never cover bytes the tar no longer has.
  if (::ftruncate(journal_fd_, off_t(journal_end)) != 0 || ::fdatasync(journal_fd_) != 0) fail(p_.journal, "truncate");
  if (::lseek(journal_fd_, off_t(journal_end), SEEK_SET) < 0) fail(p_.journal, "seek");
  if (::ftruncate(tar_fd_, off_t(tar_end)) != 0) fail(p_.partial, "truncate");
  if (::lseek(tar_fd_, off_t(tar_end), SEEK_SET) < 0) fail(p_.partial, "seek");
  entries_.resize(index);
  line_end_.resize(index);
  journal_bytes_ = journal_end;
  tar_size_ = tar_end;
  next_ = index;
  errors_ = 0;
  for (const JournalEntry& e : entries_) errors_ += !e.ok;
}

void ShardWriter::maybe_sync() {
  if (++unsynced_ >= size_t(sync_items_) || monotonic_seconds() - last_sync_ >= sync_seconds_) sync();
}

void ShardWriter::sync() {
  if (pending_.empty()) return;
  // The tar first: a journal line never covers bytes that could still be lost.
  if (::fdatasync(tar_fd_) != 0) fail(p_.partial, "fsync");
  journal_line(json());
  unsynced_ = 0;
  last_sync_ = monotonic_seconds();
}

void ShardWriter::journal_line(const json& j) {
  if (!j.is_null()) pending_ += json_dump(j) + "\n";
  write_all(journal_fd_, pending_.data(), pending_.size(), p_.journal);
  if (::fdatasync(journal_fd_) != 0) fail(p_.journal, "fsync");
  pending_.clear();
}

json ShardWriter::finish(const json& extra) {
  if (!sealed_) {
    sync();
    const std::vector<uint8_t> end = tar_end();
    write_all(tar_fd_, end.data(), end.size(), p_.partial);
    if (::fsync(tar_fd_) != 0) fail(p_.partial, "fsync");
    ::close(tar_fd_);
    tar_fd_ = -1;
    tar_size_ += end.size();
    journal_line({{"k", "sealed"}, {"size", tar_size_}});
    if (::rename(p_.partial.c_str(), p_.tar.c_str()) != 0) fail(p_.tar, "rename");
    fsync_dir(p_.tar);
    sealed_ = true;
  }
  std::string index, errors;
  size_t ok = 0;
  int64_t samples = 0, frames = 0;
  for (const JournalEntry& e : entries_) {
    if (e.ok) {
      index += json_dump({{"key", e.key}, {"offset", e.offset}, {"size", e.end - e.offset}, {"frames", e.frames},
                          {"samples", e.samples}}) +
               "\n";
      ++ok;
      samples += e.samples;
      frames += e.frames;
    } else {
      json r = {{"key", e.key}};
      put_path(r, "path", e.path);
      r["stage"] = e.stage;
      r["message"] = e.message;
      errors += json_dump(r) + "\n";
    }
  }
  write_text(p_.index, index);
  write_text(p_.errors, errors);
  json done = extra;
  done["items"] = entries_.size();
  done["ok"] = ok;
  done["errors"] = entries_.size() - ok;
  done["samples"] = samples;
  done["frames"] = frames;
  done["tar_bytes"] = tar_size_;
  done["tar_sha256"] = sha256_file(p_.tar);
  write_text(p_.done, json_dump(done, 1) + "\n");  // last: the shard is done once this exists
  fsync_dir(p_.done);
  if (journal_fd_ >= 0) ::close(journal_fd_);
  journal_fd_ = -1;
  std::error_code ec;
  fs::remove(p_.journal, ec);
  fs::remove(p_.failed, ec);
  fs::remove(p_.retry_tar, ec);
  return done;
}

}  // namespace mimi::app::dataset
