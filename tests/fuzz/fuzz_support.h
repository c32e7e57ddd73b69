// Support for the harnesses that decode or stream: the tiny model's engine (generated once from
// the PRNG spec, so it needs no file), the CLI's checks before decoding, and the .mimi CRC repair
// that lets mutations reach the fields behind the checksums.
#pragma once

#include <cstdint>
#include <vector>

#include "app/formats/token_file.h"
#include "codec/engine.h"

namespace mimi::fuzz {

// The `tiny` test model (tests/data/tiny), one thread, chunks of 8 frames, loaded on first use.
Engine& tiny_engine();

// The micro model with 8 codebooks (fuzz_micro.h micro_stream_config: 1 kHz, 32 samples a frame),
// same options: the streaming harnesses, whose per-frame model work would otherwise cost ten times
// what the stream parsing they exist for does.
Engine& micro_stream_engine();

// What `mimi decode FILE` (and `--sample-rate source`) does with tokens a reader accepted, minus
// the audio file writer: the CLI's check_tokens (with --allow-weights-mismatch, to get further),
// chunked decoding, trimming to original_samples and resampling. Returns false when a check
// refused the tokens with a mimi::Error; anything else escapes.
bool decode_like_cli(const app::TokenFile& t);

// Decodes only when the codes are small enough to keep the fuzzer fast.
constexpr int64_t kMaxDecodeCodes = 4096, kMaxDecodeFrames = 64;

// Checks what every reader promises about what it returns (shape, codes in range).
void check_token_file(const app::TokenFile& t);

// Rewrites the header, chunk and end-record CRCs of a .mimi byte string in place, as far as its
// structure can be walked (a header that is not JSON with n_q and codebook_size stops the walk
// after the header CRC).
void repair_mimi_crcs(std::vector<uint8_t>& b);

// read_tokens with and without --recover, then check_token_file, the round trip through every
// writer, and decode_like_cli for small results.
void fuzz_token_format(const uint8_t* data, size_t size, app::TokenFormat f);

}  // namespace mimi::fuzz
