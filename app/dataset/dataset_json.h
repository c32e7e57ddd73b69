// OUT/dataset.json as the worker writes it (app/dataset/dataset_json.cpp; the readers,
// read_dataset_json, plan_named_by and dataset_of_plan, are declared in dataset.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "app/dataset/dataset.h"
#include "app/dataset/plan.h"
#include "codec/engine.h"

namespace mimi::app::dataset {

// What this run's dataset.json says: the tool, the model's fingerprints and rates, n_q, the plan
// (digest, shard count, folder as bytes).
nlohmann::json dataset_json(const EncodeShardOptions& o, const Plan& plan, const Engine& eng);

// Writes OUT/dataset.json when there is none; otherwise checks that it agrees with `want` on every
// setting that changes the codes (Error(Usage), or Error(Weights) for other weights or config),
// except that one binding nothing (no item recorded in OUT, and no live worker holding to it) is
// replaced with a warning. The check and the write are one step for all workers of OUT (a lock on
// OUT/dataset.json.lock), and a worker that agreed holds to it until it exits.
void ensure_dataset_json(const std::string& out, const nlohmann::json& want);

}  // namespace mimi::app::dataset
