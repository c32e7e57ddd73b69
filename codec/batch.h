// Many signals through the slots of one batched plan (codec/plan.h): every slot streams one
// signal; a slot whose signal ends is reset and takes the next one from the queue at the next
// step, so a queue of mixed lengths keeps the slots busy and no padding of one signal ever
// reaches another's codes. Each slot pushes exactly the chunks Engine::encode / Engine::decode
// push for that signal alone, and the plans' batched stages are column-invariant, so every
// signal's codes (samples) are bitwise those it gets alone on the same backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <vector>

#include "codec/engine.h"

namespace mimi {

// The frames of each push when `samples` samples are encoded in chunks of `chunk_frames`
// (EncoderSession's rule): whole chunks, then the frames left, the last one zero-padded.
std::vector<int64_t> encode_pushes(int64_t samples, int64_t chunk_frames, int64_t frame_size);

// A signal to encode, read as it goes (constant memory for any length): read(dst, n) stores up
// to n samples (24 kHz mono) and returns how many, 0 at the end; it may throw for its own input.
struct PcmItem {
  size_t id = 0;  // the caller's name for it
  std::function<int64_t(float*, int64_t)> read;
};

struct CodesItem {
  size_t id = 0;
  const Codes* codes = nullptr;  // valid until its done() call; codes->n_q >= the runner's n_q
};

// What happened to one item that did not finish: the exception its read() threw, or Error(Input)
// for a signal without samples or codes outside the codebooks. The other slots go on.
using ItemFailed = std::function<void(size_t id, std::exception_ptr)>;

// Encodes the signals next() hands out (false: the queue is empty) with `slots` streams at
// once, in chunks of the engine's encode_chunk_frames (> 0); done() gets each signal's codes as soon as
// it ends (signals end in any order). failed = nullptr: a failing item's exception propagates.
void encode_batch(Engine& engine, int n_q, int slots, const std::function<bool(PcmItem&)>& next,
                  const std::function<void(const PcmItem&, Codes&&)>& done, const ItemFailed& failed = nullptr);

// Decodes the first n_q codebooks of the codes next() hands out, `slots` at once: samples() gets
// each chunk's frames * frame_size samples as soon as they are decoded, done() the end.
void decode_batch(Engine& engine, int n_q, int slots, const std::function<bool(CodesItem&)>& next,
                  const std::function<void(const CodesItem&, const float*, int64_t)>& samples,
                  const std::function<void(const CodesItem&)>& done, const ItemFailed& failed = nullptr);

}  // namespace mimi
