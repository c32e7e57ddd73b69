// Token files: codes plus what is known about where they came from, in four formats.
//   mimi         our container (docs/FORMAT.md): JSON header, 11-bit packed frames in CRC'd chunks
//   npy          int32 array [n_q, frames], C order
//   safetensors  tensor "codes" [1, n_q, frames] int32; the header fields as __metadata__
//   text         one frame per line, n_q space-separated integers
// Readers throw Error(Input) with what is wrong; writers produce bytes (callers write them
// atomically).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codec/engine.h"

namespace mimi::app {

enum class TokenFormat { Mimi, Npy, Safetensors, Text };

const char* format_name(TokenFormat f);
const char* format_extension(TokenFormat f);  // ".mimi", ".npy", ".safetensors", ".txt"
std::optional<TokenFormat> parse_format(const std::string& name);        // "mimi", "npy", ...
std::optional<TokenFormat> format_from_extension(const std::string& path);
std::optional<TokenFormat> sniff_format(const std::vector<uint8_t>& bytes);  // by content

struct TokenMeta {
  int sample_rate = 24000;
  double frame_rate = 12.5;
  int codebook_size = 2048;
  std::optional<int64_t> original_samples;     // at sample_rate, before padding to frames
  std::optional<int> source_sample_rate;
  std::optional<int> source_channels;
  std::optional<int> channel;                  // which source channel, when split
  std::string weights_fingerprint;             // empty = unknown
  std::string config_fingerprint;              // Model::config_fingerprint; empty = unknown (older files)
  std::string tool_version;
};

struct TokenFile {
  Codes codes;  // [n_q, frames]
  TokenMeta meta;
  bool complete = true;    // false: a damaged .mimi or text file, read with recover (its good prefix)
  std::string damage;      // why it is incomplete
};

std::vector<uint8_t> write_tokens(const TokenFile& t, TokenFormat f);
// `recover`: for .mimi and text, return the good prefix of a damaged/truncated file (complete =
// false) instead of throwing (a .mimi chunk cut short or failing its CRC; a text line that is not a
// frame like those before it). Codes outside the model are wrong tokens, never recovered.
TokenFile read_tokens(const std::vector<uint8_t>& bytes, TokenFormat f, const std::string& what,
                      bool recover = false);

nlohmann::json meta_to_json(const TokenMeta& m);
// Header fields (a .mimi JSON header, safetensors metadata, meta_to_json's output) into `m`, each
// checked: a value of the wrong type or outside its range is Error(Input) naming the key.
void meta_from_json(TokenMeta& m, const nlohmann::json& j, const std::string& what);

// Codes [n_q, frames] as a .npy (version 1.0, C order, little-endian) of int32 (code_bytes 4, what
// `encode -o x.npy` writes) or int16 (2, the dataset shards' members).
std::vector<uint8_t> npy_bytes(const Codes& c, int code_bytes);

// One line of a text token file or stream, [b, e) without its '\n': whitespace-separated integer
// codes into `frame`. False for a blank line or a comment ('#' in the first column); throws
// Error(Input) naming `what`, the line and the token for anything else. The one grammar of both
// the file reader and `decode --stream`.
bool parse_text_frame(const char* b, const char* e, std::vector<int32_t>& frame, const std::string& what,
                      int64_t line);

}  // namespace mimi::app
