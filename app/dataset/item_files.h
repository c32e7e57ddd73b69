// An encoded item's two tar members: <key>.npy (int16 [n_q, frames], npy 1.0, C order) and
// <key>.json (where it came from), byte for byte the same for the same codes and item.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/dataset/manifest.h"
#include "codec/engine.h"

namespace mimi::app::dataset {

struct ItemAudio {
  int64_t samples = 0;  // at the model rate
  int source_rate = 0, source_channels = 0;
};

// id and path are bytes: put_path (app/sys/json_bytes.h); read them back with get_path.
nlohmann::json item_record(const Item& it, const ItemAudio& a, const Codes& c, int model_rate);
// Both members, ready to append to the tar.
std::vector<uint8_t> item_members(const Item& it, const ItemAudio& a, const Codes& c, int model_rate);

// The one rule of how much audio an encoded item must hold against its plan, for the worker (an
// item that breaks it is recorded as an error, not put in the tar) and for verify (one found in a
// tar is a problem): audio that ends more than 0.05 s + 0.1 % before its planned duration - a file
// shorter than its header says, a segment past the end of a file whose length the plan could not
// check (a segment past the end of a file the plan could read is refused or cut at plan time:
// inspect_items). Longer audio is accepted: a duration a manifest gives for a whole file only
// balances the shards. Returns "" when the item is fine, else why not (naming the file).
std::string check_encoded_length(const Item& it, int64_t samples, int model_rate);

// Parses an int16 npy as item_members writes it (npy_bytes(codes, 2)). Throws Error(Input) naming `what`.
Codes parse_npy_int16(const uint8_t* p, size_t n, const std::string& what);

}  // namespace mimi::app::dataset
