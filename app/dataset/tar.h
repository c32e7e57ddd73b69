// POSIX ustar archives as the dataset mode writes them: deterministic members (mode 0644, uid/gid
// 0, mtime 0, no user names) so that the same items give the same bytes, and a reader for
// checking them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mimi::app::dataset {

constexpr size_t kTarBlock = 512;

// Whether a member name fits ustar (name <= 100 bytes, or prefix <= 155 + '/' + name <= 100).
bool ustar_fits(const std::string& name);

// One regular-file member: its 512-byte header, the data, zero padding to a block. Throws
// Error(Internal) for a name that does not fit (plans refuse such keys first).
void append_member(std::vector<uint8_t>& out, const std::string& name, const uint8_t* data, size_t n);

// The end of an archive: two zero blocks.
std::vector<uint8_t> tar_end();

struct TarMember {
  std::string name;
  uint64_t header_offset = 0, data_offset = 0, size = 0;
};
// The members of an archive held in memory, up to its end blocks. Throws Error(Input) naming
// `what` for a damaged header (checksum, magic, size beyond the data) or a missing end.
std::vector<TarMember> read_tar(const std::vector<uint8_t>& bytes, const std::string& what);

}  // namespace mimi::app::dataset
