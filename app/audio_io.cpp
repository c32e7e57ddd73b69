#include "app/audio_io.h"

#include <sndfile.h>
#include <soxr.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "app/file_io.h"
#include "codec/error.h"

#include <fcntl.h>
#include <unistd.h>
#include <random>

namespace mimi::app {
namespace {

// libsndfile virtual I/O over a byte vector (read-only view or growable output).
struct MemFile {
  const std::vector<uint8_t>* in = nullptr;
  std::vector<uint8_t>* out = nullptr;
  sf_count_t pos = 0;
  sf_count_t size() const { return sf_count_t(in ? in->size() : out->size()); }
};

sf_count_t vio_len(void* u) { return static_cast<MemFile*>(u)->size(); }
sf_count_t vio_seek(sf_count_t off, int whence, void* u) {
  auto* m = static_cast<MemFile*>(u);
  sf_count_t p = whence == SEEK_SET ? off : whence == SEEK_CUR ? m->pos + off : m->size() + off;
  if (p < 0) return -1;
  m->pos = p;
  return p;
}
sf_count_t vio_read(void* dst, sf_count_t n, void* u) {
  auto* m = static_cast<MemFile*>(u);
  if (!m->in) return 0;
  const sf_count_t k = std::max<sf_count_t>(0, std::min(n, m->size() - m->pos));
  if (k > 0) std::memcpy(dst, m->in->data() + m->pos, size_t(k));
  m->pos += k;
  return k;
}
sf_count_t vio_write(const void* src, sf_count_t n, void* u) {
  auto* m = static_cast<MemFile*>(u);
  if (!m->out) return 0;
  if (size_t(m->pos + n) > m->out->size()) m->out->resize(size_t(m->pos + n));
  std::memcpy(m->out->data() + m->pos, src, size_t(n));
  m->pos += n;
  return n;
}
sf_count_t vio_tell(void* u) { return static_cast<MemFile*>(u)->pos; }

SF_VIRTUAL_IO vio() { return SF_VIRTUAL_IO{vio_len, vio_seek, vio_read, vio_write, vio_tell}; }

}  // namespace

AudioInfo probe_audio(const std::vector<uint8_t>& bytes, const std::string& what) {
  MemFile m;
  m.in = &bytes;
  SF_INFO info{};
  SF_VIRTUAL_IO io = vio();
  SNDFILE* f = sf_open_virtual(&io, SFM_READ, &info, &m);
  if (!f) throw Error(ErrorKind::Input, what + ": cannot read audio: " + sf_strerror(nullptr));
  sf_close(f);
  return {info.samplerate, info.channels, int64_t(info.frames)};
}

AudioContainer container_for(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
  if (ext == ".flac") return AudioContainer::Flac;
  if (ext == ".ogg" || ext == ".oga") return AudioContainer::Ogg;
  return AudioContainer::Wav;
}

struct AudioReader::Impl {
  std::vector<uint8_t> bytes;  // stdin
  MemFile mem;
  SF_VIRTUAL_IO io{};
  SNDFILE* f = nullptr;
};

AudioReader::AudioReader(const std::string& path) : impl_(new Impl) {
  SF_INFO info{};
  if (path == "-") {
    impl_->bytes = read_input(path);
    impl_->mem.in = &impl_->bytes;
    impl_->io = vio();
    impl_->f = sf_open_virtual(&impl_->io, SFM_READ, &info, &impl_->mem);
  } else {
    impl_->f = sf_open(path.c_str(), SFM_READ, &info);
  }
  if (!impl_->f) {
    const std::string err = sf_strerror(nullptr);
    delete impl_;
    throw Error(ErrorKind::Input, path + ": cannot read audio: " + err);
  }
  rate_ = info.samplerate;
  channels_ = info.channels;
  frames_ = info.frames > 0 && info.frames < SF_COUNT_MAX ? int64_t(info.frames) : 0;
  if (rate_ <= 0 || channels_ <= 0) {
    sf_close(impl_->f);
    delete impl_;
    throw Error(ErrorKind::Input, path + ": bad sample rate or channel count");
  }
}

AudioReader::~AudioReader() {
  sf_close(impl_->f);
  delete impl_;
}

int64_t AudioReader::read(std::vector<float>& out, int64_t frames) {
  out.resize(size_t(frames * channels_));
  const sf_count_t got = sf_readf_float(impl_->f, out.data(), frames);
  out.resize(size_t(std::max<sf_count_t>(got, 0) * channels_));
  return got > 0 ? got : 0;
}

StreamResampler::StreamResampler(int from, int to) {
  if (from == to) return;
  soxr_error_t err = nullptr;
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t q = soxr_quality_spec(SOXR_VHQ, 0);
  soxr_ = soxr_create(double(from), double(to), 1, &err, &io, &q, nullptr);
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
    soxr_process(static_cast<soxr_t>(soxr_), in ? in + idone : nullptr, in ? n - idone : 0, &used, buf, 8192, &odone);
    idone += used;
    out.insert(out.end(), buf, buf + odone);
    if (odone == 0 && (in == nullptr || idone >= n)) break;
  }
}

struct AudioWriter::Impl {
  std::string path, tmp;
  bool force = false;
  std::vector<uint8_t> mem;
  MemFile mf;
  SF_VIRTUAL_IO io{};
  SNDFILE* f = nullptr;
};

AudioWriter::AudioWriter(const std::string& path, int rate, SampleFormat fmt, bool force) : impl_(new Impl) {
  impl_->path = path;
  impl_->force = force;
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = 1;
  const AudioContainer container = path == "-" ? AudioContainer::Wav : container_for(path);
  int sub = fmt == SampleFormat::S16 ? SF_FORMAT_PCM_16 : fmt == SampleFormat::S24 ? SF_FORMAT_PCM_24 : SF_FORMAT_FLOAT;
  int major = SF_FORMAT_WAV;
  if (container == AudioContainer::Flac) {
    major = SF_FORMAT_FLAC;
    if (fmt == SampleFormat::F32) {
      delete impl_;
      throw Error(ErrorKind::Usage, "FLAC cannot hold float samples (use s16 or s24)");
    }
  } else if (container == AudioContainer::Ogg) {
    major = SF_FORMAT_OGG;
    sub = SF_FORMAT_VORBIS;
  }
  info.format = major | sub;
  if (path == "-") {
    impl_->mf.out = &impl_->mem;
    impl_->io = vio();
    impl_->f = sf_open_virtual(&impl_->io, SFM_WRITE, &info, &impl_->mf);
  } else {
    if (!force && std::filesystem::exists(path)) {
      delete impl_;
      throw Error(ErrorKind::Output, path + ": exists (use --force to overwrite)");
    }
    const std::filesystem::path target(path);
    const auto dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::random_device rd;
    impl_->tmp = (dir / ("." + target.filename().string() + ".tmp" + std::to_string(rd() % 1000000))).string();
    impl_->f = sf_open(impl_->tmp.c_str(), SFM_WRITE, &info);
  }
  if (!impl_->f) {
    const std::string err = sf_strerror(nullptr);
    delete impl_;
    throw Error(ErrorKind::Output, path + ": cannot write audio: " + err);
  }
  if (fmt != SampleFormat::F32) sf_command(impl_->f, SFC_SET_CLIPPING, nullptr, SF_TRUE);  // clip, don't wrap
}

AudioWriter::~AudioWriter() {
  if (impl_->f) sf_close(impl_->f);
  if (!impl_->tmp.empty()) ::unlink(impl_->tmp.c_str());  // not finished: leave nothing behind
  delete impl_;
}

void AudioWriter::write(const float* mono, int64_t n) {
  if (n > 0 && sf_writef_float(impl_->f, mono, n) != n) throw Error(ErrorKind::Output, impl_->path + ": write failed");
}

uint64_t AudioWriter::finish() {
  sf_close(impl_->f);
  impl_->f = nullptr;
  if (impl_->path == "-") {
    write_output("-", impl_->mem, true);
    return impl_->mem.size();
  }
  if (!impl_->force && std::filesystem::exists(impl_->path))
    throw Error(ErrorKind::Output, impl_->path + ": exists (use --force to overwrite)");
  const uint64_t bytes = std::filesystem::file_size(impl_->tmp);
  if (::rename(impl_->tmp.c_str(), impl_->path.c_str()) != 0)
    throw Error(ErrorKind::Output, impl_->path + ": cannot rename into place: " + std::strerror(errno));
  impl_->tmp.clear();
  return bytes;
}

}  // namespace mimi::app
