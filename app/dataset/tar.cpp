#include "app/dataset/tar.h"

#include <cstring>

#include "codec/error.h"

namespace mimi::app::dataset {
namespace {

void octal(char* field, size_t width, uint64_t v) {  // width-1 zero-padded digits, then NUL
  for (size_t i = width - 1; i-- > 0; v >>= 3) field[i] = char('0' + (v & 7));
  field[width - 1] = 0;
}

uint64_t parse_octal(const uint8_t* p, size_t width, bool& ok) {
  uint64_t v = 0;
  size_t i = 0;
  while (i < width && p[i] == ' ') ++i;
  for (; i < width && p[i] >= '0' && p[i] <= '7'; ++i) v = v * 8 + (p[i] - '0');
  for (; i < width; ++i)
    if (p[i] != 0 && p[i] != ' ') ok = false;
  return v;
}

unsigned checksum(const uint8_t* h) {
  unsigned s = 0;
  for (size_t i = 0; i < kTarBlock; ++i) s += (i >= 148 && i < 156) ? ' ' : h[i];
  return s;
}

}  // namespace

bool ustar_fits(const std::string& name) {
  if (name.size() <= 100) return true;
  for (size_t cut = name.find('/'); cut != std::string::npos; cut = name.find('/', cut + 1))
    if (cut <= 155 && name.size() - cut - 1 <= 100 && cut > 0) return true;
  return false;
}

void append_member(std::vector<uint8_t>& out, const std::string& name, const uint8_t* data, size_t n) {
  uint8_t h[kTarBlock] = {0};
  std::string prefix, base = name;
  if (name.size() > 100) {
    size_t cut = std::string::npos;
    for (size_t c = name.find('/'); c != std::string::npos; c = name.find('/', c + 1))
      if (c <= 155 && name.size() - c - 1 <= 100 && c > 0) {
        cut = c;
        break;
      }
    if (cut == std::string::npos) throw Error(ErrorKind::Internal, "tar member name too long for ustar: " + name);
    prefix = name.substr(0, cut);
    base = name.substr(cut + 1);
  }
  char* c = reinterpret_cast<char*>(h);
  std::memcpy(c, base.data(), base.size());
  octal(c + 100, 8, 0644);
  octal(c + 108, 8, 0);
  octal(c + 116, 8, 0);
  octal(c + 124, 12, n);
  octal(c + 136, 12, 0);  // mtime: fixed, so a redone member has the same bytes
  h[156] = '0';
  std::memcpy(c + 257, "ustar", 6);
  std::memcpy(c + 263, "00", 2);
  std::memcpy(c + 345, prefix.data(), prefix.size());
  octal(c + 148, 7, checksum(h));  // six digits, NUL, then the space that ustar puts last
  h[155] = ' ';
  out.insert(out.end(), h, h + kTarBlock);
  out.insert(out.end(), data, data + n);
  out.resize(out.size() + (kTarBlock - n % kTarBlock) % kTarBlock, 0);
}

std::vector<uint8_t> tar_end() { return std::vector<uint8_t>(2 * kTarBlock, 0); }

std::vector<TarMember> read_tar(const std::vector<uint8_t>& b, const std::string& what) {
  std::vector<TarMember> members;
  uint64_t off = 0;
  static const uint8_t zero[kTarBlock] = {0};
  while (true) {
    if (off + kTarBlock > b.size()) throw Error(ErrorKind::Input, what + ": tar ends without its end blocks");
    const uint8_t* h = b.data() + off;
    if (std::memcmp(h, zero, kTarBlock) == 0) {
      if (off + 2 * kTarBlock > b.size() || std::memcmp(h + kTarBlock, zero, kTarBlock) != 0)
        throw Error(ErrorKind::Input, what + ": tar has a lone zero block at " + std::to_string(off));
      if (off + 2 * kTarBlock != b.size())
        throw Error(ErrorKind::Input, what + ": " + std::to_string(b.size() - off - 2 * kTarBlock) +
                                          " bytes after the tar's end blocks");
      return members;
    }
    bool ok = true;
    const uint64_t size = parse_octal(h + 124, 12, ok);
    const unsigned sum = unsigned(parse_octal(h + 148, 8, ok));
    if (!ok || sum != checksum(h) || std::memcmp(h + 257, "ustar", 5) != 0)
      throw Error(ErrorKind::Input, what + ": damaged tar header at offset " + std::to_string(off));
    if (h[156] != '0' && h[156] != 0)
      throw Error(ErrorKind::Input, what + ": tar member at " + std::to_string(off) + " is not a regular file");
    TarMember m;
    const std::string name(reinterpret_cast<const char*>(h), strnlen(reinterpret_cast<const char*>(h), 100));
    const std::string prefix(reinterpret_cast<const char*>(h + 345), strnlen(reinterpret_cast<const char*>(h + 345), 155));
    m.name = prefix.empty() ? name : prefix + "/" + name;
    m.header_offset = off;
    m.data_offset = off + kTarBlock;
    m.size = size;
    const uint64_t padded = (size + kTarBlock - 1) / kTarBlock * kTarBlock;
    if (m.data_offset + padded > b.size())
      throw Error(ErrorKind::Input, what + ": tar member " + m.name + " runs past the end of the file");
    members.push_back(m);
    off = m.data_offset + padded;
  }
}

}  // namespace mimi::app::dataset
