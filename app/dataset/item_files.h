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

nlohmann::json item_record(const Item& it, const ItemAudio& a, const Codes& c, int model_rate);
// Both members, ready to append to the tar.
std::vector<uint8_t> item_members(const Item& it, const ItemAudio& a, const Codes& c, int model_rate);

// Parses an int16 npy as item_members writes it (npy_bytes(codes, 2)). Throws Error(Input) naming `what`.
Codes parse_npy_int16(const uint8_t* p, size_t n, const std::string& what);

}  // namespace mimi::app::dataset
