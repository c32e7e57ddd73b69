// libsndfile through virtual I/O, and the one way every audio file is opened (app/formats/sndfile_io.h).
#include "app/formats/sndfile_io.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <mutex>
#include <shared_mutex>

#include "codec/error.h"

namespace mimi::app {

namespace {

sf_count_t vio_len(void* u) { return static_cast<MemFile*>(u)->size(); }
sf_count_t vio_seek(sf_count_t off, int whence, void* u) {
  auto* m = static_cast<MemFile*>(u);
  const sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->size();
  sf_count_t p = 0;
  if (__builtin_add_overflow(base, off, &p) || p < 0) return -1;  // offsets come from the file's header
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


sf_count_t in_len(void* u) { return static_cast<FdFile*>(u)->size; }
sf_count_t in_seek(sf_count_t off, int whence, void* u) {
  auto* f = static_cast<FdFile*>(u);
  const sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? f->pos : f->size;
  sf_count_t p = 0;
  if (__builtin_add_overflow(base, off, &p) || p < 0) return -1;
  f->pos = p;
  return p;
}
sf_count_t in_read(void* dst, sf_count_t n, void* u) {
  auto* f = static_cast<FdFile*>(u);
  sf_count_t done = 0;
  while (done < n && !f->err) {
    const ssize_t k = ::pread(f->fd, static_cast<char*>(dst) + done, size_t(n - done), off_t(f->pos));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) f->err = errno;
    if (k <= 0) break;
    done += k;
    f->pos += k;
  }
  return done;
}
sf_count_t in_write(const void*, sf_count_t, void*) { return 0; }
sf_count_t in_tell(void* u) { return static_cast<FdFile*>(u)->pos; }

}  // namespace

SF_VIRTUAL_IO vio() { return SF_VIRTUAL_IO{vio_len, vio_seek, vio_read, vio_write, vio_tell}; }
SF_VIRTUAL_IO in_vio() { return SF_VIRTUAL_IO{in_len, in_seek, in_read, in_write, in_tell}; }

// libsndfile keeps the error of a failed open in one process-wide variable, which every open
// resets: read after a failure while another thread opens a good file, it says "No Error." (a
// plan probing headers on several threads recorded that text against a bad file, and the plan's
// bytes changed from run to run). Every open goes through here: opens run side by side under a
// shared lock; a failed one is tried again from the start under the exclusive lock, so the text
// read is this file's. Opens are attempted with fresh state by `attempt` (the stream positions
// rewound).
namespace {
std::shared_mutex g_sf_open;
}  // namespace

void ensure_heap_headroom(size_t bytes) {
  void* p = std::malloc(std::max(bytes, kMinHeadroom));
  if (!p) throw std::bad_alloc();
  asm volatile("" : : "r"(p) : "memory");  // (kept: a malloc freed unused may be elided)
  std::free(p);
}

SNDFILE* sf_open_with_error(const std::function<SNDFILE*()>& attempt, std::string& why, int* code) {
  ensure_heap_headroom(kMinHeadroom);
  {
    std::shared_lock<std::shared_mutex> shared(g_sf_open);
    if (SNDFILE* f = attempt()) return f;
  }
  std::unique_lock<std::shared_mutex> alone(g_sf_open);
  ensure_heap_headroom(kMinHeadroom);
  SNDFILE* f = attempt();
  if (!f) {
    why = sf_strerror(nullptr);
    // libsndfile calls some malformed headers its "Internal error" (a second data chunk: "SF_INFO
    // struct incomplete"): the file's fault, said as such, not a bug of mimi or libsndfile
    if (why.rfind("Internal error", 0) == 0) {
      const size_t colon = why.find(':');
      why = "malformed audio header (libsndfile: " + (colon == std::string::npos ? why : why.substr(colon + 2)) + ")";
    }
    if (code) *code = sf_error(nullptr);
  }
  return f;
}

// A stream that is not WAV is read whole before libsndfile sees it (it seeks). Whether it is
// audio at all is decided from its first bytes, as for a file: libsndfile recognises a format by
// its header, so a prefix it calls "not recognised" is not audio, and a stream of such bytes
// (/dev/zero, a pipe of text) is the input's error at once, not gigabytes buffered first and an
// out-of-memory reported as the machine's failure.
void refuse_unrecognised_stream(const std::vector<uint8_t>& prefix, const std::string& what) {
  MemFile m;
  m.in = &prefix;
  SF_VIRTUAL_IO io = vio();
  SF_INFO info{};
  std::string why;
  int code = 0;
  SNDFILE* f = sf_open_with_error(
      [&] {
        m.pos = 0;
        info = SF_INFO{};
        return sf_open_virtual(&io, SFM_READ, &info, &m);
      },
      why, &code);
  if (f) sf_close(f);
  else if (code == SF_ERR_UNRECOGNISED_FORMAT)
    throw Error(ErrorKind::Input, what + ": cannot read audio: " + why + " (its first " +
                                      std::to_string(prefix.size() >> 10) + " KiB are no audio format)");
}

SNDFILE* sf_open_write_alone(SF_VIRTUAL_IO* io, SF_INFO* info, void* user, std::string& why) {
  // an output's open writes its header: not tried twice, but alone, so the error read is its own
  std::unique_lock<std::shared_mutex> alone(g_sf_open);
  ensure_heap_headroom(kMinHeadroom);
  SNDFILE* f = sf_open_virtual(io, SFM_WRITE, info, user);
  if (!f) why = sf_strerror(nullptr);
  return f;
}

}  // namespace mimi::app
