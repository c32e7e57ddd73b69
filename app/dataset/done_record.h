// A finished shard's .done record: what it must say and how a reader judges it (the worker's
// skip, status and verify).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "app/dataset/journal.h"

namespace mimi::app::dataset {

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
  std::optional<std::string> tar_sha256, index_sha256, errors_sha256;
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
// Adds the digest of the record's other fields ("record_sha256"), last: any edit by hand makes
// the record not this shard's.
void seal_done_record(nlohmann::json& done);

}  // namespace mimi::app::dataset
