#include "app/formats/mimi_container.h"
#include "app/sys/json_bytes.h"

#include <cstring>

#include "codec/error.h"

namespace mimi::app {
namespace {

constexpr char kChunkTag[4] = {'F', 'R', 'M', 'S'};
constexpr char kEndTag[4] = {'E', 'N', 'D', '!'};

void put_u32(std::vector<uint8_t>& o, uint32_t v) {
  for (int i = 0; i < 4; ++i) o.push_back(uint8_t(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& o, uint64_t v) {
  for (int i = 0; i < 8; ++i) o.push_back(uint8_t(v >> (8 * i)));
}
uint32_t get_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t get_u64(const uint8_t* p) { return uint64_t(get_u32(p)) | uint64_t(get_u32(p + 4)) << 32; }

}  // namespace

std::string mimi_end_record_problem(const uint8_t* body, int64_t frames, int64_t* original_samples) {
  if (crc32(body, 16) != get_u32(body + 16)) return "end record CRC mismatch";
  const uint64_t total = get_u64(body), orig = get_u64(body + 8);
  if (int64_t(total) != frames) return "end record says " + std::to_string(total) + " frames, chunks hold " + std::to_string(frames);
  if (orig != ~uint64_t(0) && orig > kMimiMaxOriginalSamples)
    return "end record's original sample count " + std::to_string(orig) + " is not plausible";
  if (original_samples) *original_samples = orig == ~uint64_t(0) ? -1 : int64_t(orig);
  return "";
}

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc) {
  static uint32_t table[256];
  static bool init = [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return true;
  }();
  (void)init;
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

void unpack_codes(const uint8_t* payload, size_t count, int bits, int32_t* out) {
  uint64_t bitpos = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t v = 0;
    for (int k = 0; k < bits; ++k, ++bitpos) v |= uint32_t(payload[bitpos / 8] >> (bitpos % 8) & 1u) << k;
    out[i] = int32_t(v);
  }
}

int bits_for(int codebook_size) {
  int b = 1;
  while ((int64_t(1) << b) < codebook_size) ++b;
  return b;
}

MimiWriter::MimiWriter(std::vector<uint8_t>& o, const nlohmann::json& header) : out(&o) {
  n_q = header.at("n_q").get<int>();
  bits = bits_for(header.at("codebook_size").get<int>());
  const std::string h = json_dump(header);  // metadata strings from other files may not be UTF-8
  o.insert(o.end(), kMimiMagic, kMimiMagic + 4);
  o.push_back(kMimiVersion);
  o.push_back(0);
  o.push_back(0);
  o.push_back(0);
  put_u32(o, uint32_t(h.size()));
  o.insert(o.end(), h.begin(), h.end());
  put_u32(o, crc32(reinterpret_cast<const uint8_t*>(h.data()), h.size()));
}

void MimiWriter::append_chunk(const int32_t* codes, int64_t n_frames) {
  if (n_frames <= 0) return;
  std::vector<uint8_t>& o = *out;
  o.insert(o.end(), kChunkTag, kChunkTag + 4);
  const size_t body = o.size();
  put_u32(o, uint32_t(n_frames));
  // LSB-first bit packing of n_frames * n_q codes, `bits` bits each, frame-major.
  const int64_t n = n_frames * n_q;
  const size_t payload = size_t((n * bits + 7) / 8);
  const size_t start = o.size();
  o.resize(start + payload, 0);
  uint64_t bitpos = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t v = uint32_t(codes[i]);
    for (int b = 0; b < bits; ++b, ++bitpos)
      if (v >> b & 1u) o[start + bitpos / 8] |= uint8_t(1u << (bitpos % 8));
  }
  put_u32(o, crc32(o.data() + body, o.size() - body));
  frames_written += n_frames;
}

void MimiWriter::finish(int64_t original_samples) {
  std::vector<uint8_t>& o = *out;
  o.insert(o.end(), kEndTag, kEndTag + 4);
  const size_t body = o.size();
  put_u64(o, uint64_t(frames_written));
  put_u64(o, uint64_t(original_samples));  // all ones = unknown
  put_u32(o, crc32(o.data() + body, o.size() - body));
}

MimiHeader parse_mimi_header(const uint8_t* text, size_t n, const std::string& what) {
  MimiHeader h;
  h.json = nlohmann::json::parse(text, text + n, nullptr, /*allow_exceptions=*/false);
  if (h.json.is_discarded() || !h.json.is_object()) throw Error(ErrorKind::Input, what + ": .mimi header is not a JSON object");
  auto integer = [&](const char* key, int64_t lo, int64_t hi) {
    const auto it = h.json.find(key);
    if (it == h.json.end() || !it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi)
      throw Error(ErrorKind::Input, what + ": .mimi header field '" + key + "' must be an integer in [" +
                                        std::to_string(lo) + ", " + std::to_string(hi) + "]" +
                                        (it == h.json.end() ? std::string(" (missing)") : ", got " + it->dump().substr(0, 40)));
    return int(it->get<int64_t>());
  };
  h.n_q = integer("n_q", 1, kMimiMaxCodebooks);
  h.codebook_size = integer("codebook_size", 1, kMimiMaxCodebookSize);
  h.bits = bits_for(h.codebook_size);
  return h;
}

MimiReadResult read_mimi(const std::vector<uint8_t>& b, const std::string& what) {
  auto fail = [&](const std::string& m) -> MimiReadResult { throw Error(ErrorKind::Input, what + ": " + m); };
  MimiReadResult r;
  if (b.size() < 12 || std::memcmp(b.data(), kMimiMagic, 4) != 0) return fail("not a .mimi file (bad magic)");
  if (b[4] != kMimiVersion)
    return fail("unsupported .mimi version " + std::to_string(b[4]) + " (this mimi reads version 1)");
  const uint32_t hlen = get_u32(b.data() + 8);
  if (hlen > kMimiMaxHeaderBytes) return fail("header length " + std::to_string(hlen) + " is not plausible");
  if (size_t(12) + hlen + 4 > b.size()) return fail("truncated inside the header");
  const uint8_t* h = b.data() + 12;
  if (crc32(h, hlen) != get_u32(h + hlen)) return fail("header CRC mismatch (damaged file)");
  const MimiHeader mh = parse_mimi_header(h, hlen, what);
  r.header = mh.json;
  r.n_q = mh.n_q;
  const int bits = mh.bits;
  size_t pos = 12 + size_t(hlen) + 4;
  while (true) {
    if (pos == b.size()) {
      r.damage = "truncated: no end record after " + std::to_string(r.frames) + " frames";
      return r;
    }
    if (b.size() - pos < 4) {
      r.damage = "truncated after " + std::to_string(r.frames) + " frames";
      return r;
    }
    const uint8_t* p = b.data() + pos;
    if (std::memcmp(p, kEndTag, 4) == 0) {
      if (b.size() - pos < 4 + kMimiEndBody) {
        r.damage = "truncated inside the end record";
        return r;
      }
      r.damage = mimi_end_record_problem(p + 4, r.frames, &r.original_samples);
      if (!r.damage.empty()) return r;
      if (pos + 4 + kMimiEndBody != b.size()) {
        r.damage = "unexpected bytes after the end record";
        return r;
      }
      r.complete = true;
      return r;
    }
    if (std::memcmp(p, kChunkTag, 4) != 0) {
      r.damage = "bad chunk tag at byte " + std::to_string(pos) + " after " + std::to_string(r.frames) + " frames";
      return r;
    }
    if (b.size() - pos < 8) {
      r.damage = "truncated chunk header after " + std::to_string(r.frames) + " frames";
      return r;
    }
    const uint32_t nf = get_u32(p + 4);
    const uint64_t payload = (uint64_t(nf) * uint64_t(r.n_q) * uint64_t(bits) + 7) / 8;
    if (nf > kMimiMaxChunkFrames) {
      r.damage = "chunk claims " + std::to_string(nf) + " frames after " + std::to_string(r.frames) + " frames (damaged)";
      return r;
    }
    if (nf == 0 || b.size() - pos < 8 + payload + 4) {
      r.damage = "truncated chunk after " + std::to_string(r.frames) + " frames";
      return r;
    }
    if (crc32(p + 4, 4 + payload) != get_u32(p + 8 + payload)) {
      r.damage = "chunk CRC mismatch after " + std::to_string(r.frames) + " frames (damaged data)";
      return r;
    }
    const size_t old = r.frame_major.size();
    r.frame_major.resize(old + size_t(nf) * size_t(r.n_q));
    unpack_codes(p + 8, size_t(nf) * size_t(r.n_q), bits, r.frame_major.data() + old);
    r.frames += nf;
    pos += 8 + payload + 4;
  }
}

}  // namespace mimi::app
