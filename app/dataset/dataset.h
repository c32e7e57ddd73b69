// `mimi dataset`: tokenize a corpus as shards of a fixed plan, one stateless "process shard i of
// n" command per worker under any scheduler (docs/DATASETS.md).
#pragma once

#include <string>
#include <vector>

#include "app/dataset/plan.h"
#include "app/pipeline.h"

namespace mimi::app::dataset {

struct EncodeShardOptions {
  std::string plan, shard, out;
  int n_q = 8;
  EngineSpec engine;
  std::string max_errors;  // "" = no limit; "N" or "P%"
  bool retry_errors = false;
  int sync_items = 64;        // journal fsync batch
  double sync_seconds = 10;   // ... or this often
  int batch = 1;              // items encoded at once in the slots of one batched plan (app/dataset/slots.h)
  int readers = 2;            // with batch > 1: threads reading the items ahead of the slots (app/read_ahead.h)
  bool quiet = false;
};
// Every setting that needs no model, checked before one is loaded (app/dataset/options.cpp):
// Error(Usage) for a bad --max-errors, --sync-items, --sync-seconds, --batch, --readers, --n-q.
void check_encode_options(const EncodeShardOptions& o);
// --max-errors: -1 for none, else the most errors a shard of `items` items may have ("10" or
// "2%"); Error(Usage) for anything else. The one parser of the option.
double max_errors_limit(const std::string& text, size_t items);

// Returns the exit code (0: the shard is done). Throws Error for a failed shard (too many errors:
// Input), a device or write failure (Device / Output), bad settings (Usage / Weights).
int encode_shard(const EncodeShardOptions& o);

struct StatusOptions {
  std::string out, plan;  // plan: "" = the one OUT/dataset.json names
  bool todo = false;
  std::string format = "table";  // table, json, ranges
};
int status(const StatusOptions& o);

struct VerifyOptions {
  std::string out, plan;
};
// Exit 0 only when every shard is done and checks out; problems on stderr, Error(Input) at the end.
int verify(const VerifyOptions& o);

// "3,17-19" for sorted indices.
std::string ranges(const std::vector<int>& sorted);

// OUT/dataset.json and the plan it names.
nlohmann::json read_dataset_json(const std::string& out);

}  // namespace mimi::app::dataset
