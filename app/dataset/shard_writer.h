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
#include <functional>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/dataset/done_record.h"
#include "app/dataset/journal.h"

namespace mimi::app::dataset {

class ShardWriter {
 public:
  // Takes the shard's lock (Error(Output) when another worker holds it) and resumes its journal.
  // `header` describes the run (plan digest, n_q, weights): a journal begun with another header
  // is refused (Error(Usage)) when it holds work, begun anew when it holds none.
  ShardWriter(const ShardPaths& paths, const nlohmann::json& header, int sync_items, double sync_seconds);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  size_t next_index() const { return next_; }
  const std::vector<JournalEntry>& entries() const { return entries_; }
  size_t errors() const { return errors_; }
  bool sealed() const { return sealed_; }  // the tar is complete; only finish() is left
  double begun_at() const { return begun_at_; }  // Unix time the shard's first run began

  // `f` runs once, before this writer records its first item, error or seal (and may throw: then
  // nothing is recorded): the output's dataset.json is written when work is, not before.
  void before_first_record(std::function<void()> f) { before_record_ = std::move(f); }

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
  void run_before_record();

  std::function<void()> before_record_;
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
