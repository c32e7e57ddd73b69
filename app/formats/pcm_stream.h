// PCM from a pipe in constant memory: a WAV header read as it arrives (chunks skipped without
// buffering them), or headerless raw PCM; samples converted to float as whole frames arrive.
// Used by `encode --stream` and by `encode -` (WAV on stdin).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mimi::app {

struct PcmLayout {
  int bits = 16;
  bool is_float = false;
  int channels = 1, rate = 24000;
  int bytes_per_frame() const { return bits / 8 * channels; }
};

// Reads up to n bytes from fd; returns fewer only at the end of the input, or (exact == false)
// as soon as something arrived. Throws Error(Input) naming `what`.
size_t read_some(int fd, uint8_t* dst, size_t n, bool exact, const std::string& what);

// True when the bytes start like a RIFF/WAVE or RF64/WAVE file.
bool looks_like_wav(const uint8_t* p, size_t n);

class PcmReader {
 public:
  // `prefix`: bytes already taken from fd (sniffing); they are read first.
  PcmReader(int fd, std::string what, std::vector<uint8_t> prefix = {});
  // Parses a WAV header up to its data chunk (throws Error(Input) for anything else, sizes checked
  // before anything is allocated), or takes a raw layout. A well-formed WAV whose samples this
  // reader cannot convert (8-bit, 64-bit float, mu-law, ADPCM...) does not throw: unstreamable()
  // then says why, and seen() holds every byte taken so far, for a caller that can read it whole
  // (libsndfile) instead.
  void read_wav_header();
  const std::string& unstreamable() const { return unstreamable_; }
  std::vector<uint8_t> take_seen() { return std::move(seen_); }
  // Bytes of the header taken so far (where the data chunk's samples begin, after the header)
  uint64_t header_bytes() const { return consumed_; }
  // The data chunk's size, when the header left it open (0 or 0xFFFFFFFF: a writer that did not
  // know the length) and the caller knows it (a regular file: its size past the header).
  void set_data_bytes(uint64_t bytes);
  // The header left the data size open, and (RIFF only, else 0) the offset of its size field: a
  // caller handing the whole input to libsndfile writes the true size there (libsndfile takes 0
  // as no samples at all).
  bool open_ended() const { return open_ended_; }
  uint64_t data_size_at() const { return data_size_at_; }
  void set_raw(const PcmLayout& l);
  const PcmLayout& layout() const { return layout_; }
  int64_t declared_frames() const { return declared_frames_; }  // from the data chunk; -1 unknown
  // Up to max_frames interleaved frames into out (resized); with `wait_full` it blocks until
  // max_frames arrived or the input ended, else it returns what one read gave. 0 at the end.
  int64_t read(std::vector<float>& out, int64_t max_frames, bool wait_full);
  uint64_t dropped_bytes() const { return dropped_; }  // an incomplete last frame
  // After the end: what the input lacked against its header ("truncated: ..."), or an incomplete
  // last frame; "" when whole. The one wording for every reader of a WAV stream or open file.
  std::string shortfall() const;

 private:
  size_t fill(uint8_t* dst, size_t n, bool exact);  // counts (and while recording keeps) what it took
  void check_after_data();  // the chunks after a consumed data chunk, to the end: refuses a second RIFF/data
  size_t fill_from_source(uint8_t* dst, size_t n, bool exact);
  int fd_;
  std::string what_;
  std::vector<uint8_t> prefix_, carry_, raw_;
  size_t prefix_pos_ = 0;
  std::vector<uint8_t> seen_;  // what the header parse took, while recording
  bool recording_ = true;
  uint64_t consumed_ = 0;
  std::string unstreamable_;
  bool open_ended_ = false;
  uint64_t data_size_at_ = 0;
  PcmLayout layout_;
  int64_t declared_frames_ = -1;
  uint64_t data_left_ = UINT64_MAX;  // bytes of the data chunk still to come
  uint64_t dropped_ = 0;
  bool ended_ = false;
  int64_t frames_read_ = 0;
};

}  // namespace mimi::app
