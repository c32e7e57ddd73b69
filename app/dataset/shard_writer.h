// One shard's output, written so that a killed worker resumes exactly where it stopped:
//   shard-NNNNN.tar.partial  the tar so far (append only)
//   shard-NNNNN.journal      one JSON line per finished item (ok or error) with the tar offset
//                            after it; a line is written only once the tar bytes it covers are
//                            fsynced, and lines are fsynced in batches
// On restart the tar is cut back to the last journaled offset and the work goes on from the next
// item: the same items give the same bytes, so the finished tar equals an uninterrupted run's.
// finish() seals the tar (end blocks, fsync, rename to shard-NNNNN.tar) and writes the index, the
// errors file and, last, shard-NNNNN.done. Nothing else is ever taken for done.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mimi::app::dataset {

struct JournalEntry {
  size_t index = 0;  // in the shard's planned order
  bool ok = true;
  std::string key;
  uint64_t offset = 0, end = 0;  // ok: the tar offsets of its first header and after its last member
  int64_t frames = 0, samples = 0;
  std::string path, stage, message;  // an error
  nlohmann::json to_json() const;
  static JournalEntry from_json(const nlohmann::json& j);
};

// Paths of a shard's files in OUT/shards/.
struct ShardPaths {
  std::string out;  // OUT/
  int shard = 0;
  std::string tar, partial, journal, index, errors, done, failed, lock, retry_tar;
  ShardPaths(const std::string& out, int shard);
};

// The one judgement of a .done (the worker's skip, status and verify): a valid record, or null. Valid:
// it parses, its tar is there with the recorded size, and it was made for this shard with the
// plan, n_q and weights of OUT/dataset.json (`dataset`, read from OUT when null) - a .done left by
// a replaced plan or another run is not done. `why` (when given) says why a .done that is there
// is not valid ("" when there is none).
nlohmann::json read_done(const ShardPaths& p, std::string* why = nullptr, const nlohmann::json* dataset = nullptr);
// The entries of a finished shard's index / errors files.
std::vector<nlohmann::json> read_json_lines(const std::string& path);

class ShardWriter {
 public:
  // Takes the shard's lock (Error(Output) when another worker holds it) and resumes its journal.
  // `header` describes the run (plan digest, n_q, weights): a journal begun with another header
  // is refused (Error(Usage)).
  ShardWriter(const ShardPaths& paths, const nlohmann::json& header, int sync_items, double sync_seconds);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  size_t next_index() const { return next_; }
  const std::vector<JournalEntry>& entries() const { return entries_; }
  size_t errors() const { return errors_; }
  bool sealed() const { return sealed_; }  // the tar is complete; only finish() is left
  double begun_at() const { return begun_at_; }  // Unix time the shard's first run began

  // Appends an item's members (whole ustar members) to the tar. Throws Error(Output).
  void add_item(size_t index, const std::string& key, const std::vector<uint8_t>& members, int64_t frames,
                int64_t samples);
  void add_error(size_t index, const std::string& key, const std::string& path, const std::string& stage,
                 const std::string& message);
  void sync();  // makes everything added so far durable
  // Forgets item `index` and all after it (tar and journal cut back): --retry-errors on a shard
  // that is not finished redoes it from its first failed item.
  void rewind(size_t index);

  // Seals the tar and writes index, errors and .done (with `extra` fields merged in). Returns the
  // .done record.
  nlohmann::json finish(const nlohmann::json& extra);
  const ShardPaths& paths() const { return p_; }

 private:
  void resume(const nlohmann::json& header);
  void journal_line(const nlohmann::json& j);
  void record(JournalEntry e);        // an item done: journal line queued, next index
  void pend(const JournalEntry& e);  // queues its journal line
  void maybe_sync();

  ShardPaths p_;
  int tar_fd_ = -1, journal_fd_ = -1, lock_fd_ = -1;
  uint64_t tar_size_ = 0;
  size_t next_ = 0, errors_ = 0, unsynced_ = 0;
  bool sealed_ = false;
  double begun_at_ = 0;
  std::string pending_;  // journal lines waiting for the tar fsync
  std::vector<JournalEntry> entries_;
  uint64_t journal_bytes_ = 0;      // the journal's length with the pending lines
  std::vector<uint64_t> line_end_;  // per entry: the journal's length after its line
  uint64_t header_end_ = 0;         // after the "begin" line
  int sync_items_;
  double sync_seconds_, last_sync_;
};

}  // namespace mimi::app::dataset
