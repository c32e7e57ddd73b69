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
#include <optional>
#include <string>
#include <vector>

namespace mimi::app::dataset {

struct JournalEntry {
  size_t index = 0;  // in the shard's planned order
  bool ok = true;
  std::string key;
  uint64_t offset = 0, end = 0;  // ok: the tar offsets of its first header and after its last member
  int64_t frames = 0, samples = 0;
  // ok: sha256 of its bytes [offset, end) in the tar, so a resume believes the bytes too, not only
  // their structure ("" in journals written before it: structure only)
  std::string sha256;
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

struct Plan;

// What a reader knows of a finished shard to hold its .done record against; each fact is
// optional, and the more are given the more fields are checked against something outside the
// record.
struct DoneFacts {
  int shard = -1;
  const nlohmann::json* dataset = nullptr;  // OUT/dataset.json: plan, n_q, weights, shards, rates
  const Plan* plan = nullptr;               // plan.json: the shard's item count and planned hours
  std::optional<uint64_t> tar_bytes;        // the size of the tar on disk
  // From the shard's files (verify): the tar's digest, the index (lines, sums of frames and
  // samples), the errors file, the planned items' durations summed as the worker sums them.
  std::optional<std::string> tar_sha256;
  std::optional<int64_t> ok, errors, samples, frames;
  std::optional<double> planned_seconds;
};

// Every field of a .done record against the facts and against each other, each disagreement as
// "'FIELD' ...": a field that is missing or of the wrong type, counts that do not add up
// (ok + errors = items, frames against samples and the frame size, audio_seconds = samples / rate),
// values that differ from the facts, times that cannot be (started before 2001, finished before it
// began or in the future beyond kClockSkewSeconds), and a field the writer never writes. Empty
// when the record holds. The one list of what a .done says: finish() (with encode_shard's fields)
// writes it, and read_done and verify judge a record by it.
std::vector<std::string> done_problems(const nlohmann::json& done, const DoneFacts& facts);
// Clocks may disagree by this much: those of the nodes that begin and finish one shard, and of the
// node that writes a .done and the one that reads it. Generous on purpose: only impossible times
// are caught, so that a worker on a node whose clock is off never takes a good .done for invalid
// and redoes its shard.
constexpr double kClockSkewSeconds = 86400;

// The one judgement of a .done (the worker's skip, status and verify): a valid record, or null. Valid:
// it parses, its tar is there with the recorded size, and done_problems finds nothing against
// OUT/dataset.json (`dataset`, read from OUT when null: the plan, n_q and weights it was made for,
// its shard) and, when given, `plan` (the shard's item count and hours) - a .done left by a
// replaced plan or another run is not done, nor is one whose own numbers disagree (status would
// present them). `why` (when given) says why a .done that is there is not valid, naming every
// field that disagrees ("" when there is none).
nlohmann::json read_done(const ShardPaths& p, std::string* why = nullptr, const nlohmann::json* dataset = nullptr,
                         const Plan* plan = nullptr);

// The first line of a shard's journal for a run into an output whose dataset.json is `dataset`:
// the shard, and what every run of it must share with the first (shards, plan_sha256, n_q,
// weights_fingerprint, config_fingerprint; those `dataset` has: {shards, plan_sha256} gives the plan's part alone).
nlohmann::json journal_header(int shard, const nlohmann::json& dataset);
// A journal's "begin" line, or null (no journal, or none begun).
nlohmann::json journal_begin(const std::string& journal);
// The one check of a journal's "begin" line against a run's header (every field the header has),
// for the worker - before it loads a model, the plan's part; resuming, all of it - and for status
// deciding what is left to run: "" when they agree or the journal holds no item (the worker
// begins such a journal anew), else the worker's refusal (naming the journal and what to do).
std::string journal_mismatch(const std::string& journal, const nlohmann::json& begin, const nlohmann::json& header);
// Whether any shard of OUT/ holds a recorded item (or error, or seal): until one does, the output
// is bound to no settings (its dataset.json, if a failed first run left one, is replaced).
bool output_holds_records(const std::string& out);
// The entries of a finished shard's index / errors files.
std::vector<nlohmann::json> read_json_lines(const std::string& path);

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
