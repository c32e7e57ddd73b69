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

// A shard journal's complete, well-formed, consecutive lines, as a resume believes them (nothing
// after the first line that breaks the sequence is): the "begin" header, the item records and the
// "sealed" line. A journal begun with another `header` throws journal_refusal when it holds
// records; one that holds none reads as not begun.
struct JournalRead {
  bool begun = false, sealed = false;
  double begun_at = 0;
  uint64_t header_end = 0;             // the journal's length after the "begin" line
  uint64_t good = 0;                   // ... after the last line believed
  uint64_t end = 0;                    // the tar offset after the last record
  std::vector<JournalEntry> entries;   // records 0..n-1, in order
  std::vector<uint64_t> line_end;      // per entry: the journal's length after its line
};
JournalRead read_journal_text(const std::string& text, const nlohmann::json& header, const std::string& journal);

// How many of `entries` (from the first) the tar open as `fd` bears out: each record is what the
// tar holds at its place (its two members, names, offsets, frames, counts and the sha256 of its
// bytes). Throws for the machine's read failures only.
size_t records_the_tar_bears_out(const std::vector<JournalEntry>& entries, int fd, const std::string& what);

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
