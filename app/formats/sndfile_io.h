// libsndfile behind one door: virtual I/O over memory and over a file read with pread, and the
// one way every audio file is opened (libsndfile's error of a failed open is process-wide state).
// Internal to the audio code (app/formats/audio_io.cpp).
#pragma once

#include <sndfile.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mimi::app {

// Virtual I/O over a byte vector (a read-only view, or a growable output).
struct MemFile {
  const std::vector<uint8_t>* in = nullptr;
  std::vector<uint8_t>* out = nullptr;
  sf_count_t pos = 0;
  sf_count_t size() const { return sf_count_t(in ? in->size() : out->size()); }
};
SF_VIRTUAL_IO vio();

// Virtual I/O over a regular file read with pread: a read error (EIO of a failing disk, a stale
// NFS handle) would otherwise look to libsndfile like the end of the file, and the item would
// come out short with exit 0. The first errno is kept in `err` for the reader to throw.
struct FdFile {
  int fd = -1;
  sf_count_t size = 0, pos = 0;
  int err = 0;
};
SF_VIRTUAL_IO in_vio();

// The codec libraries under libsndfile leave some allocations unchecked and write through them:
// libsndfile 1.2.0 (Debian 12's) the first calloc of an open's chunk list (psf_store_read_chunk,
// 20 x 96 bytes), libvorbis the realloc of its analysis buffer (vorbis_analysis_buffer, grown to
// the samples pending plus twice those written). Under an address-space limit (ulimit -v, as batch
// schedulers set it) a heap with no room left made them a SIGSEGV instead of "out of memory"
// (classes_probe3's sweep: an open, ~1 run in 3 under load; a hostile probe: `decode -o x.ogg` at
// ulimit -v 36-46 MB, every time). So before each call into them, the calling thread's heap is
// shown to hold room for what the call allocates: a block of `bytes` (at least kMinHeadroom; an
// open allocates ~12 KB for a WAV, measured with mallinfo2) is taken and given back, staying in
// the thread's arena (below the mmap threshold) or leaving its address space free (above it).
// Where it cannot be taken, the call is not made: std::bad_alloc, the machine's failure (exit 75),
// never the file's.
constexpr size_t kMinHeadroom = size_t(64) << 10;
void ensure_heap_headroom(size_t bytes);

// Runs `attempt` (an sf_open_virtual with its stream state rewound) so that, when no attempt
// succeeds, `why` (and `code`, sf_error's) are this file's: see sndfile_io.cpp.
SNDFILE* sf_open_with_error(const std::function<SNDFILE*()>& attempt, std::string& why, int* code = nullptr);
// An output's open (it writes the header), alone; `why` on failure.
SNDFILE* sf_open_write_alone(SF_VIRTUAL_IO* io, SF_INFO* info, void* user, std::string& why);

// A stream that is not WAV is read whole before libsndfile sees it; whether it is audio at all is
// decided from its first kFormatProbeBytes: throws Error(Input) when libsndfile recognises no
// format in them.
constexpr size_t kFormatProbeBytes = 1 << 16;
void refuse_unrecognised_stream(const std::vector<uint8_t>& prefix, const std::string& what);

}  // namespace mimi::app
