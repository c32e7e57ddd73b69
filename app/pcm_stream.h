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
  // before anything is allocated), or takes a raw layout.
  void read_wav_header();
  void set_raw(const PcmLayout& l);
  const PcmLayout& layout() const { return layout_; }
  int64_t declared_frames() const { return declared_frames_; }  // from the data chunk; -1 unknown
  // Up to max_frames interleaved frames into out (resized); with `wait_full` it blocks until
  // max_frames arrived or the input ended, else it returns what one read gave. 0 at the end.
  int64_t read(std::vector<float>& out, int64_t max_frames, bool wait_full);
  uint64_t dropped_bytes() const { return dropped_; }  // an incomplete last frame

 private:
  size_t fill(uint8_t* dst, size_t n, bool exact);
  int fd_;
  std::string what_;
  std::vector<uint8_t> prefix_, carry_, raw_;
  size_t prefix_pos_ = 0;
  PcmLayout layout_;
  int64_t declared_frames_ = -1;
  uint64_t data_left_ = UINT64_MAX;  // bytes of the data chunk still to come
  uint64_t dropped_ = 0;
  bool ended_ = false;
};

}  // namespace mimi::app
