#include "app/stream.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "app/audio_io.h"
#include "app/file_io.h"
#include "app/mimi_container.h"
#include "codec/error.h"

namespace mimi::app {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int open_in(const std::string& p) {
  if (p == "-") return 0;
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) throw Error(ErrorKind::Input, p + ": cannot open: " + std::strerror(errno));
  return fd;
}

int open_out(const std::string& p, bool force) {
  if (p == "-") return 1;
  if (!force && std::filesystem::exists(p)) throw Error(ErrorKind::Output, p + ": exists (use --force to overwrite)");
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error(ErrorKind::Output, p + ": cannot create: " + std::strerror(errno));
  return fd;
}

// Reads up to n bytes; returns fewer only at end of input.
size_t read_some(int fd, uint8_t* dst, size_t n, bool exact) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, dst + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorKind::Input, std::string("read failed: ") + std::strerror(errno));
    }
    if (r == 0) break;
    got += size_t(r);
    if (!exact) break;  // give back what arrived: a live pipe delivers in pieces
  }
  return got;
}

uint32_t le32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

struct SampleLayout {
  int bits = 16;
  bool is_float = false;
  int channels = 1, rate = 24000;
};

SampleLayout parse_raw(const RawFormat& r) {
  SampleLayout l;
  l.rate = r.rate;
  l.channels = r.channels;
  if (r.sample == "s16le") l.bits = 16;
  else if (r.sample == "s24le") l.bits = 24;
  else if (r.sample == "s32le") l.bits = 32;
  else if (r.sample == "f32le") l.bits = 32, l.is_float = true;
  else throw Error(ErrorKind::Usage, "--raw-format must be s16le, s24le, s32le or f32le, got '" + r.sample + "'");
  if (l.rate < 1000 || l.channels < 1) throw Error(ErrorKind::Usage, "bad --raw-rate or --raw-channels");
  return l;
}

// Reads a WAV header from a stream up to the start of the sample data.
SampleLayout read_wav_header(int fd, const std::string& what) {
  uint8_t h[12];
  if (read_some(fd, h, 12, true) != 12 || std::memcmp(h, "RIFF", 4) != 0 || std::memcmp(h + 8, "WAVE", 4) != 0)
    throw Error(ErrorKind::Input, what + ": not a WAV stream (use --raw-format for headerless PCM)");
  SampleLayout l;
  bool have_fmt = false;
  for (;;) {
    uint8_t ch[8];
    if (read_some(fd, ch, 8, true) != 8) throw Error(ErrorKind::Input, what + ": WAV stream ends before its data");
    const uint32_t size = le32(ch + 4);
    if (std::memcmp(ch, "data", 4) == 0) {
      if (!have_fmt) throw Error(ErrorKind::Input, what + ": WAV data before its fmt chunk");
      return l;
    }
    std::vector<uint8_t> body(size + (size & 1));
    if (read_some(fd, body.data(), body.size(), true) != body.size())
      throw Error(ErrorKind::Input, what + ": truncated WAV header");
    if (std::memcmp(ch, "fmt ", 4) == 0 && size >= 16) {
      uint16_t tag = uint16_t(body[0] | body[1] << 8);
      l.channels = body[2] | body[3] << 8;
      l.rate = int(le32(body.data() + 4));
      l.bits = body[14] | body[15] << 8;
      if (tag == 0xFFFE && size >= 26) tag = uint16_t(body[24] | body[25] << 8);  // extensible: subformat
      if (tag == 3) l.is_float = true;
      else if (tag != 1) throw Error(ErrorKind::Input, what + ": WAV format " + std::to_string(tag) + " is not PCM or float");
      if (!(l.bits == 16 || l.bits == 24 || l.bits == 32) || (l.is_float && l.bits != 32) || l.channels < 1 || l.rate < 1)
        throw Error(ErrorKind::Input, what + ": unsupported WAV layout for streaming");
      have_fmt = true;
    }
  }
}

float sample_at(const uint8_t* p, const SampleLayout& l) {
  if (l.is_float) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  if (l.bits == 16) return float(int16_t(p[0] | p[1] << 8)) / 32768.0f;
  if (l.bits == 24) return float(int32_t(uint32_t(p[0]) << 8 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 24) >> 8) / 8388608.0f;
  return float(int32_t(le32(p))) / 2147483648.0f;
}


}  // namespace

StreamStats stream_encode(Engine& engine, const StreamEncodeOptions& o) {
  const Config& c = engine.config();
  const int64_t fs = c.frame_size();
  if (o.format != "mimi" && o.format != "text")
    throw Error(ErrorKind::Usage, "--stream writes .mimi or text tokens (--format mimi|text)");
  const int in = open_in(o.input);
  const SampleLayout l = o.raw.sample.empty() ? read_wav_header(in, o.input) : parse_raw(o.raw);
  const int out = open_out(o.out, o.force);
  EncodePlan& plan = engine.encode_plan(o.max_chunk, o.n_q);
  plan.reset();
  StreamResampler rs(l.rate, c.sample_rate);
  std::vector<uint8_t> bytes;
  MimiWriter* writer = nullptr;
  nlohmann::json header = {{"format", "mimi-codes"}, {"n_q", o.n_q}, {"codebook_size", c.bins},
                           {"sample_rate", c.sample_rate}, {"frame_rate", c.frame_rate},
                           {"source_sample_rate", l.rate}, {"source_channels", l.channels},
                           {"weights_fingerprint", engine.model().fingerprint}, {"tool_version", MIMI_VERSION}};
  MimiWriter w(bytes, header);
  if (o.format == "mimi") {
    writer = &w;
    write_all(out, bytes.data(), bytes.size(), o.out);
  }
  bytes.clear();
  StreamStats st;
  std::vector<float> pending;  // 24 kHz mono samples not yet encoded
  const size_t frame_bytes = size_t(l.bits / 8) * size_t(l.channels);
  std::vector<uint8_t> raw(65536), carry;
  std::vector<float> mono;
  auto encode_ready = [&](bool final) {
    while (int64_t(pending.size()) >= fs || (final && !pending.empty())) {
      if (int64_t(pending.size()) < fs) pending.resize(size_t(fs), 0.0f);  // last partial frame
      const int64_t n = std::min<int64_t>(int64_t(pending.size()) / fs, o.max_chunk);
      const double t0 = now();
      plan.push(pending.data(), n);
      const double dt = now() - t0;
      st.compute_s += dt;
      st.max_frame_s = std::max(st.max_frame_s, dt / double(n));
      const std::vector<int32_t>& codes = plan.codes();  // [n_q, n]
      std::vector<int32_t> fm(size_t(o.n_q) * size_t(n));
      for (int64_t f = 0; f < n; ++f)
        for (int k = 0; k < o.n_q; ++k) fm[size_t(f * o.n_q + k)] = codes[size_t(k * n + f)];
      if (writer) {
        w.append_chunk(fm.data(), n);
      } else {
        std::string s;
        for (int64_t f = 0; f < n; ++f) {
          for (int k = 0; k < o.n_q; ++k) s += (k ? " " : "") + std::to_string(fm[size_t(f * o.n_q + k)]);
          s += '\n';
        }
        bytes.insert(bytes.end(), s.begin(), s.end());
      }
      write_all(out, bytes.data(), bytes.size(), o.out);  // every complete frame goes out now
      bytes.clear();
      st.frames += n;
      pending.erase(pending.begin(), pending.begin() + n * fs);
    }
  };
  for (;;) {
    const size_t got = read_some(in, raw.data(), raw.size(), false);
    if (got == 0) break;
    carry.insert(carry.end(), raw.begin(), raw.begin() + long(got));
    const size_t whole = carry.size() / frame_bytes;
    mono.assign(whole, 0.0f);
    for (size_t i = 0; i < whole; ++i) {
      float s = 0;
      for (int ch = 0; ch < l.channels; ++ch) s += sample_at(carry.data() + i * frame_bytes + size_t(ch) * (l.bits / 8), l);
      mono[i] = s / float(l.channels);
    }
    carry.erase(carry.begin(), carry.begin() + long(whole * frame_bytes));
    const size_t before = pending.size();
    rs.process(mono.data(), mono.size(), pending);
    st.samples += int64_t(pending.size() - before);
    encode_ready(false);
  }
  const size_t before = pending.size();
  rs.process(nullptr, 0, pending);
  st.samples += int64_t(pending.size() - before);
  if (st.samples == 0) throw Error(ErrorKind::Input, o.input + ": no audio samples");
  encode_ready(true);
  if (writer) {
    w.finish(st.samples);
    write_all(out, bytes.data(), bytes.size(), o.out);
  }
  if (out != 1) ::close(out);
  if (in != 0) ::close(in);
  return st;
}

StreamStats stream_decode(Engine& engine, const StreamDecodeOptions& o) {
  const Config& c = engine.config();
  const int64_t fs = c.frame_size();
  const int in = open_in(o.input);
  uint8_t pre[12];
  const size_t got = read_some(in, pre, 12, true);
  if (got == 0) throw Error(ErrorKind::Input, o.input + ": empty token stream");
  const bool mimi = got == 12 && std::memcmp(pre, kMimiMagic, 4) == 0;
  int n_q_file = 0, bits = 0;
  std::string text_buf;
  if (mimi) {
    if (pre[4] != kMimiVersion) throw Error(ErrorKind::Input, o.input + ": unsupported .mimi version");
    const uint32_t L = le32(pre + 8);
    std::vector<uint8_t> h(size_t(L) + 4);
    if (read_some(in, h.data(), h.size(), true) != h.size()) throw Error(ErrorKind::Input, o.input + ": truncated header");
    if (crc32(h.data(), L) != le32(h.data() + L)) throw Error(ErrorKind::Input, o.input + ": header CRC mismatch");
    const nlohmann::json j = nlohmann::json::parse(h.begin(), h.begin() + L);
    n_q_file = j.at("n_q").get<int>();
    bits = bits_for(j.at("codebook_size").get<int>());
    if (j.at("codebook_size").get<int>() != c.bins)
      throw Error(ErrorKind::Input, o.input + ": codebook size does not match the model");
    const std::string fp = j.value("weights_fingerprint", "");
    if (!fp.empty() && fp != engine.model().fingerprint && !o.allow_weights_mismatch)
      throw Error(ErrorKind::Weights, o.input + ": made with other weights (fingerprint " + fp +
                                          "); pass --allow-weights-mismatch to decode anyway");
  } else {
    text_buf.assign(reinterpret_cast<char*>(pre), got);
  }
  const int out = open_out(o.out, o.force);
  const bool f32 = o.sample_format == "f32" || o.raw_sample == "f32le";
  const int bytes_per = f32 ? 4 : 2;
  if (o.raw_sample.empty()) {  // streaming WAV header: sizes unknown (0xFFFFFFFF)
    uint8_t h[44] = {'R', 'I', 'F', 'F', 0xff, 0xff, 0xff, 0xff, 'W', 'A', 'V', 'E', 'f', 'm', 't', ' ', 16, 0, 0, 0};
    const uint16_t tag = f32 ? 3 : 1, ch = 1, align = uint16_t(bytes_per), bps = uint16_t(8 * bytes_per);
    const uint32_t rate = uint32_t(c.sample_rate), byte_rate = rate * uint32_t(bytes_per);
    std::memcpy(h + 20, &tag, 2);
    std::memcpy(h + 22, &ch, 2);
    std::memcpy(h + 24, &rate, 4);
    std::memcpy(h + 28, &byte_rate, 4);
    std::memcpy(h + 32, &align, 2);
    std::memcpy(h + 34, &bps, 2);
    std::memcpy(h + 36, "data", 4);
    std::memset(h + 40, 0xff, 4);
    write_all(out, h, 44, o.out);
  } else if (o.raw_sample != "s16le" && o.raw_sample != "f32le") {
    throw Error(ErrorKind::Usage, "--raw-format for decode output must be s16le or f32le");
  }
  StreamStats st;
  DecodePlan* plan = nullptr;
  int n_q = 0;
  std::vector<uint8_t> pcm_bytes;
  auto emit = [&](const std::vector<int32_t>& frame_major, int rows) {  // one frame
    if (!plan) {
      n_q = o.n_q > 0 ? o.n_q : rows;
      if (n_q > rows) throw Error(ErrorKind::Usage, "--n-q " + std::to_string(n_q) + " but the stream holds " + std::to_string(rows));
      if (rows > c.n_q) throw Error(ErrorKind::Input, "the stream has more codebooks than the model");
      plan = &engine.decode_plan(1, n_q);
      plan->reset();
    }
    std::vector<int32_t> col(frame_major.begin(), frame_major.begin() + n_q);
    const double t0 = now();
    plan->push(col.data(), 1);
    const double dt = now() - t0;
    st.compute_s += dt;
    st.max_frame_s = std::max(st.max_frame_s, dt);
    const float* y = plan->output().ptr();
    pcm_bytes.resize(size_t(fs) * size_t(bytes_per));
    for (int64_t i = 0; i < fs; ++i) {
      if (f32) {
        std::memcpy(pcm_bytes.data() + 4 * i, y + i, 4);
      } else {
        const float v = std::max(-1.0f, std::min(1.0f, y[i]));
        const int16_t s = int16_t(std::lrint(v * 32767.0f));
        std::memcpy(pcm_bytes.data() + 2 * i, &s, 2);
      }
    }
    write_all(out, pcm_bytes.data(), pcm_bytes.size(), o.out);
    ++st.frames;
    st.samples += fs;
  };
  if (mimi) {
    for (;;) {
      uint8_t tag[8];
      const size_t t = read_some(in, tag, 4, true);
      if (t == 0) throw Error(ErrorKind::Input, o.input + ": stream ended without its end record (truncated)");
      if (std::memcmp(tag, "END!", 4) == 0) break;
      if (std::memcmp(tag, "FRMS", 4) != 0 || read_some(in, tag + 4, 4, true) != 4)
        throw Error(ErrorKind::Input, o.input + ": damaged stream after " + std::to_string(st.frames) + " frames");
      const uint32_t nf = le32(tag + 4);
      const size_t payload = size_t((uint64_t(nf) * uint64_t(n_q_file) * uint64_t(bits) + 7) / 8);
      std::vector<uint8_t> body(4 + payload + 4);
      std::memcpy(body.data(), tag + 4, 4);
      if (read_some(in, body.data() + 4, payload + 4, true) != payload + 4)
        throw Error(ErrorKind::Input, o.input + ": truncated chunk after " + std::to_string(st.frames) + " frames");
      if (crc32(body.data(), 4 + payload) != le32(body.data() + 4 + payload))
        throw Error(ErrorKind::Input, o.input + ": chunk CRC mismatch after " + std::to_string(st.frames) + " frames");
      std::vector<int32_t> codes(size_t(nf) * size_t(n_q_file));  // frame-major
      unpack_codes(body.data() + 4, codes.size(), bits, codes.data());
      for (uint32_t f = 0; f < nf; ++f)
        emit(std::vector<int32_t>(codes.begin() + f * n_q_file, codes.begin() + (f + 1) * n_q_file), n_q_file);
    }
  } else {
    char buf[4096];
    bool eof = false;
    for (;;) {
      size_t nl;
      while ((nl = text_buf.find('\n')) != std::string::npos) {
        const std::string line = text_buf.substr(0, nl);
        text_buf.erase(0, nl + 1);
        if (line.find_first_not_of(" \t\r") == std::string::npos || line[0] == '#') continue;
        std::vector<int32_t> frame;
        size_t pos = 0;
        while (pos < line.size()) {
          while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t' || line[pos] == '\r')) ++pos;
          if (pos >= line.size()) break;
          size_t used = 0;
          frame.push_back(std::stoi(line.substr(pos), &used));
          pos += used;
        }
        if (frame.empty()) continue;
        if (n_q_file == 0) n_q_file = int(frame.size());
        if (int(frame.size()) != n_q_file) throw Error(ErrorKind::Input, o.input + ": ragged text token line");
        emit(frame, n_q_file);
      }
      if (eof) break;
      const size_t r = read_some(in, reinterpret_cast<uint8_t*>(buf), sizeof buf, false);
      if (r == 0) {
        eof = true;
        text_buf += '\n';  // a last line without its newline
        continue;
      }
      text_buf.append(buf, r);
    }
  }
  if (out != 1) ::close(out);
  if (in != 0) ::close(in);
  if (st.frames == 0) throw Error(ErrorKind::Input, o.input + ": no frames in the token stream");
  return st;
}

}  // namespace mimi::app
