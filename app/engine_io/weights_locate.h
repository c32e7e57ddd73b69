// Finding the weights: --weights, else $MIMI_WEIGHTS, else the Hugging Face hub cache.
#pragma once

#include <string>

namespace mimi::app {

// Returns a weights file path. `flag` may name a file, a stream (a pipe, FIFO or device, read
// once by SafetensorsFile::open) or a directory holding model.safetensors (or the moshi tokenizer
// checkpoint). Throws Error(Weights) naming the path when it does not exist, with instructions
// when nothing is found.
std::string locate_weights(const std::string& flag);

}  // namespace mimi::app
