// `mimi dataset`: tokenize a corpus as shards of a fixed plan, one stateless "process shard i of
// n" command per worker under any scheduler (docs/DATASETS.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "app/dataset/plan.h"
#include "app/engine_io/pipeline.h"

namespace mimi::app::dataset {

struct EncodeShardOptions {
  std::string plan, shard, out;
  int n_q = 8;
  EngineSpec engine;
  // Not given: no limit; else "N" or "P%". Optional, not "" for none: an empty value (an unset shell
  // variable, --max-errors "$MAXERR") is a usage error, never a silent "no limit".
  std::optional<std::string> max_errors;
  bool retry_errors = false;
  int sync_items = 64;        // journal fsync batch
  double sync_seconds = 10;   // ... or this often
  int batch = 1;              // items encoded at once in the slots of one batched plan (app/dataset/slots.h)
  int readers = 2;            // with batch > 1: threads reading the items ahead of the slots (app/engine_io/read_ahead.h)
  bool quiet = false;
};
// Every setting that needs no model, checked before one is loaded (app/dataset/options.cpp):
// Error(Usage) for an empty --plan, --shard or -o, a bad --max-errors, --sync-items,
// --sync-seconds, --batch, --readers, --n-q.
void check_encode_options(const EncodeShardOptions& o);
// --max-errors: -1 when not given, else the most errors a shard of `items` items may have: a count
// of digits only ("10") or a percentage ("2%", "2.5%", at most 100%). Error(Usage) for anything
// else, the empty string, blanks, signs, exponents and hex ("", " 5", "+5", "1e1", "0x10") included.
// The one parser of the option.
double max_errors_limit(const std::optional<std::string>& text, size_t items);

// Returns the exit code (0: the shard is done). Throws Error for a failed shard (too many errors:
// Input), a device or write failure (Device / Output), bad settings (Usage / Weights).
int encode_shard(const EncodeShardOptions& o);

struct StatusOptions {
  std::string out;
  std::optional<std::string> plan;  // not given: the one OUT/dataset.json names (--plan '': a usage error)
  bool todo = false;
  std::string format = "table";  // table, json, ranges
};
int status(const StatusOptions& o);

struct VerifyOptions {
  std::string out;
  std::optional<std::string> plan;  // as for status
};
// Error(Usage) for an empty OUT or --plan, or a --format that is not table, json or ranges
// (app/dataset/options.cpp, with check_encode_options and check_plan_options).
void check_status_options(const StatusOptions& o);
void check_verify_options(const VerifyOptions& o);
// Exit 0 only when every shard is done and checks out; problems on stderr, Error(Input) at the end.
int verify(const VerifyOptions& o);

// "3,17-19" for sorted indices.
std::string ranges(const std::vector<int>& sorted);

// (app/dataset/dataset_json.cpp) OUT/dataset.json (Error(Usage) when there is none, Error(Input) when it is damaged), and the
// plan folder it names (Error(Input) when it names none).
nlohmann::json read_dataset_json(const std::string& out);
// status and verify read an output's files and its plan's: stdout or stderr opened by the shell on
// one of them (`status OUT >> OUT/shards/shard-00000.tar`) is refused, exit 5, before anything is
// written ("" for a folder not known yet).
void refuse_std_streams_onto_dataset(const std::string& out, const std::string& plan_dir);
std::string plan_named_by(const nlohmann::json& dataset, const std::string& out);

// The one decision whether OUT/ holds output of `plan`, asked by the worker, status and verify
// alike (so that status never lists a shard for resubmission that the worker will refuse): null
// when OUT has no dataset.json yet (no shard started), else OUT/dataset.json. Error(Usage) when
// OUT was made from another plan (the plan replaced with `plan --force`, or another --plan):
// nothing in it is this plan's, nothing of this plan may be written beside it (the two would mix),
// and nothing of it may be overwritten; the message names both plans and what to do.
nlohmann::json dataset_of_plan(const std::string& out, const Plan& plan);

}  // namespace mimi::app::dataset
