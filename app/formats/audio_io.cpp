#include "app/formats/audio_io.h"

#include <sndfile.h>
#include <soxr.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "app/formats/pcm_stream.h"
#include "app/formats/sndfile_io.h"
#include "app/sys/file_io.h"
#include "codec/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <new>
#include <cstdio>
#include <memory>

namespace mimi::app {
namespace {

}  // namespace

void check_layout(int rate, int channels, const std::string& what) {
  if (channels < 1 || channels > kMaxChannels)
    throw Error(ErrorKind::Input, what + ": header says " + std::to_string(channels) + " channels (1 to " +
                                      std::to_string(kMaxChannels) + " supported)");
  if (rate < kMinSampleRate || rate > kMaxSampleRate)
    throw Error(ErrorKind::Input, what + ": header says " + std::to_string(rate) + " Hz (supported: " +
                                      std::to_string(kMinSampleRate) + " to " + std::to_string(kMaxSampleRate) + " Hz)");
}

AudioInfo probe_audio(const std::vector<uint8_t>& bytes, const std::string& what) {
  MemFile m;
  m.in = &bytes;
  SF_INFO info{};
  SF_VIRTUAL_IO io = vio();
  std::string why;
  SNDFILE* f = sf_open_with_error(
      [&] {
        m.pos = 0;
        info = SF_INFO{};
        return sf_open_virtual(&io, SFM_READ, &info, &m);
      },
      why);
  if (!f) throw Error(ErrorKind::Input, what + ": cannot read audio: " + why);
  sf_close(f);
  check_layout(info.samplerate, info.channels, what);
  return {info.samplerate, info.channels, int64_t(info.frames)};
}

AudioContainer container_for(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
  if (ext == ".flac") return AudioContainer::Flac;
  if (ext == ".ogg" || ext == ".oga") return AudioContainer::Ogg;
  if (ext.empty() || ext == ".wav" || ext == ".wave" || ext == ".rf64") return AudioContainer::Wav;
  // x.mp3 must not silently hold a WAV; an existing device or FIFO (/dev/null) takes WAV as it is
  struct stat st{};
  if (path == "-" || (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)))
    return AudioContainer::Wav;
  throw Error(ErrorKind::Usage, path + ": cannot write '" + ext + "' audio; decoded audio is .wav, .flac or .ogg");
}

namespace {
// Writes the true data size into the open-ended RIFF header of a WAV held whole in memory
// (libsndfile takes a data size of 0 as no samples at all).
void close_open_ended(std::vector<uint8_t>& bytes, const PcmReader& header) {
  const uint64_t at = header.data_size_at();
  if (!header.open_ended() || at == 0 || at + 4 > bytes.size() || header.header_bytes() > bytes.size()) return;
  const uint32_t v = uint32_t(std::min<uint64_t>(bytes.size() - header.header_bytes(), 0xFFFFFFFEu));
  for (int k = 0; k < 4; ++k) bytes[size_t(at) + size_t(k)] = uint8_t(v >> (8 * k));
}
}  // namespace

struct AudioReader::Impl {
  std::vector<uint8_t> bytes;  // stdin, not WAV
  MemFile mem;
  FdFile file;  // a regular file, read through in_vio
  SF_VIRTUAL_IO io{};
  SNDFILE* f = nullptr;
  std::unique_ptr<PcmReader> pcm;  // stdin, WAV
  int64_t got = 0;
  int fd = -1;  // a FIFO or device we opened
  std::string what, truncated;
};

AudioReader::AudioReader(const std::string& path) : impl_(new Impl) {
  std::unique_ptr<Impl> guard(impl_);
  impl_->what = path == "-" ? "stdin" : path;
  const std::string& what = impl_->what;
  SF_INFO info{};
  struct stat st{};
  int fd = 0;
  std::string why;  // libsndfile's words when no open succeeds
  auto open_read = [&](auto* source) {
    return sf_open_with_error(
        [&] {
          source->pos = 0;
          if constexpr (requires { source->err; }) source->err = 0;
          info = SF_INFO{};
          return sf_open_virtual(&impl_->io, SFM_READ, &info, source);
        },
        why);
  };
  if (path != "-") {
    if (::stat(path.c_str(), &st) != 0) throw sys_error(errno, ErrorKind::Input, path, "cannot open");
    if (S_ISDIR(st.st_mode)) throw Error(ErrorKind::Input, path + ": is a directory");
  }
  // stdin, a FIFO, a device, and a "regular" file of size 0 (/proc and sysfs files report 0 and
  // hold data or fail to read): read as it comes, so emptiness is what a read says, and a read
  // error is judged by its errno like any other (EIO: the machine's failure, not "empty")
  const bool streamed_input = path == "-" || !S_ISREG(st.st_mode) || st.st_size == 0;
  OpenEnded how = OpenEnded::No;
  if (streamed_input) {
    if (path != "-") {
      fd = open_input(path);
      impl_->fd = fd;
    }
    std::vector<uint8_t> head(12);
    std::unique_ptr<PcmReader> whole;  // a WAV read whole: its header, for an open data size
    head.resize(read_some(fd, head.data(), head.size(), true, what));
    if (head.empty()) throw Error(ErrorKind::Input, what + ": is empty (no audio)");
    if (looks_like_wav(head.data(), head.size())) {
      impl_->pcm = std::make_unique<PcmReader>(fd, what, head);
      impl_->pcm->read_wav_header();
      if (impl_->pcm->unstreamable().empty()) {
        const PcmLayout& l = impl_->pcm->layout();
        rate_ = l.rate;
        channels_ = l.channels;
        frames_ = std::max<int64_t>(impl_->pcm->declared_frames(), 0);
        guard.release();
        return;
      }
      // a WAV of samples the stream reader does not convert (8-bit, 64-bit float, mu-law...):
      // whole, through libsndfile, as a file of it would be
      head = impl_->pcm->take_seen();
      if (head.size() != impl_->pcm->header_bytes()) throw Error(ErrorKind::Input, impl_->pcm->unstreamable());
      whole = std::move(impl_->pcm);
    }
    impl_->bytes = std::move(head);  // other formats: libsndfile seeks, so from memory
    bool probed = whole != nullptr;  // (a WAV's header has been read: it is audio)
    for (uint8_t buf[1 << 16];;) {
      const size_t n = read_some(fd, buf, sizeof buf, false, what);
      if (n == 0) break;
      if (!probed && impl_->bytes.size() >= kFormatProbeBytes) {  // more follows: decide now
        refuse_unrecognised_stream(impl_->bytes, what);
        probed = true;
      }
      if (impl_->bytes.size() + n > kMaxStreamedInputBytes)
        throw Error(ErrorKind::Input, what + ": more than " + std::to_string(kMaxStreamedInputBytes >> 30) +
                                          " GiB of non-WAV audio from a stream (send WAV to stream it)");
      impl_->bytes.insert(impl_->bytes.end(), buf, buf + n);
    }
    if (whole) close_open_ended(impl_->bytes, *whole);
    impl_->mem.in = &impl_->bytes;
    impl_->io = vio();
    impl_->f = open_read(&impl_->mem);
  } else {
    fd = open_input(path);
    impl_->fd = fd;
    if (::fstat(fd, &st) != 0) throw sys_error(errno, ErrorKind::Input, path, "cannot stat");
    how = adopt_open_ended_wav(fd, st, what);
    if (how == OpenEnded::Streamed) {
      guard.release();
      return;
    }
  }
  if (how == OpenEnded::Whole) {  // an open-ended WAV file read whole (adopt_open_ended_wav)
    impl_->mem.in = &impl_->bytes;
    impl_->io = vio();
    impl_->f = open_read(&impl_->mem);
  } else if (!streamed_input) {
    impl_->file.fd = fd;
    impl_->file.size = sf_count_t(st.st_size);
    impl_->io = in_vio();
    impl_->f = open_read(&impl_->file);
    if (impl_->file.err) {
      if (impl_->f) sf_close(impl_->f), impl_->f = nullptr;
      throw sys_error(impl_->file.err, ErrorKind::Input, path, "read failed");
    }
  }
  if (!impl_->f) {
    uint8_t magic[12] = {0};
    const bool wav = impl_->fd >= 0 && ::pread(impl_->fd, magic, 12, 0) == 12 && looks_like_wav(magic, 12);
    if (path != "-" && S_ISREG(st.st_mode) && wav) {  // a WAV libsndfile refuses: say what in its header is wrong
      const int wfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (wfd >= 0) {
        try {
          PcmReader probe(wfd, what);
          probe.read_wav_header();
        } catch (const Error& e) {
          why = e.what();
          why = why.substr(std::min(why.size(), what.size() + 2));
        } catch (...) {
        }
        ::close(wfd);
      }
    }
    throw Error(ErrorKind::Input, what + ": cannot read audio: " + why);
  }
  rate_ = info.samplerate;
  channels_ = info.channels;
  frames_ = info.frames > 0 && info.frames < SF_COUNT_MAX ? int64_t(info.frames) : 0;
  try {
    check_layout(rate_, channels_, what);
  } catch (...) {
    sf_close(impl_->f);
    throw;
  }
  // libsndfile reads a file shorter than its header says up to its end, noting it in its log as
  // "data : 48000 (should be 20000)": keep that for shortfall().
  char log[4096] = {0};
  sf_command(impl_->f, SFC_GET_LOG_INFO, log, sizeof log - 1);
  const std::string l(log);
  for (size_t at = 0; (at = l.find("data", at)) != std::string::npos; at += 4) {
    const size_t eol = l.find('\n', at), sb = l.find("(should be", at);
    if (sb != std::string::npos && sb < eol && (at == 0 || l[at - 1] == '\n')) {
      impl_->truncated = "truncated: the header's data size is " + l.substr(l.find(':', at) + 2, sb - l.find(':', at) - 3) +
                         " bytes, the file holds " + l.substr(sb + 11, l.find(')', sb) - sb - 11);
      break;
    }
  }
  guard.release();
}

// A WAV file whose header leaves the data size open (0 or 0xFFFFFFFF, as a live-stream writer
// leaves it) holds the samples up to its end: libsndfile read 0 samples of such a file while the
// same bytes on stdin gave them all. Streamed: read like the stream, with the length from the
// file's size. Whole: samples only libsndfile converts, so the file is read into memory with the
// true size written into its header. No: every other file, rewound, for libsndfile.
AudioReader::OpenEnded AudioReader::adopt_open_ended_wav(int fd, const struct ::stat& st, const std::string& what) {
  uint8_t magic[12];
  if (::pread(fd, magic, 12, 0) != 12 || !looks_like_wav(magic, 12)) return OpenEnded::No;
  auto pcm = std::make_unique<PcmReader>(fd, what);
  bool open_ended = false;
  try {
    pcm->read_wav_header();
    open_ended = pcm->open_ended();
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Environment) throw;
  }
  const uint64_t size = uint64_t(st.st_size), header = pcm->header_bytes();
  if (open_ended && pcm->unstreamable().empty()) {
    pcm->set_data_bytes(size > header ? size - header : 0);
    const PcmLayout& l = pcm->layout();
    rate_ = l.rate;
    channels_ = l.channels;
    frames_ = std::max<int64_t>(pcm->declared_frames(), 0);
    impl_->pcm = std::move(pcm);
    return OpenEnded::Streamed;
  }
  if (open_ended && size <= kMaxStreamedInputBytes) {
    impl_->bytes.resize(size_t(size));
    size_t got = 0;
    while (got < size) {
      const ssize_t k = ::pread(fd, impl_->bytes.data() + got, size_t(size) - got, off_t(got));
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) throw sys_error(errno, ErrorKind::Input, what, "read failed");
      if (k == 0) break;
      got += size_t(k);
    }
    impl_->bytes.resize(got);
    close_open_ended(impl_->bytes, *pcm);
    return OpenEnded::Whole;
  }
  if (::lseek(fd, 0, SEEK_SET) != 0) throw sys_error(errno, ErrorKind::Input, what, "cannot seek");
  return OpenEnded::No;
}

AudioReader::~AudioReader() {
  if (impl_->f) sf_close(impl_->f);
  if (impl_->fd > 0) ::close(impl_->fd);
  delete impl_;
}

int64_t AudioReader::read(std::vector<float>& out, int64_t frames) {
  if (impl_->pcm) {
    const int64_t got = impl_->pcm->read(out, frames, true);
    impl_->got += got;
    return got;
  }
  // No longer than what the header says is left (with a floor: some formats' counts are
  // estimates), so a short file's read does not zero-fill a whole 64 K-frame block per channel.
  if (frames_ > 0) frames = std::min(frames, std::max<int64_t>(frames_ - impl_->got, 4096));
  out.resize(size_t(frames * channels_));
  const sf_count_t got = sf_readf_float(impl_->f, out.data(), frames);
  if (impl_->file.err) throw sys_error(impl_->file.err, ErrorKind::Input, impl_->what, "read failed");
  out.resize(size_t(std::max<sf_count_t>(got, 0) * channels_));
  impl_->got += std::max<sf_count_t>(got, 0);
  return got > 0 ? got : 0;
}

std::string AudioReader::truncated_at_open() const { return impl_->truncated; }

std::string AudioReader::shortfall() const {
  if (!impl_->truncated.empty()) return impl_->truncated;
  if (impl_->pcm) return impl_->pcm->shortfall();
  if (frames_ > 0 && impl_->got < frames_)
    return "truncated: the header promises " + std::to_string(frames_) + " frames, the file holds " +
           std::to_string(impl_->got);
  return "";
}

void downmix(const float* x, int64_t frames, int channels, int channel, float* mono, int64_t first_frame, int rate,
             const std::string& what) {
  for (int64_t i = 0; i < frames; ++i) {
    const float* f = x + i * channels;
    float s = 0.0f;
    bool ok = true;
    for (int c = 0; c < channels; ++c) {
      ok &= std::fabs(f[c]) <= kMaxAbsSample;  // false for NaN too
      s += f[c];
    }
    if (!ok) {
      int c = 0;
      while (std::fabs(f[c]) <= kMaxAbsSample) ++c;
      char at[64], value[64];
      std::snprintf(at, sizeof at, "%.3f", double(first_frame + i) / rate);
      std::snprintf(value, sizeof value, "%g", double(f[c]));
      const std::string kind = std::isnan(f[c]) ? "NaN" : std::isinf(f[c]) ? "infinite" : value;
      throw Error(ErrorKind::Input, what + ": sample " + std::to_string(first_frame + i) + " (" + at + " s), channel " +
                                        std::to_string(c) + " is " + kind + "; float samples must be finite and within +-" +
                                        std::to_string(int(kMaxAbsSample)) + " (full scale is +-1)");
    }
    mono[i] = channel >= 0 ? f[channel] : s / float(channels);
  }
}

namespace {

// libsoxr does not check every allocation it makes: under a memory limit it can use a failed
// malloc and crash (SIGSEGV), in soxr_create's filter design and in soxr_process's buffers (a
// stream's first calls, a longer input). It needs under 1 MB at a time (measured, VHQ, 1 Hz ..
// 384 kHz to 24 kHz), so 4 MB are asked for first, every time: a refusal is the machine's failure
// (bad_alloc: exit 75, a dataset shard left to resume), not a crash. Freed, the 4 MB stay in this
// thread's malloc arena (below glibc's trim threshold), where soxr's next allocations find them
// even while another thread takes what is left of the address space (a reader thread resamples
// while the main one builds its plan: the crash of 2026-12-07, 1 run in 3 of classes_probe3).
// The write keeps the compiler from dropping the malloc/free pair.
void soxr_headroom() {
  if (void* headroom = std::malloc(size_t(4) << 20)) {
    static_cast<volatile char*>(headroom)[0] = 0;
    std::free(headroom);
  } else {
    throw std::bad_alloc();
  }
}

}  // namespace

StreamResampler::StreamResampler(int from, int to) {
  if (from == to) return;
  soxr_headroom();
  soxr_error_t err = nullptr;
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t q = soxr_quality_spec(SOXR_VHQ, 0);
  // one thread, said outright: Debian's libsoxr is built with OpenMP, and a team of libgomp's
  // (spinning 300 000 iterations when idle) beside the kernels' own workers is what issue 29 removed
  const soxr_runtime_spec_t rt = soxr_runtime_spec(1);
  soxr_ = soxr_create(double(from), double(to), 1, &err, &io, &q, &rt);
  if (err) throw Error(ErrorKind::Input, std::string("resampler: ") + err);
}

StreamResampler::~StreamResampler() {
  if (soxr_) soxr_delete(static_cast<soxr_t>(soxr_));
}

void StreamResampler::process(const float* in, size_t n, std::vector<float>& out) {
  if (!soxr_) {
    if (in) out.insert(out.end(), in, in + n);
    return;
  }
  float buf[8192];
  size_t idone = 0;
  for (;;) {
    size_t used = 0, odone = 0;
    soxr_headroom();
    soxr_process(static_cast<soxr_t>(soxr_), in ? in + idone : nullptr, in ? n - idone : 0, &used, buf, 8192, &odone);
    idone += used;
    out.insert(out.end(), buf, buf + odone);
    if (odone == 0 && (in == nullptr || idone >= n)) break;
  }
}

namespace {

// libsndfile virtual I/O straight onto an OutputFile's descriptor: every write error is recorded
// in the OutputFile (libsndfile drops some, e.g. in the final flush of FLAC/OGG), and a
// non-seekable output accepts only "seeks" to where it already is.
struct FdSink {
  OutputFile* out;
  sf_count_t pos = 0, len = 0;
};
sf_count_t fd_len(void* u) { return static_cast<FdSink*>(u)->len; }
sf_count_t fd_seek(sf_count_t off, int whence, void* u) {
  auto* s = static_cast<FdSink*>(u);
  const sf_count_t p = whence == SEEK_SET ? off : whence == SEEK_CUR ? s->pos + off : s->len + off;
  if (p == s->pos) return p;
  if (!s->out->seekable() || p < 0 || ::lseek(s->out->fd(), off_t(p), SEEK_SET) < 0) return -1;
  s->pos = p;
  return p;
}
sf_count_t fd_read(void* dst, sf_count_t n, void* u) {
  auto* s = static_cast<FdSink*>(u);
  if (!s->out->seekable()) return 0;
  const ssize_t r = ::read(s->out->fd(), dst, size_t(n));
  if (r <= 0) return 0;
  s->pos += r;
  return r;
}
sf_count_t fd_write(const void* src, sf_count_t n, void* u) {
  auto* s = static_cast<FdSink*>(u);
  const auto* p = static_cast<const uint8_t*>(src);
  sf_count_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(s->out->fd(), p + done, size_t(n - done));
    if (w < 0) {
      if (errno == EINTR) continue;
      s->out->fail(errno);
      break;
    }
    done += w;
  }
  s->pos += done;
  s->len = std::max(s->len, s->pos);
  return done;
}
sf_count_t fd_tell(void* u) { return static_cast<FdSink*>(u)->pos; }

}  // namespace

// A WAV header for a stream: sizes exact when the sample count is known and fits, else the
// "unknown length" 0xFFFFFFFF that libsndfile, ffmpeg and sox read to the end of the data.
std::vector<uint8_t> wav_stream_header(int rate, SampleFormat fmt, int64_t samples) {
  const uint16_t bytes = fmt == SampleFormat::S16 ? 2 : fmt == SampleFormat::S24 ? 3 : 4;
  const uint64_t data = samples >= 0 ? uint64_t(samples) * bytes : UINT64_MAX;
  const uint32_t data32 = data > 0xFFFFFFFFull - 36 ? 0xFFFFFFFFu : uint32_t(data);
  const uint32_t riff32 = data32 == 0xFFFFFFFFu ? 0xFFFFFFFFu : data32 + 36;
  std::vector<uint8_t> h;
  auto u32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) h.push_back(uint8_t(v >> (8 * i))); };
  auto u16 = [&](uint16_t v) { h.push_back(uint8_t(v)); h.push_back(uint8_t(v >> 8)); };
  auto tag = [&](const char* t) { h.insert(h.end(), t, t + 4); };
  tag("RIFF"); u32(riff32); tag("WAVE");
  tag("fmt "); u32(16); u16(fmt == SampleFormat::F32 ? 3 : 1); u16(1); u32(uint32_t(rate));
  u32(uint32_t(rate) * bytes); u16(bytes); u16(uint16_t(8 * bytes));
  tag("data"); u32(data32);
  return h;
}

int output_rate(int model_rate, std::optional<int> source_rate, const std::string& flag, const std::string& what) {
  if (flag.empty()) return model_rate;
  if (flag == "source") {
    if (!source_rate) throw Error(ErrorKind::Input, what + ": the tokens do not record the source rate");
    const int src = *source_rate;
    if (src < kMinSampleRate || src > kMaxSampleRate)
      throw Error(ErrorKind::Input, what + ": recorded source rate " + std::to_string(src) + " Hz is not a rate to write");
    return src;
  }
  int to = 0;
  const auto r = std::from_chars(flag.data(), flag.data() + flag.size(), to);
  if (r.ec != std::errc() || r.ptr != flag.data() + flag.size() || to < kMinSampleRate || to > kMaxSampleRate)
    throw Error(ErrorKind::Usage, "--sample-rate must be a rate in Hz from " + std::to_string(kMinSampleRate) + " to " +
                                      std::to_string(kMaxSampleRate) + ", or 'source', got '" + flag + "'");
  return to;
}

struct AudioWriter::Impl {
  std::unique_ptr<OutputFile> out;
  FdSink sink{nullptr};
  SF_VIRTUAL_IO io{fd_len, fd_seek, fd_read, fd_write, fd_tell};
  SNDFILE* f = nullptr;
  int64_t written = 0, wav_limit = INT64_MAX;
  uint64_t header = 0;  // bytes written before libsndfile's (the stream header)
};

namespace {
constexpr size_t kEncoderSetup = size_t(512) << 10;  // libvorbis's encoder set-up, with room to spare
constexpr int64_t kWritePiece = 8192;                 // samples a libsndfile write takes at most
}  // namespace

AudioWriter::AudioWriter(const std::string& path, int rate, SampleFormat fmt, bool force, int64_t expected_samples,
                         int64_t max_samples, bool headerless)
    : impl_(new Impl) {
  std::unique_ptr<Impl> guard(impl_);
  const AudioContainer container = path == "-" || headerless ? AudioContainer::Wav : container_for(path);
  int sub = fmt == SampleFormat::S16 ? SF_FORMAT_PCM_16 : fmt == SampleFormat::S24 ? SF_FORMAT_PCM_24 : SF_FORMAT_FLOAT;
  // Plain WAV (PCM tag, what every reader takes) unless the output may pass the 4 GiB that RIFF
  // sizes can count: then RF64. An output of unknown size that outgrows WAV fails in write().
  const int64_t bytes_per = fmt == SampleFormat::S16 ? 2 : fmt == SampleFormat::S24 ? 3 : 4;
  const bool big = max_samples > (int64_t(0xFFFFFFFF) - (1 << 20)) / bytes_per;
  int major = big ? SF_FORMAT_RF64 : SF_FORMAT_WAV;
  impl_->wav_limit = major == SF_FORMAT_WAV ? (int64_t(0xFFFFFFFF) - (1 << 20)) / bytes_per : INT64_MAX;
  // What a container cannot hold is refused here, before the output exists, as a usage error (it
  // was libsndfile's "Format not recognised", exit 5, after the output was begun). The rates are
  // the encoders': libFLAC writes only rates a frame header can state (any up to 65535 Hz, tens
  // of Hz up to 655350), libvorbis none above 200 kHz.
  const auto refuse_rate = [&](const char* name, const std::string& which) {
    throw Error(ErrorKind::Usage, path + ": " + name + " cannot hold " + std::to_string(rate) + " Hz (" + which +
                                      "); write WAV, or give --sample-rate another rate");
  };
  if (container == AudioContainer::Flac) {
    major = SF_FORMAT_FLAC;
    if (fmt == SampleFormat::F32) throw Error(ErrorKind::Usage, "FLAC cannot hold float samples (use s16 or s24)");
    if (rate > 655350 || (rate > 65535 && rate % 10 != 0))
      refuse_rate("FLAC", "its rates: any up to 65535 Hz, a multiple of 10 Hz up to 655350 Hz");
  } else if (container == AudioContainer::Ogg) {
    major = SF_FORMAT_OGG;
    sub = SF_FORMAT_VORBIS;
    // Vorbis is lossy and stores no sample format: s24 or f32 would be ignored, so they are refused
    if (fmt != SampleFormat::S16)
      throw Error(ErrorKind::Usage, "OGG Vorbis stores no sample format (it is lossy): --sample-format s24/f32 needs "
                                    "WAV or FLAC (s24)");
    if (rate > 200000) refuse_rate("OGG Vorbis", "at most 200000 Hz");
  }
  impl_->out = std::make_unique<OutputFile>(path, force);
  impl_->sink.out = impl_->out.get();
  const bool stream = !impl_->out->seekable();
  if (headerless) {
    major = SF_FORMAT_RAW;  // libsndfile's conversion and clipping, no header at all
    impl_->wav_limit = INT64_MAX;
  } else if (stream) {
    if (container != AudioContainer::Wav)
      throw Error(ErrorKind::Usage, path + ": FLAC and OGG need a regular output file; write WAV to pipes and devices");
    const std::vector<uint8_t> h = wav_stream_header(rate, fmt, expected_samples);
    impl_->out->write(h.data(), h.size());
    impl_->header = h.size();
    major = SF_FORMAT_RAW;  // libsndfile converts and clips the samples; the header is ours
    impl_->wav_limit = INT64_MAX;  // past 4 GiB the header says "unknown length", still valid
  }
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = 1;
  info.format = major | sub;
  std::string why;
  impl_->f = sf_open_write_alone(&impl_->io, &info, &impl_->sink, why);
  if (!impl_->f) throw Error(ErrorKind::Output, path + ": cannot write audio: " + why);
  if (fmt != SampleFormat::F32) sf_command(impl_->f, SFC_SET_CLIPPING, nullptr, SF_TRUE);  // clip, don't wrap
  // no PEAK chunk in float WAVs: it carries the wall-clock time, so the same codes would give
  // other bytes on every run
  else sf_command(impl_->f, SFC_SET_ADD_PEAK_CHUNK, nullptr, SF_FALSE);
  guard.release();
}

AudioWriter::~AudioWriter() {
  // An output given up (an error on the way): closing it sets libvorbis's encoder up when nothing
  // was written yet, unchecked (sndfile_io.h). Where the heap has no room for that, the handle is
  // left open instead (a leak on a path that ends the run with exit 75, not a SIGSEGV); the
  // temporary goes with its OutputFile either way.
  if (impl_->f) try {
      ensure_heap_headroom(kEncoderSetup);
      sf_close(impl_->f);
    } catch (const std::bad_alloc&) {
    }
  delete impl_;  // an unfinished output's temporary goes with its OutputFile
}

void AudioWriter::write(const float* mono, int64_t n) {
  if ((impl_->written += n) > impl_->wav_limit)
    throw Error(ErrorKind::Output, impl_->out->path() + ": more than 4 GiB of samples for a WAV file (write s16 or FLAC)");
  // In pieces of at most kWritePiece samples: libvorbis copies all it holds onto the stack at its
  // first analysis (alloca in _preextrapolate_helper) and grows its buffer to what is pending plus
  // twice a write, and a decoded chunk is up to 10 s (at 44.1 kHz, 1.8 MB of stack: past what the
  // main thread's stack could grow under `ulimit -v`, a SIGSEGV). Before each piece the address
  // space is shown to hold what libvorbis allocates for it, its encoder's set-up included (~340 KB
  // at the first write, measured with mallinfo2; sndfile_io.h), far more than the piece's 32 KB of
  // stack. WAV and FLAC bytes do not depend on the pieces (OGG's carry a random stream serial).
  for (int64_t done = 0; done < n;) {
    const int64_t k = std::min<int64_t>(n - done, kWritePiece);
    ensure_heap_headroom(size_t(k) * 3 * sizeof(float) + kEncoderSetup);
    if (sf_writef_float(impl_->f, mono + done, k) != k) {
      const int e = impl_->out->error();
      throw Error(ErrorKind::Output, (impl_->out->path() == "-" ? std::string("stdout") : impl_->out->path()) +
                                         ": write failed: " + (e ? std::strerror(e) : sf_strerror(impl_->f)));
    }
    done += k;
  }
}

uint64_t AudioWriter::finish() {
  ensure_heap_headroom(kEncoderSetup);  // the encoder's set-up (nothing written) or last blocks
  const int rc = sf_close(impl_->f);
  impl_->f = nullptr;
  if (rc != 0) impl_->out->fail(EIO);
  impl_->out->commit();  // fails with any write error recorded on the way
  return uint64_t(impl_->sink.len) + impl_->header;
}

}  // namespace mimi::app
