// A shard's journal: one JSON line per finished item (ok or error) after a "begin" line that
// says which settings the shard is run with; and the paths of a shard's files. Read by the worker
// (ShardWriter resumes from it), status (what is left to run) and verify.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codec/error.h"

namespace mimi::app::dataset {

// The one setting a journal or a .done may lack: in an output whose dataset.json has none, made
// before the config was fingerprinted (its shards were begun or finished without it).
inline const std::string kOptionalDoneField = "config_fingerprint";

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
// The entries of a finished shard's index / errors files; parse_json_lines: of such a file's text
// already read (`path` names it in errors), so a reader that also hashes it reads it once.
std::vector<nlohmann::json> read_json_lines(const std::string& path);
std::vector<nlohmann::json> parse_json_lines(const std::vector<uint8_t>& text, const std::string& path);
// Parts of journal_mismatch, for the writer resuming a journal: whether a "begin" line agrees with
// a header, whether a journal's text holds a complete line after its "begin" line (ending at
// `from`), and the refusal of a journal that holds work of other settings (naming them; exit 4
// for other weights or config, else 2).
bool journal_agrees(const nlohmann::json& begin, const nlohmann::json& header);
bool holds_records(const std::string& text, size_t from);
Error journal_refusal(const std::string& journal, const nlohmann::json& begin, const nlohmann::json& header);
// 64 lowercase hex digits (a digest as the journal and .done record it)
bool is_sha256(const std::string& s);
// The file's text, or "" when there is none yet (a shard's first run has no journal).
std::string read_file_or_empty(const std::string& path);

}  // namespace mimi::app::dataset
