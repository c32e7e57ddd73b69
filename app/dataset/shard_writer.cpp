#include "app/dataset/shard_writer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

#include "app/dataset/item_files.h"
#include "app/dataset/plan.h"
#include "app/dataset/tar.h"
#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "app/sys/progress.h"
#include "codec/error.h"
#include "codec/sha256.h"

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

}  // namespace

// How many of the journal's records (from the first) the tar in `fd` bears out. A record must be
// what the tar holds at its place: an item's two members (key.npy, key.json) with sound headers,
// from where the previous item ended to its own `end`, the .npy holding its `frames`; an error
// adds nothing to the tar. A journal edited or copied from elsewhere, or a tar rewritten under
// it, is believed only up to its first record that the tar contradicts.
size_t records_the_tar_bears_out(const std::vector<JournalEntry>& entries, int fd, const std::string& what) {
  constexpr uint64_t kMaxItemBytes = uint64_t(256) << 20;  // far above any item (codes of hours: MBs)
  uint64_t at = 0;
  std::vector<uint8_t> span;
  const std::vector<uint8_t> end_blocks = tar_end();
  for (size_t i = 0; i < entries.size(); ++i) {
    const JournalEntry& e = entries[i];
    if (!e.ok) {
      if (e.end != at) return i;
      continue;
    }
    if (e.offset != at || e.end <= e.offset || (e.end - e.offset) % kTarBlock != 0 || e.end - e.offset > kMaxItemBytes)
      return i;
    span.resize(size_t(e.end - e.offset));
    for (size_t got = 0; got < span.size();) {
      const ssize_t r = ::pread(fd, span.data() + got, span.size() - got, off_t(e.offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(what, "read");  // the machine's failure (EIO...), not a contradiction
      if (r == 0) return i;           // the tar ends before the record does
      got += size_t(r);
    }
    // its bytes as written (a bit flipped since, in any member, is caught here, not in verify's
    // view of a finished shard whose .done was computed over the damage)
    if (!e.sha256.empty() && sha256_hex(span.data(), span.size()) != e.sha256) return i;
    span.insert(span.end(), end_blocks.begin(), end_blocks.end());
    try {
      const std::vector<TarMember> m = read_tar(span, what);
      if (m.size() != 2 || m[0].name != e.key + ".npy" || m[1].name != e.key + ".json" || m[0].header_offset != 0 ||
          m[1].data_offset + (m[1].size + kTarBlock - 1) / kTarBlock * kTarBlock != e.end - e.offset)
        return i;
      if (parse_npy_int16(span.data() + m[0].data_offset, size_t(m[0].size), what).frames != e.frames) return i;
      // and every count the record carries that the item's own JSON member states (its samples
      // went into the index and .done unchecked: verify alone saw them, forever)
      const nlohmann::json rec = nlohmann::json::parse(span.begin() + std::ptrdiff_t(m[1].data_offset),
                                                       span.begin() + std::ptrdiff_t(m[1].data_offset + m[1].size), nullptr, false);
      if (!rec.is_object() || rec.value("key", "") != e.key || rec.value("frames", int64_t(-1)) != e.frames ||
          rec.value("samples", int64_t(-1)) != e.samples)
        return i;
    } catch (const Error& err) {
      if (err.kind() != ErrorKind::Input) throw;
      return i;
    }
    at = e.end;
  }
  return entries.size();
}

namespace {

void write_text(const std::string& path, const std::string& text) {
  write_output(path, std::vector<uint8_t>(text.begin(), text.end()), true);
}

}  // namespace

ShardWriter::ShardWriter(const ShardPaths& paths, const json& header, int sync_items, double sync_seconds)
    : p_(paths), sync_items_(std::max(1, sync_items)), sync_seconds_(sync_seconds), last_sync_(monotonic_seconds()) {
  std::error_code ec;
  fs::create_directories(fs::path(p_.tar).parent_path(), ec);  // its own error, not the lock's ENOENT after it
  if (ec) throw sys_error(ec.value(), ErrorKind::Output, fs::path(p_.tar).parent_path().string(), "cannot create the directory");
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

JournalRead read_journal_text(const std::string& text, const json& header, const std::string& journal) {
  // The journal's complete, well-formed, consecutive lines; anything after them is not believed.
  JournalRead r;
  size_t pos = 0;
  for (size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    json j;
    try {
      j = json::parse(text.substr(pos, nl - pos));
    } catch (const std::exception&) {
      break;
    }
    if (!r.begun) {
      if (j.value("k", "") != "begin") break;
      if (!journal_agrees(j, header)) {
        if (holds_records(text, nl + 1)) throw journal_refusal(journal, j, header);
        spdlog::info("{}: begun with other settings but holding no item: begun again with this run's", journal);
        break;  // (not begun: the journal and the tar start empty)
      }
      r.begun = true;
      r.begun_at = j.value("t", 0.0);
      r.header_end = nl + 1;
    } else if (j.value("k", "") == "sealed") {
      if (j.value("size", uint64_t(0)) != r.end + 2 * kTarBlock) break;
      r.sealed = true;
    } else {
      JournalEntry e;
      try {
        e = JournalEntry::from_json(j);
      } catch (const std::exception&) {
        break;
      }
      if (e.index != r.entries.size() || r.sealed) break;
      r.end = e.end;
      r.entries.push_back(std::move(e));
      r.line_end.push_back(nl + 1);
    }
    r.good = nl + 1;
  }
  return r;
}

void ShardWriter::resume(const json& header) {
  JournalRead jr = read_journal_text(read_file_or_empty(p_.journal), header, p_.journal);
  uint64_t good = jr.good, end = jr.end;
  bool begun = jr.begun;
  if (begun) begun_at_ = jr.begun_at, header_end_ = jr.header_end;
  sealed_ = jr.sealed;
  entries_ = std::move(jr.entries);
  line_end_ = std::move(jr.line_end);
  next_ = entries_.size();
  errors_ = size_t(std::count_if(entries_.begin(), entries_.end(), [](const JournalEntry& e) { return !e.ok; }));
  if (sealed_) {
    // Killed while finishing: the tar is complete under one of its two names.
    std::error_code ec;
    if (fs::exists(p_.partial, ec) && fs::file_size(p_.partial, ec) == end + 2 * kTarBlock) {
      if (::rename(p_.partial.c_str(), p_.tar.c_str()) != 0) fail(p_.tar, "rename");
      fsync_dir(p_.tar);
    }
    if (fs::file_size(p_.tar, ec) == end + 2 * kTarBlock && !ec) {
      const int fd = ::open(p_.tar.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) fail(p_.tar, "open");
      size_t agree = 0;
      try {
        agree = records_the_tar_bears_out(entries_, fd, p_.tar);
      } catch (...) {
        ::close(fd);
        throw;
      }
      ::close(fd);
      if (agree == entries_.size()) {
        tar_size_ = end + 2 * kTarBlock;
        return;
      }
      spdlog::warn("{}: journal record {} contradicts {}: the shard is done again", p_.journal, agree + 1, p_.tar);
    }
    sealed_ = false;  // the tar is gone (or not the journal's): redo the shard from the start
    good = 0, end = 0, next_ = 0, errors_ = 0, begun = false;
    entries_.clear();
    line_end_.clear();
  }
  std::error_code ec;
  const bool had_partial = fs::exists(p_.partial, ec);
  tar_fd_ = ::open(p_.partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (tar_fd_ < 0) fail(p_.partial, "open");
  // The journal's records the tar bears out are kept, the rest encoded again - also when the tar
  // lost bytes the journal covers or is gone, which is said (status counts only what is kept).
  if (const size_t agree = records_the_tar_bears_out(entries_, tar_fd_, p_.partial); agree < entries_.size()) {
    if (!had_partial)
      spdlog::warn("{}: missing, while {} records {} items in it: they are encoded again", p_.partial, p_.journal,
                   entries_.size());
    else
      spdlog::warn("{}: journal record {} contradicts {}: resuming before it", p_.journal, agree + 1, p_.partial);
    entries_.resize(agree);
    line_end_.resize(agree);
    next_ = agree;
    errors_ = size_t(std::count_if(entries_.begin(), entries_.end(), [](const JournalEntry& e) { return !e.ok; }));
    end = agree ? entries_[agree - 1].end : 0;
    good = agree ? line_end_[agree - 1] : header_end_;
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
  run_before_record();
  write_all(tar_fd_, members.data(), members.size(), p_.partial);
  JournalEntry e;
  e.index = index;
  e.key = key;
  e.offset = tar_size_;
  tar_size_ += members.size();
  e.end = tar_size_;
  e.frames = frames;
  e.samples = samples;
  e.sha256 = sha256_hex(members.data(), members.size());
  record(std::move(e));
}

void ShardWriter::add_error(size_t index, const std::string& key, const std::string& path, const std::string& stage,
                            const std::string& message) {
  if (index != next_ || sealed_) throw Error(ErrorKind::Internal, "shard items out of order");
  run_before_record();
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

void ShardWriter::run_before_record() {
  if (!before_record_) return;
  const std::function<void()> f = std::move(before_record_);
  before_record_ = nullptr;
  f();
}

json ShardWriter::finish(const json& extra) {
  run_before_record();  // (a shard of no items records its seal first)
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
  done["index_sha256"] = sha256_hex(index.data(), index.size());
  done["errors_sha256"] = sha256_hex(errors.data(), errors.size());
  seal_done_record(done);
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
