// Plans: a dataset's items cut once into N shards balanced by total duration (PLAN/plan.json and
// PLAN/shard-NNNNN.jsonl), and which shard a worker is.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "app/dataset/manifest.h"

namespace mimi::app::dataset {

struct PlanOptions {
  std::vector<std::string> manifests;
  std::string out;      // PLAN/
  int shards = 0;       // exactly one of shards and shard_hours
  double shard_hours = 0;
  int probe_threads = 0;  // 0 = 4 per CPU (header reads wait on storage)
  bool force = false;
  // Leave bad entries (Problems, manifest.h) out of the plan instead of refusing it: each is
  // still printed, counted in plan.json ("skipped_entries") and listed in PLAN/skipped.txt.
  // Duplicate ids are never skipped.
  bool skip_bad = false;
};

// Error(Usage) for an empty -o or manifest path, not exactly one of a shard count in 1..99999 and
// finite, positive --shard-hours, or a negative --probe-threads (app/dataset/options.cpp).
void check_plan_options(const PlanOptions& o);

// Plans and writes PLAN/ (check_plan_options first); prints a summary on stderr. Every bad entry of the manifests is printed
// (Problems) and the plan refused (Error(Input), exit 3) unless skip_bad. Writes the shard files
// without an fsync each, then makes the folder durable at once (syncfs) and writes plan.json
// last. Throws Error(Usage/Input/Output/Environment).
void make_plan(const PlanOptions& o);

// Assigns items to n shards, longest first to the least loaded shard (ties: lower index), then
// orders each shard by duration (shortest first; ties by key). Ownership depends only on the
// items: never on what is done. O(items log items + items log n).
std::vector<std::vector<Item>> balance(std::vector<Item> items, int n);

struct Plan {
  std::string dir;
  nlohmann::json meta;  // plan.json
  std::string digest;   // sha256 of plan.json
  int shards = 0;
  std::vector<double> shard_seconds;
  std::vector<size_t> shard_items;
};
// Throws Error(Usage) when PLAN/ holds no plan, Error(Input) when it is damaged.
Plan read_plan(const std::string& dir);
// The items of one shard; checks the file's digest against plan.json.
std::vector<Item> read_shard_items(const Plan& p, int shard);

std::string shard_name(int shard);  // "shard-00042"

// --shard I/N or auto. `env` reads an environment variable (nullopt: unset). For auto: the index
// from SLURM_ARRAY_TASK_ID (minus SLURM_ARRAY_TASK_MIN), else SLURM_PROCID (of SLURM_NTASKS), else
// RANK (of WORLD_SIZE), else JOB_COMPLETION_INDEX; refused when none is set or when two of these
// launchers (Slurm, torchrun, Kubernetes) name different indices; a count the launcher gives
// must equal the plan's. Returns the index; throws Error(Usage) saying why not.
using EnvLookup = std::function<std::optional<std::string>(const char*)>;
int resolve_shard(const std::string& spec, int plan_shards, const EnvLookup& env);
EnvLookup process_env();

}  // namespace mimi::app::dataset
