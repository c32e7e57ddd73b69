// What a reader of a `mimi dataset encode` output may take (mimi.read_dataset in Python): the
// shards the output's dataset.json counts, in order, judged as the worker and `status` judge
// them - a finished shard by its .done (read_done), an unfinished one by its journal records that
// its tar bears out (what a resume would keep). Nothing else in OUT/shards is read: a stray or
// copied shard file is not this output's.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mimi::app::dataset {

struct ReadableShard {
  int shard = 0;
  std::string tar;        // the file to read: shard-N.tar, or shard-N.tar.partial
  uint64_t bytes = 0;     // read this many bytes from its start (whole items only)
  std::string sha256;     // a finished shard (valid .done): the tar's digest it records; "" for the
                          // items a worker has recorded so far
  int64_t items = 0;      // the items (with codes) those bytes hold
};

struct ReadableOutput {
  nlohmann::json dataset;  // OUT/dataset.json
  std::vector<ReadableShard> shards;
  std::vector<std::string> stale;  // why each .done there is not taken as done (as status warns)
};

// Throws Error(Input) when OUT has no dataset.json (not an output, or none recorded yet) or a damaged
// one (Error(Usage) when it was removed from an output that holds records, as status says); a .done
// that is not valid makes its shard unfinished.
ReadableOutput readable_shards(const std::string& out, bool unfinished);

}  // namespace mimi::app::dataset
