// The .mimi container (specified in docs/FORMAT.md). Writing is incremental so a stream can
// append frames as they are produced; reading checks every CRC and reports the good prefix.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mimi::app {

constexpr char kMimiMagic[4] = {'M', 'I', 'M', 'I'};
constexpr uint8_t kMimiVersion = 1;
// Limits a reader enforces before allocating anything (docs/FORMAT.md).
constexpr uint32_t kMimiMaxHeaderBytes = 1 << 20;
constexpr uint32_t kMimiMaxChunkFrames = 1 << 16;  // 87 minutes; mimi writes 250 (files) or <= 64 (streams)
constexpr int kMimiMaxCodebooks = 1024, kMimiMaxCodebookSize = 1 << 16;
constexpr uint64_t kMimiMaxOriginalSamples = 9000000000000000ull;  // as the other token formats' header check

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);
int bits_for(int codebook_size);  // ceil(log2(codebook_size)), at least 1
// `count` codes of `bits` bits each, LSB-first, from a chunk payload (docs/FORMAT.md).
void unpack_codes(const uint8_t* payload, size_t count, int bits, int32_t* out);

// Byte-level writer: header, then chunks, then the end record.
struct MimiWriter {
  int n_q = 0, bits = 0;
  std::vector<uint8_t>* out = nullptr;
  int64_t frames_written = 0;

  // header must contain n_q and codebook_size.
  MimiWriter(std::vector<uint8_t>& out, const nlohmann::json& header);
  // codes: [n_frames][n_q] frame-major.
  void append_chunk(const int32_t* frame_major, int64_t n_frames);
  void finish(int64_t original_samples);  // -1 = unknown
};

// The JSON header, checked: an object with integer n_q and codebook_size within the limits.
// Throws Error(Input) naming `what` (never a JSON exception).
struct MimiHeader {
  nlohmann::json json;
  int n_q = 0, codebook_size = 0, bits = 0;
};
MimiHeader parse_mimi_header(const uint8_t* text, size_t n, const std::string& what);

struct MimiReadResult {
  nlohmann::json header;
  int n_q = 0;
  std::vector<int32_t> frame_major;  // [frames][n_q]
  int64_t frames = 0;
  bool complete = false;
  int64_t original_samples = -1;
  std::string damage;  // empty when complete
};

// The end record's body (the 20 bytes after its "END!" tag: total frames, original samples, CRC)
// against the `frames` the chunks held: "" when it holds (and *original_samples set, -1 = not
// recorded), else what is wrong. The one judgement of an end record, for files and streams.
constexpr size_t kMimiEndBody = 20;
std::string mimi_end_record_problem(const uint8_t* body, int64_t frames, int64_t* original_samples = nullptr);

// Throws Error(Input) when even the header is unusable; otherwise returns what it could read
// (complete == false with `damage` set when a chunk or the end record is bad or missing).
MimiReadResult read_mimi(const std::vector<uint8_t>& bytes, const std::string& what);

}  // namespace mimi::app
