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
