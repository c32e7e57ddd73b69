#include "app/formats/pcm_stream.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "app/formats/audio_io.h"
#include "codec/error.h"

namespace mimi::app {
namespace {

uint32_t le32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }
uint64_t le64(const uint8_t* p) { return uint64_t(le32(p)) | uint64_t(le32(p + 4)) << 32; }

float sample_at(const uint8_t* p, const PcmLayout& l) {
  if (l.is_float) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  if (l.bits == 16) return float(int16_t(uint16_t(p[0] | p[1] << 8))) / 32768.0f;
  if (l.bits == 24) return float(int32_t(uint32_t(p[0]) << 8 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 24) >> 8) / 8388608.0f;
  return float(int32_t(le32(p))) / 2147483648.0f;
}

}  // namespace

size_t read_some(int fd, uint8_t* dst, size_t n, bool exact, const std::string& what) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, dst + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw sys_error(errno, ErrorKind::Input, what, "read failed");
    }
    if (r == 0) break;
    got += size_t(r);
    if (!exact) break;  // give back what arrived: a live pipe delivers in pieces
  }
  return got;
}

bool looks_like_wav(const uint8_t* p, size_t n) {
  return n >= 12 && (std::memcmp(p, "RIFF", 4) == 0 || std::memcmp(p, "RF64", 4) == 0) && std::memcmp(p + 8, "WAVE", 4) == 0;
}

PcmReader::PcmReader(int fd, std::string what, std::vector<uint8_t> prefix)
    : fd_(fd), what_(std::move(what)), prefix_(std::move(prefix)) {}

size_t PcmReader::fill(uint8_t* dst, size_t n, bool exact) {
  const size_t got = fill_from_source(dst, n, exact);
  consumed_ += got;
  if (recording_) seen_.insert(seen_.end(), dst, dst + got);
  if (recording_ && seen_.size() > (16u << 20)) {  // huge chunks before the data: no fallback kept
    recording_ = false;
    std::vector<uint8_t>().swap(seen_);
  }
  return got;
}

size_t PcmReader::fill_from_source(uint8_t* dst, size_t n, bool exact) {
  size_t got = 0;
  if (prefix_pos_ < prefix_.size()) {
    got = std::min(n, prefix_.size() - prefix_pos_);
    std::memcpy(dst, prefix_.data() + prefix_pos_, got);
    prefix_pos_ += got;
    if (got == n || !exact) return got;
  }
  return got + read_some(fd_, dst + got, n - got, exact, what_);
}

void PcmReader::set_raw(const PcmLayout& l) {
  layout_ = l;
  recording_ = false;
}

void PcmReader::set_data_bytes(uint64_t bytes) {
  data_left_ = bytes;
  declared_frames_ = int64_t(bytes / uint64_t(layout_.bytes_per_frame()));
}

void PcmReader::read_wav_header() {
  uint8_t h[12];
  const size_t n = fill(h, 12, true);
  if (n == 0) throw Error(ErrorKind::Input, what_ + ": is empty (no audio)");
  if (n != 12 || !looks_like_wav(h, 12))
    // the --raw-format hint only where it can be followed: a stream on stdin (encode --stream -)
    throw Error(ErrorKind::Input, what_ + (what_ == "stdin" ? ": not a WAV stream (use --raw-format for headerless PCM)"
                                                            : ": not a WAV file (no RIFF/RF64 header)"));
  const bool rf64 = std::memcmp(h, "RF64", 4) == 0;
  uint64_t rf64_data = 0;
  bool have_fmt = false;
  uint8_t scratch[4096];
  for (;;) {
    uint8_t ch[8];
    if (fill(ch, 8, true) != 8) throw Error(ErrorKind::Input, what_ + ": WAV ends before its data chunk (truncated or malformed chunk sizes)");
    const uint32_t size = le32(ch + 4);
    if (std::memcmp(ch, "data", 4) == 0) {
      if (!have_fmt) throw Error(ErrorKind::Input, what_ + ": WAV data chunk before its fmt chunk");
      uint64_t bytes = size;
      if (rf64 && size == 0xFFFFFFFFu) bytes = rf64_data;
      // 0 and 0xFFFFFFFF: the writer did not know the length (a live stream): read to the end.
      open_ended_ = bytes == 0 || (size == 0xFFFFFFFFu && !rf64);
      data_size_at_ = rf64 ? 0 : consumed_ - 4;
      if (!open_ended_ && unstreamable_.empty()) set_data_bytes(bytes);
      recording_ = false;
      return;
    }
    const uint64_t body = uint64_t(size) + (size & 1);
    const bool is_fmt = std::memcmp(ch, "fmt ", 4) == 0, is_ds64 = rf64 && std::memcmp(ch, "ds64", 4) == 0;
    if (is_fmt || is_ds64) {
      // Both are small; a huge one is a lie, refused before allocating it.
      if (body > sizeof scratch || (is_fmt && size < 16) || (is_ds64 && size < 24))
        throw Error(ErrorKind::Input, what_ + ": WAV " + std::string(reinterpret_cast<char*>(ch), 4) + " chunk of " +
                                          std::to_string(size) + " bytes is malformed");
      if (fill(scratch, size_t(body), true) != body) throw Error(ErrorKind::Input, what_ + ": truncated WAV header");
      if (is_ds64) {
        rf64_data = le64(scratch + 8);
        continue;
      }
      uint16_t tag = uint16_t(scratch[0] | scratch[1] << 8);
      PcmLayout l;
      l.channels = scratch[2] | scratch[3] << 8;
      const uint32_t rate = le32(scratch + 4);
      l.bits = scratch[14] | scratch[15] << 8;
      if (tag == 0xFFFE && size >= 26) tag = uint16_t(scratch[24] | scratch[25] << 8);  // extensible: subformat
      if (tag == 3) l.is_float = true;
      // Samples this reader does not convert: parsed on to the data chunk (its size field), and a
      // caller that can read the input whole hands it to libsndfile.
      if (tag != 1 && tag != 3) {
        unstreamable_ = what_ + ": WAV format " + std::to_string(tag) + " is not integer PCM or 32-bit float";
        have_fmt = true;
        continue;
      }
      if (!(l.bits == 16 || l.bits == 24 || l.bits == 32) || (l.is_float && l.bits != 32)) {
        unstreamable_ = what_ + ": " + std::to_string(l.bits) + "-bit " + (l.is_float ? "float " : "") +
                        "WAV samples cannot be streamed (16, 24, 32-bit integer or 32-bit float)";
        have_fmt = true;
        continue;
      }
      if (l.channels < 1 || l.channels > kMaxChannels)
        throw Error(ErrorKind::Input, what_ + ": WAV header says " + std::to_string(l.channels) + " channels");
      if (rate < uint32_t(kMinSampleRate) || rate > uint32_t(kMaxSampleRate))
        throw Error(ErrorKind::Input, what_ + ": WAV header says " + std::to_string(rate) + " Hz (supported: " +
                                          std::to_string(kMinSampleRate) + " to " + std::to_string(kMaxSampleRate) + ")");
      l.rate = int(rate);
      layout_ = l;
      have_fmt = true;
      continue;
    }
    for (uint64_t left = body; left > 0;) {  // skip LIST, fact, ... in constant memory
      const size_t n = size_t(std::min<uint64_t>(left, sizeof scratch));
      if (fill(scratch, n, true) != n) throw Error(ErrorKind::Input, what_ + ": WAV ends before its data chunk (truncated or malformed chunk sizes)");
      left -= n;
    }
  }
}

int64_t PcmReader::read(std::vector<float>& out, int64_t max_frames, bool wait_full) {
  const size_t fb = size_t(layout_.bytes_per_frame());
  out.clear();
  if (ended_) return 0;
  raw_.resize(std::max<size_t>(size_t(max_frames) * fb, fb));
  size_t want = size_t(max_frames) * fb;
  if (want > carry_.size()) want -= carry_.size();
  else want = 0;
  want = size_t(std::min<uint64_t>(want, data_left_));
  if (!carry_.empty()) std::memcpy(raw_.data(), carry_.data(), carry_.size());
  size_t have = carry_.size();
  carry_.clear();
  for (;;) {
    if (have >= fb && (!wait_full || want == 0)) break;
    if (want == 0) {  // the data chunk is consumed
      ended_ = true;
      if (data_left_ == 0) check_after_data();
      break;
    }
    const size_t got = fill(raw_.data() + have, want, wait_full);
    if (got == 0) {
      ended_ = true;
      break;
    }
    have += got;
    want -= got;
    if (data_left_ != UINT64_MAX) data_left_ -= got;
  }
  const size_t whole = have / fb;
  frames_read_ += int64_t(whole);
  if (ended_) dropped_ += have - whole * fb;
  else carry_.assign(raw_.begin() + long(whole * fb), raw_.begin() + long(have));
  out.resize(whole * size_t(layout_.channels));
  const int bps = layout_.bits / 8;
  for (size_t i = 0; i < out.size(); ++i) out[i] = sample_at(raw_.data() + i * size_t(bps), layout_);
  return int64_t(whole);
}

// What follows a WAV's data chunk, judged as libsndfile judges it for a file (the same bytes give
// the same outcome by file and through a pipe: two WAVs concatenated were exit 3 by file, and by
// pipe the first alone, exit 0): chunks are read to the end, and a second "RIFF"/"RF64" or "data"
// chunk header is the error; anything else (LIST, id3, a few bytes of junk) is passed over.
void PcmReader::check_after_data() {
  uint8_t ch[8];
  std::vector<uint8_t> skip(1 << 16);
  for (;;) {
    if (fill(ch, 8, true) != 8) return;
    if (std::memcmp(ch, "RIFF", 4) == 0 || std::memcmp(ch, "RF64", 4) == 0 || std::memcmp(ch, "data", 4) == 0)
      throw Error(ErrorKind::Input, what_ + ": a second '" + std::string(reinterpret_cast<char*>(ch), 4) +
                                        "' chunk after the WAV's data (files concatenated?)");
    uint64_t size = uint64_t(ch[4]) | uint64_t(ch[5]) << 8 | uint64_t(ch[6]) << 16 | uint64_t(ch[7]) << 24;
    size += size & 1;  // chunks are padded to even sizes
    while (size > 0) {
      const size_t got = fill(skip.data(), size_t(std::min<uint64_t>(size, skip.size())), true);
      if (got == 0) return;
      size -= got;
    }
  }
}

std::string PcmReader::shortfall() const {
  if (declared_frames_ > 0 && frames_read_ < declared_frames_)
    return "truncated: the header promises " + std::to_string(declared_frames_) + " frames, the input holds " +
           std::to_string(frames_read_);
  if (dropped_) return "the stream ends inside a sample frame (" + std::to_string(dropped_) + " bytes dropped)";
  return "";
}

}  // namespace mimi::app
