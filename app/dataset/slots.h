// A shard's items through the slots of one batched plan (`mimi dataset encode --batch N`, for
// GPUs), through the items loop `mimi encode --batch N` uses (app/engine_io/batched_sources.h):
// each slot reads its item block by block as it encodes it; the results come back in the
// shard's order (a reorder buffer holds those that finish early), so the tar, the journal and the
// errors are byte for byte those of the one-item-at-a-time worker.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "app/dataset/item_files.h"
#include "app/dataset/manifest.h"
#include "codec/engine.h"

namespace mimi::app::dataset {

struct ItemResult {
  ItemAudio audio;
  Codes codes;
  std::string error_stage, error;  // error non-empty: the item failed ("open" or "read")
  std::string warning;             // the source held less than its header promised
};

// Encodes items[order[0]], items[order[1]], ... with `slots` streams at once; done(index, result)
// is called for each in the order of `order`. An item's own failure is a result; anything else
// (device, memory) propagates.
void encode_items_batched(Engine& eng, int n_q, int slots, const std::vector<Item>& items,
                          const std::vector<size_t>& order, const std::function<void(size_t, ItemResult&&)>& done,
                          int readers = 2);

// The dataset worker's one items loop: encode_items_batched with slots > 1; with one slot, item
// after item through the streaming encoder while a thread reads the next items ahead
// (app/dataset/prefetch.h: a batched slot takes more descriptors than one item alone). Same
// contract, same results.
void encode_items(Engine& eng, int n_q, int slots, const std::vector<Item>& items, const std::vector<size_t>& order,
                  const std::function<void(size_t, ItemResult&&)>& done, int readers);

}  // namespace mimi::app::dataset
