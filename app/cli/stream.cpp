#include "app/cli/stream.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include <spdlog/spdlog.h>

#include <charconv>
#include <optional>
#include <cmath>

#include "app/formats/audio_io.h"
#include "app/formats/mimi_container.h"
#include "app/formats/pcm_stream.h"
#include "app/formats/token_file.h"
#include "app/sys/file_io.h"
#include "codec/error.h"

namespace mimi::app {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int open_in(const std::string& p) {
  if (p == "-") return 0;
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) throw Error(ErrorKind::Input, p + ": is a directory");
  return open_input(p);
}

struct InputFd {  // closes what it opened
  int fd;
  ~InputFd() {
    if (fd > 0) ::close(fd);
  }
};

uint32_t le32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

PcmLayout parse_raw(const RawFormat& r) {
  PcmLayout l;
  l.rate = r.rate;
  l.channels = r.channels;
  if (r.sample == "s16le") l.bits = 16;
  else if (r.sample == "s24le") l.bits = 24;
  else if (r.sample == "s32le") l.bits = 32;
  else if (r.sample == "f32le") l.bits = 32, l.is_float = true;
  else throw Error(ErrorKind::Usage, "--raw-format must be s16le, s24le, s32le or f32le, got '" + r.sample + "'");
  if (l.rate < kMinSampleRate || l.rate > kMaxSampleRate || l.channels < 1 || l.channels > kMaxChannels)
    throw Error(ErrorKind::Usage, "--raw-rate must be " + std::to_string(kMinSampleRate) + ".." +
                                      std::to_string(kMaxSampleRate) + " and --raw-channels 1.." + std::to_string(kMaxChannels));
  return l;
}

// A text token line longer than this is not a frame (32 codes of 5 digits take 192 bytes).
constexpr size_t kMaxTextLine = 64 << 10;

}  // namespace

StreamStats stream_encode(Engine& engine, const StreamEncodeOptions& o) {
  const Config& c = engine.config();
  const int64_t fs = c.frame_size();
  if (o.format != "mimi" && o.format != "text")
    throw Error(ErrorKind::Usage, "--stream writes .mimi or text tokens (" + o.format +
                                      " holds the whole array, written once it is known: encode without --stream)");
  const std::string what = o.input == "-" ? "stdin" : o.input;
  InputFd in{open_in(o.input)};
  std::vector<uint8_t> prefix;  // raw input: its first bytes, looked at before they are samples
  if (!o.raw.sample.empty()) {
    prefix.resize(12);
    prefix.resize(read_some(in.fd, prefix.data(), prefix.size(), true, what));
    if (looks_like_wav(prefix.data(), prefix.size()))
      spdlog::warn("{}: starts like a WAV file, but --raw-format {} reads its header as samples (drop --raw-format "
                   "to read it as WAV)",
                   what, o.raw.sample);
  }
  PcmReader reader(in.fd, what, std::move(prefix));
  if (o.raw.sample.empty()) {
    reader.read_wav_header();
    if (!reader.unstreamable().empty())  // real-time mode converts as samples arrive; the rest is read whole
      throw Error(ErrorKind::Input, reader.unstreamable() + "; without --stream it is read whole");
  } else {
    reader.set_raw(parse_raw(o.raw));
  }
  const PcmLayout l = reader.layout();
  OutputFile out(o.out, o.force);  // opened once the input is known to be audio
  EncodePlan& plan = engine.encode_plan(o.max_chunk, o.n_q);
  plan.reset();
  StreamResampler rs(l.rate, c.sample_rate);
  std::vector<uint8_t> bytes;
  nlohmann::json header = {{"format", "mimi-codes"}, {"n_q", o.n_q}, {"codebook_size", c.bins},
                           {"sample_rate", c.sample_rate}, {"frame_rate", c.frame_rate},
                           {"source_sample_rate", l.rate}, {"source_channels", l.channels},
                           {"weights_fingerprint", engine.model().fingerprint},
                           {"config_fingerprint", engine.model().config_fingerprint()}, {"tool_version", MIMI_VERSION}};
  MimiWriter w(bytes, header);
  const bool mimi = o.format == "mimi";
  StreamStats st;
  st.n_q = o.n_q;
  if (mimi) out.write(bytes.data(), bytes.size()), st.bytes += bytes.size();
  bytes.clear();
  std::vector<float> pending;  // 24 kHz mono samples not yet encoded
  std::vector<float> block, mono;
  std::vector<int32_t> fm;
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
      fm.resize(size_t(o.n_q) * size_t(n));
      for (int64_t f = 0; f < n; ++f)
        for (int k = 0; k < o.n_q; ++k) fm[size_t(f * o.n_q + k)] = codes[size_t(k * n + f)];
      if (mimi) {
        w.append_chunk(fm.data(), n);
      } else {
        std::string s;
        for (int64_t f = 0; f < n; ++f) {
          for (int k = 0; k < o.n_q; ++k) s += (k ? " " : "") + std::to_string(fm[size_t(f * o.n_q + k)]);
          s += '\n';
        }
        bytes.insert(bytes.end(), s.begin(), s.end());
      }
      out.write(bytes.data(), bytes.size());  // every complete frame goes out now
      st.bytes += bytes.size();
      bytes.clear();
      st.frames += n;
      pending.erase(pending.begin(), pending.begin() + n * fs);
    }
  };
  const int64_t block_frames = std::max<int64_t>(1, 16384 / l.bytes_per_frame());
  int64_t frames_in = 0;
  for (int64_t got; (got = reader.read(block, block_frames, false)) > 0;) {
    mono.resize(size_t(got));
    downmix(block.data(), got, l.channels, -1, mono.data(), frames_in, l.rate, what);
    frames_in += got;
    const size_t before = pending.size();
    rs.process(mono.data(), mono.size(), pending);
    st.samples += int64_t(pending.size() - before);
    encode_ready(false);
  }
  if (const std::string s = reader.shortfall(); !s.empty()) spdlog::warn("{}: {}", what, s);
  const size_t before = pending.size();
  rs.process(nullptr, 0, pending);
  st.samples += int64_t(pending.size() - before);
  if (st.samples == 0) throw Error(ErrorKind::Input, what + ": no audio samples");
  encode_ready(true);
  if (mimi) {
    w.finish(st.samples);
    out.write(bytes.data(), bytes.size());
    st.bytes += bytes.size();
  }
  out.commit();
  return st;
}

StreamStats stream_decode(Engine& engine, const StreamDecodeOptions& o) {
  const Config& c = engine.config();
  const int64_t fs = c.frame_size();
  const std::string what = o.input == "-" ? "stdin" : o.input;
  if (!o.raw_sample.empty() && o.raw_sample != "s16le" && o.raw_sample != "f32le")
    throw Error(ErrorKind::Usage, "--raw-format for decode output must be s16le or f32le");
  InputFd in{open_in(o.input)};
  uint8_t pre[12];
  const size_t got = read_some(in.fd, pre, 12, true, what);
  if (got == 0) throw Error(ErrorKind::Input, what + ": empty token stream");
  const bool mimi = got == 12 && std::memcmp(pre, kMimiMagic, 4) == 0;
  int n_q_file = 0, bits = 0;
  std::optional<int> source_rate;  // as the .mimi header records it (--sample-rate source)
  std::string text_buf;
  if (mimi) {
    if (pre[4] != kMimiVersion) throw Error(ErrorKind::Input, what + ": unsupported .mimi version " + std::to_string(pre[4]));
    const uint32_t L = le32(pre + 8);
    if (L > kMimiMaxHeaderBytes) throw Error(ErrorKind::Input, what + ": .mimi header length " + std::to_string(L) + " is not plausible");
    std::vector<uint8_t> h(size_t(L) + 4);
    if (read_some(in.fd, h.data(), h.size(), true, what) != h.size()) throw Error(ErrorKind::Input, what + ": truncated header");
    if (crc32(h.data(), L) != le32(h.data() + L)) throw Error(ErrorKind::Input, what + ": header CRC mismatch (damaged stream)");
    const MimiHeader mh = parse_mimi_header(h.data(), L, what);
    n_q_file = mh.n_q;
    bits = mh.bits;
    if (const auto sr = mh.json.find("source_sample_rate"); sr != mh.json.end() && sr->is_number_integer())
      source_rate = sr->get<int>();
    if (mh.codebook_size != c.bins)
      throw Error(ErrorKind::Input, what + ": codebook size " + std::to_string(mh.codebook_size) + " does not match the model's " +
                                        std::to_string(c.bins));
    const auto fp = mh.json.find("weights_fingerprint");
    const std::string fpr = fp != mh.json.end() && fp->is_string() ? fp->get<std::string>() : "";
    if (!fpr.empty() && fpr != engine.model().fingerprint && !o.allow_weights_mismatch)
      throw Error(ErrorKind::Weights, what + ": made with other weights (fingerprint " + fpr +
                                          "); pass --allow-weights-mismatch to decode anyway");
    // (the same tensors under another config: other codes, refused alike; absent in older streams)
    const auto cf = mh.json.find("config_fingerprint");
    const std::string cfr = cf != mh.json.end() && cf->is_string() ? cf->get<std::string>() : "";
    if (!cfr.empty() && cfr != engine.model().config_fingerprint() && !o.allow_weights_mismatch)
      throw Error(ErrorKind::Weights, what + ": made with another config (config fingerprint " + cfr + ", loaded " +
                                          engine.model().config_fingerprint() +
                                          "); pass --allow-weights-mismatch to decode anyway");
  } else {
    // 0xEF: a UTF-8 byte-order mark (parse_text_frame skips it on line 1, or refuses the line)
    if (!(std::isdigit(pre[0]) || pre[0] == '#' || pre[0] == ' ' || pre[0] == '\t' || pre[0] == '\n' || pre[0] == '\r' ||
          uint8_t(pre[0]) == 0xEF))
      throw Error(ErrorKind::Input, what + ": not a token stream (.mimi or text lines of codes)");
    text_buf.assign(reinterpret_cast<char*>(pre), got);
  }
  const int rate = output_rate(c.sample_rate, source_rate, o.sample_rate, what);
  // opened once the input is known to be tokens: audio in the container the output's name says,
  // through the file modes' writer (on a pipe a WAV whose header says "unknown length"), or the
  // samples alone (--raw-format), converted alike
  const bool raw = !o.raw_sample.empty();
  const SampleFormat sf = !raw ? o.sample_format : o.raw_sample == "f32le" ? SampleFormat::F32 : SampleFormat::S16;
  AudioWriter out(o.out, rate, sf, o.force, -1, -1, raw);
  StreamResampler rs(c.sample_rate, rate);  // passes the samples through at the model's rate
  std::vector<float> resampled;
  auto write = [&](const float* y, int64_t n) {  // n more model-rate samples, or nullptr: the end
    resampled.clear();
    rs.process(y, size_t(n), resampled);
    out.write(resampled.data(), int64_t(resampled.size()));
  };
  StreamStats st;
  DecodePlan* plan = nullptr;
  int n_q = 0;
  std::vector<int32_t> col;
  auto emit = [&](const int32_t* frame, int rows) {  // one frame, n_q codes
    if (!plan) {
      n_q = o.n_q > 0 ? o.n_q : rows;
      if (n_q > rows) throw Error(ErrorKind::Usage, what + ": --n-q " + std::to_string(n_q) + " but the stream holds " + std::to_string(rows));
      if (rows > c.n_q)
        throw Error(ErrorKind::Input, what + ": " + std::to_string(rows) + " codebooks, the model has " + std::to_string(c.n_q));
      plan = &engine.decode_plan(1, n_q);
      plan->reset();
    }
    col.assign(frame, frame + n_q);
    for (int k = 0; k < n_q; ++k)
      if (col[size_t(k)] < 0 || col[size_t(k)] >= c.bins)
        throw Error(ErrorKind::Input, what + ": frame " + std::to_string(st.frames) + ": code " + std::to_string(col[size_t(k)]) +
                                          " outside [0, " + std::to_string(c.bins) + ")");
    const double t0 = now();
    plan->push(col.data(), 1);
    const double dt = now() - t0;
    st.compute_s += dt;
    st.max_frame_s = std::max(st.max_frame_s, dt);
    write(plan->output().ptr(), fs);
    ++st.frames;
    st.samples += fs;
  };
  if (mimi) {
    std::vector<uint8_t> body;
    std::vector<int32_t> codes;
    std::string damage;  // what ended the stream early: an error, or with --recover a warning
    for (;;) {
      uint8_t tag[8];
      const size_t t = read_some(in.fd, tag, 4, true, what);
      if (t < 4) {
        damage = "stream ended without its end record (truncated) after " + std::to_string(st.frames) + " frames";
        break;
      }
      if (std::memcmp(tag, "END!", 4) == 0) {
        // The end record, held as the file reader holds it (mimi_container.cpp): whole, its CRC,
        // the frames it counts, and nothing after it (a second .mimi appended was dropped, exit 0).
        uint8_t end[kMimiEndBody], more;
        damage = read_some(in.fd, end, sizeof end, true, what) != sizeof end ? "truncated inside the end record"
                                                                              : mimi_end_record_problem(end, st.frames);
        if (damage.empty() && read_some(in.fd, &more, 1, true, what) != 0) damage = "unexpected bytes after the end record";
        break;
      }
      if (std::memcmp(tag, "FRMS", 4) != 0 || read_some(in.fd, tag + 4, 4, true, what) != 4) {
        damage = "damaged stream after " + std::to_string(st.frames) + " frames";
        break;
      }
      const uint32_t nf = le32(tag + 4);
      if (nf == 0 || nf > kMimiMaxChunkFrames) {
        damage = "chunk claims " + std::to_string(nf) + " frames after " + std::to_string(st.frames) +
                 " frames (damaged stream)";
        break;
      }
      const size_t payload = size_t((uint64_t(nf) * uint64_t(n_q_file) * uint64_t(bits) + 7) / 8);
      body.resize(4 + payload + 4);
      std::memcpy(body.data(), tag + 4, 4);
      if (read_some(in.fd, body.data() + 4, payload + 4, true, what) != payload + 4) {
        damage = "truncated chunk after " + std::to_string(st.frames) + " frames";
        break;
      }
      if (crc32(body.data(), 4 + payload) != le32(body.data() + 4 + payload)) {
        damage = "chunk CRC mismatch after " + std::to_string(st.frames) + " frames";
        break;
      }
      codes.resize(size_t(nf) * size_t(n_q_file));  // frame-major
      unpack_codes(body.data() + 4, codes.size(), bits, codes.data());
      for (uint32_t f = 0; f < nf; ++f) emit(codes.data() + size_t(f) * size_t(n_q_file), n_q_file);
    }
    if (!damage.empty()) {
      if (!o.recover || st.frames == 0) throw Error(ErrorKind::Input, what + ": " + damage);
      spdlog::warn("{}: {}; --recover: kept the {} frames before it", what, damage, st.frames);
    }
  } else {
    std::vector<int32_t> frame;
    char buf[65536];
    size_t start = 0;  // of the first unparsed line in text_buf
    int64_t line = 0;
    bool eof = false, damaged = false;
    for (;;) {
      size_t nl;
      while ((nl = text_buf.find('\n', start)) != std::string::npos) {
        ++line;
        bool is_frame = false;
        try {
          is_frame = parse_text_frame(text_buf.data() + start, text_buf.data() + nl, frame, what, line);
          if (is_frame && n_q_file == 0) n_q_file = int(std::min<size_t>(frame.size(), 1 << 20));
          if (is_frame && int(frame.size()) != n_q_file)
            throw Error(ErrorKind::Input, what + ": line " + std::to_string(line) + " has " + std::to_string(frame.size()) +
                                              " codes, earlier lines " + std::to_string(n_q_file));
        } catch (const Error& e) {  // a line that is not a frame like those before it: damage, as in read_text
          if (!o.recover || st.frames == 0 || e.kind() != ErrorKind::Input) throw;
          spdlog::warn("{}; --recover: kept the {} frames before it", e.what(), st.frames);
          eof = damaged = true;
          break;
        }
        if (is_frame) emit(frame.data(), n_q_file);
        start = nl + 1;
      }
      if (damaged) break;
      text_buf.erase(0, start);  // once per read, so long inputs stay linear
      start = 0;
      if (text_buf.size() > kMaxTextLine)
        throw Error(ErrorKind::Input, what + ": line " + std::to_string(line + 1) + " is longer than " +
                                          std::to_string(kMaxTextLine) + " bytes; not a text token stream");
      if (eof) break;
      const size_t r = read_some(in.fd, reinterpret_cast<uint8_t*>(buf), sizeof buf, false, what);
      if (r == 0) {
        eof = true;
        if (!text_buf.empty()) text_buf += '\n';  // a last line without its newline
        continue;
      }
      text_buf.append(buf, r);
    }
  }
  if (st.frames == 0) throw Error(ErrorKind::Input, what + ": no frames in the token stream");
  write(nullptr, 0);  // the resampler's tail
  st.bytes = out.finish();
  st.n_q = n_q;
  st.sample_rate = rate;
  return st;
}

}  // namespace mimi::app
