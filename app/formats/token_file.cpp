#include "app/formats/token_file.h"
#include "app/sys/json_bytes.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "app/formats/mimi_container.h"
#include "codec/error.h"
#include "codec/safetensors.h"

namespace mimi::app {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& m) { throw Error(ErrorKind::Input, what + ": " + m); }

constexpr int64_t kChunkFrames = 250;  // frames per .mimi chunk when writing a whole file (20 s)

std::vector<int32_t> transpose(const std::vector<int32_t>& v, int64_t rows, int64_t cols) {
  std::vector<int32_t> t(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = v[size_t(r * cols + c)];
  return t;
}

// The shape of a token array: n_q in [1, 1024] and frames >= 0 whose product is bounded, so
// nothing downstream multiplies into an overflow.
void check_shape(int64_t n_q, int64_t frames, const std::string& what) {
  if (n_q < 1 || n_q > 1024 || frames < 0 || frames > (int64_t(1) << 40) / n_q)
    bad(what, "codes shape [" + std::to_string(n_q) + ", " + std::to_string(frames) + "] is not a token array");
}

void check_codes(const TokenFile& t, const std::string& what) {
  for (int32_t c : t.codes.data)
    if (c < 0 || c >= t.meta.codebook_size)
      bad(what, "code " + std::to_string(c) + " outside [0, " + std::to_string(t.meta.codebook_size) + ")");
}

// ---- npy
std::vector<uint8_t> write_npy(const TokenFile& t) { return npy_bytes(t.codes, 4); }

// The value of `key` in a .npy header dict ("{'descr': '<i4', 'fortran_order': False, 'shape': (8, 25), }").
std::string npy_field(const std::string& h, const std::string& key, const std::string& what) {
  const size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) bad(what, ".npy header lacks '" + key + "'");
  const size_t colon = h.find(':', k);
  if (colon == std::string::npos) bad(what, ".npy header is malformed at '" + key + "'");
  size_t b = h.find_first_not_of(' ', colon + 1);
  if (b == std::string::npos) bad(what, ".npy header is malformed at '" + key + "'");
  size_t e;
  if (h[b] == '\'') {
    e = h.find('\'', b + 1);
    if (e == std::string::npos) bad(what, ".npy header is malformed at '" + key + "'");
    return h.substr(b + 1, e - b - 1);
  }
  if (h[b] == '(') {
    e = h.find(')', b);
    if (e == std::string::npos) bad(what, ".npy header is malformed at '" + key + "'");
    return h.substr(b, e - b + 1);
  }
  e = h.find_first_of(",}", b);
  return h.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

TokenFile read_npy(const std::vector<uint8_t>& b, const std::string& what) {
  if (b.size() < 10 || std::memcmp(b.data(), "\x93NUMPY", 6) != 0) bad(what, "not a .npy file");
  size_t hlen, off;
  if (b[6] == 1) {
    hlen = size_t(b[8]) | size_t(b[9]) << 8;
    off = 10;
  } else if (b[6] == 2 || b[6] == 3) {
    if (b.size() < 12) bad(what, "truncated .npy header");
    hlen = size_t(b[8]) | size_t(b[9]) << 8 | size_t(b[10]) << 16 | size_t(b[11]) << 24;
    off = 12;
  } else {
    bad(what, "unsupported .npy version " + std::to_string(b[6]));
  }
  if (hlen > b.size() - off) bad(what, "truncated .npy header");
  const std::string h(b.begin() + long(off), b.begin() + long(off + hlen));
  const std::string dt = npy_field(h, "descr", what);
  if (npy_field(h, "fortran_order", what).find("True") != std::string::npos)
    bad(what, "Fortran-order .npy is not supported");
  const std::string shape = npy_field(h, "shape", what);
  std::vector<int64_t> dims;
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') bad(what, ".npy shape " + shape + " is malformed");
  for (size_t i = 1; i + 1 < shape.size();) {
    const char c = shape[i];
    if (c == ' ' || c == ',') {
      ++i;
      continue;
    }
    int64_t v = 0;
    const auto r = std::from_chars(shape.data() + i, shape.data() + shape.size() - 1, v);
    if (r.ec != std::errc() || v < 0) bad(what, ".npy shape " + shape + " is malformed");
    dims.push_back(v);
    i = size_t(r.ptr - shape.data());
  }
  if (dims.size() == 3 && dims[0] == 1) dims.erase(dims.begin());  // [1, n_q, F]
  if (dims.size() != 2) bad(what, ".npy codes must have shape [n_q, frames], got " + shape);
  check_shape(dims[0], dims[1], what);
  if (dt.size() != 3 || (dt[0] != '<' && dt[0] != '>' && dt[0] != '|' && dt[0] != '='))
    bad(what, "unsupported .npy dtype '" + dt + "' (integer codes expected)");
  int size;
  bool is_signed = true;
  const std::string kind = dt.substr(1);
  if (kind == "i2") size = 2;
  else if (kind == "i4") size = 4;
  else if (kind == "i8") size = 8;
  else if (kind == "u2") size = 2, is_signed = false;
  else if (kind == "u4") size = 4, is_signed = false;
  else bad(what, "unsupported .npy dtype '" + dt + "' (integer codes expected)");
  if (dt[0] == '>') bad(what, "big-endian .npy is not supported");
  const size_t n = size_t(dims[0] * dims[1]), data = off + hlen;
  if (b.size() - data < n * size_t(size)) bad(what, "truncated .npy data (" + std::to_string(b.size() - data) +
                                                       " bytes for " + std::to_string(n) + " codes)");
  TokenFile t;
  t.codes.n_q = int(dims[0]);
  t.codes.frames = dims[1];
  t.codes.data.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = b.data() + data + i * size_t(size);
    uint64_t u = 0;
    for (int k = size - 1; k >= 0; --k) u = (u << 8) | p[k];
    int64_t v = int64_t(u);
    if (is_signed && size < 8 && (u >> (8 * size - 1) & 1)) v = int64_t(u) - (int64_t(1) << (8 * size));
    if (v < INT32_MIN || v > INT32_MAX) bad(what, "code " + std::to_string(v) + " out of range");
    t.codes.data[i] = int32_t(v);
  }
  return t;
}

// ---- text
std::vector<uint8_t> write_text(const TokenFile& t) {
  std::string s;
  const int64_t F = t.codes.frames;
  for (int64_t f = 0; f < F; ++f) {
    for (int k = 0; k < t.codes.n_q; ++k) {
      if (k) s += ' ';
      s += std::to_string(t.codes.data[size_t(k * F + f)]);
    }
    s += '\n';
  }
  return {s.begin(), s.end()};
}

// `recover`: a line that is not a frame like the ones before it (unparseable, another count) ends
// the file there, as damage ends a .mimi file: the frames before it are kept (complete = false).
TokenFile read_text(const std::vector<uint8_t>& b, const std::string& what, bool recover) {
  std::vector<int32_t> frame_major, frame;
  int n_q = -1;
  int64_t frames = 0, line_no = 0;
  const char* p = reinterpret_cast<const char*>(b.data());
  const char* const end = p + b.size();
  std::string damage;
  while (p < end) {
    const char* nl = std::find(p, end, '\n');
    ++line_no;
    try {
      const bool is_frame = parse_text_frame(p, nl, frame, what, line_no);
      p = nl == end ? end : nl + 1;
      if (!is_frame) continue;
      const int count = int(std::min<size_t>(frame.size(), INT32_MAX));
      if (count > 1024) bad(what, "line " + std::to_string(line_no) + " has " + std::to_string(count) + " codes (at most 1024)");
      if (n_q < 0) n_q = count;
      if (count != n_q)
        bad(what, "line " + std::to_string(line_no) + " has " + std::to_string(count) + " codes, earlier lines " +
                      std::to_string(n_q));
    } catch (const Error& e) {
      if (!recover || frames == 0 || e.kind() != ErrorKind::Input) throw;
      damage = std::string(e.what()).substr(std::min(what.size() + 2, std::strlen(e.what())));
      break;
    }
    frame_major.insert(frame_major.end(), frame.begin(), frame.end());
    ++frames;
  }
  if (frames == 0) bad(what, "no frames in text token file");
  TokenFile t;
  t.complete = damage.empty();
  t.damage = damage;
  t.codes.n_q = n_q;
  t.codes.frames = frames;
  t.codes.data = transpose(frame_major, frames, n_q);
  return t;
}

// ---- safetensors
std::vector<uint8_t> write_st(const TokenFile& t) {
  std::map<std::string, std::string> md;
  const nlohmann::json meta = meta_to_json(t.meta);
  for (auto& [k, v] : meta.items()) md[k] = v.is_string() ? v.get<std::string>() : json_dump(v);
  return safetensors_bytes({{"codes", DType::I32, {1, t.codes.n_q, t.codes.frames}, t.codes.data.data()}}, md);
}

TokenFile read_st(const std::vector<uint8_t>& b, const std::string& what) {
  const SafetensorsFile f = SafetensorsFile::from_bytes(std::make_shared<const std::vector<uint8_t>>(b), what);
  if (!f.has("codes")) bad(what, "safetensors token file needs a tensor named 'codes'");
  Shape s = f.info("codes").shape;
  if (s.size() == 3 && s[0] == 1) s.erase(s.begin());
  if (s.size() != 2) bad(what, "'codes' must have shape [1, n_q, frames] or [n_q, frames], got " + shape_str(f.info("codes").shape));
  check_shape(s[0], s[1], what);
  TokenFile t;
  t.codes.n_q = int(s[0]);
  t.codes.frames = s[1];
  if (f.info("codes").dtype != DType::I32 && f.info("codes").dtype != DType::I64) bad(what, "'codes' must be I32 or I64");
  t.codes.data = f.to_i32("codes");
  if (int64_t(t.codes.data.size()) != s[0] * s[1]) bad(what, "'codes' holds " + std::to_string(t.codes.data.size()) + " values, not its shape's");
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : f.metadata()) j[k] = v;
  meta_from_json(t.meta, j, what);
  return t;
}

}  // namespace

// Header fields of a token file (the .mimi JSON header, or safetensors __metadata__ strings):
// numbers may come as JSON numbers or as decimal strings; anything else, or a value outside its
// range, is a malformed input that names the key.
void meta_from_json(TokenMeta& m, const nlohmann::json& j, const std::string& what) {
  if (!j.is_object()) bad(what, "header is not a JSON object");
  auto number = [&](const char* k) -> std::optional<double> {
    if (!j.contains(k) || j[k].is_null()) return std::nullopt;
    const nlohmann::json& v = j[k];
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {
      const std::string str = v.get<std::string>();
      double d = 0;
      const auto r = std::from_chars(str.data(), str.data() + str.size(), d);
      if (r.ec == std::errc() && r.ptr == str.data() + str.size()) return d;
    }
    bad(what, "header field '" + std::string(k) + "' must be a number, got " + v.dump().substr(0, 40));
  };
  auto integer = [&](const char* k, double lo, double hi) -> std::optional<int64_t> {
    const auto v = number(k);
    if (!v) return std::nullopt;
    if (!(*v >= lo && *v <= hi) || *v != std::floor(*v))
      bad(what, "header field '" + std::string(k) + "' = " + j[k].dump().substr(0, 40) + " is not an integer in [" +
                    std::to_string(int64_t(lo)) + ", " + std::to_string(int64_t(hi)) + "]");
    return int64_t(*v);
  };
  auto str = [&](const char* k) -> std::string {
    if (!j.contains(k) || j[k].is_null()) return "";
    if (!j[k].is_string()) bad(what, "header field '" + std::string(k) + "' must be a string");
    return j[k].get<std::string>();
  };
  constexpr double kMaxRate = 1 << 30;
  if (auto v = integer("sample_rate", 1, kMaxRate)) m.sample_rate = int(*v);
  if (auto v = number("frame_rate")) {
    if (!(*v > 0 && *v <= kMaxRate)) bad(what, "header field 'frame_rate' must be positive");
    m.frame_rate = *v;
  }
  if (auto v = integer("codebook_size", 1, 1 << 16)) m.codebook_size = int(*v);
  m.original_samples = integer("original_samples", 0, 9.0e15);
  if (auto v = integer("source_sample_rate", 1, kMaxRate)) m.source_sample_rate = int(*v);
  if (auto v = integer("source_channels", 1, 1 << 16)) m.source_channels = int(*v);
  if (auto v = integer("channel", 0, 1 << 16)) m.channel = int(*v);
  m.weights_fingerprint = str("weights_fingerprint");
  m.config_fingerprint = str("config_fingerprint");
  m.tool_version = str("tool_version");
}

bool parse_text_frame(const char* b, const char* e, std::vector<int32_t>& frame, const std::string& what,
                      int64_t line) {
  frame.clear();
  // Text from other platforms: a UTF-8 byte-order mark before the first line (Notepad), CR LF line
  // ends (the '\r' is a blank below). UTF-16 is refused by name before parsing (check_token_prefix).
  if (line == 1 && e - b >= 3 && std::memcmp(b, "\xEF\xBB\xBF", 3) == 0) b += 3;
  if (b < e && *b == '#') return false;  // a comment line
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  for (const char* p = b;;) {
    while (p < e && blank(*p)) ++p;
    if (p == e) break;
    const char* q = p;
    while (q < e && !blank(*q)) ++q;  // one token: [p, q)
    int32_t v = 0;
    const auto r = std::from_chars(p, q, v);
    if (r.ec != std::errc() || r.ptr != q)
      bad(what, "line " + std::to_string(line) + ": '" + std::string(p, size_t(std::min<ptrdiff_t>(q - p, 24))) +
                    "' is not an integer");
    frame.push_back(v);
    p = q;
  }
  return !frame.empty();
}

const char* format_name(TokenFormat f) {
  switch (f) {
    case TokenFormat::Mimi: return "mimi";
    case TokenFormat::Npy: return "npy";
    case TokenFormat::Safetensors: return "safetensors";
    case TokenFormat::Text: return "text";
  }
  return "?";
}

const char* format_extension(TokenFormat f) {
  switch (f) {
    case TokenFormat::Mimi: return ".mimi";
    case TokenFormat::Npy: return ".npy";
    case TokenFormat::Safetensors: return ".safetensors";
    case TokenFormat::Text: return ".txt";
  }
  return "";
}

std::optional<TokenFormat> parse_format(const std::string& n) {
  if (n == "mimi") return TokenFormat::Mimi;
  if (n == "npy") return TokenFormat::Npy;
  if (n == "safetensors") return TokenFormat::Safetensors;
  if (n == "text" || n == "txt") return TokenFormat::Text;
  return std::nullopt;
}

std::optional<TokenFormat> format_from_extension(const std::string& path) {
  // case-insensitive, as the audio containers are (X.MIMI is a .mimi file, X.WAV a WAV)
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".mimi") return TokenFormat::Mimi;
  if (ext == ".npy") return TokenFormat::Npy;
  if (ext == ".safetensors") return TokenFormat::Safetensors;
  if (ext == ".txt") return TokenFormat::Text;
  return std::nullopt;
}

std::optional<TokenFormat> sniff_format(const std::vector<uint8_t>& b) {
  if (b.size() >= 4 && std::memcmp(b.data(), kMimiMagic, 4) == 0) return TokenFormat::Mimi;
  if (b.size() >= 6 && std::memcmp(b.data(), "\x93NUMPY", 6) == 0) return TokenFormat::Npy;
  if (b.size() >= 9 && b[8] == '{') return TokenFormat::Safetensors;
  const size_t bom = b.size() >= 3 && std::memcmp(b.data(), "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;  // Windows editors
  if (b.size() > bom && (isdigit(b[bom]) || b[bom] == '#' || b[bom] == ' ')) return TokenFormat::Text;
  return std::nullopt;
}

nlohmann::json meta_to_json(const TokenMeta& m) {
  nlohmann::json j = {{"sample_rate", m.sample_rate}, {"frame_rate", m.frame_rate}, {"codebook_size", m.codebook_size}};
  if (m.original_samples) j["original_samples"] = *m.original_samples;
  if (m.source_sample_rate) j["source_sample_rate"] = *m.source_sample_rate;
  if (m.source_channels) j["source_channels"] = *m.source_channels;
  if (m.channel) j["channel"] = *m.channel;
  if (!m.weights_fingerprint.empty()) j["weights_fingerprint"] = m.weights_fingerprint;
  if (!m.config_fingerprint.empty()) j["config_fingerprint"] = m.config_fingerprint;
  if (!m.tool_version.empty()) j["tool_version"] = m.tool_version;
  return j;
}

std::vector<uint8_t> write_tokens(const TokenFile& t, TokenFormat f) {
  // What no reader takes is never written: read_tokens refuses 0 frames in every format (convert
  // --recover of a file with no good frame wrote one, exit 0). read_tokens itself returns such a
  // file's empty prefix, for info to describe.
  if (t.codes.frames < 1 || t.codes.n_q < 1)
    throw Error(ErrorKind::Input, (t.damage.empty() ? std::string("no frames") : t.damage) +
                                      ": no complete frames to write (a token file without frames cannot be read back)");
  switch (f) {
    case TokenFormat::Npy: return write_npy(t);
    case TokenFormat::Text: return write_text(t);
    case TokenFormat::Safetensors: return write_st(t);
    case TokenFormat::Mimi: break;
  }
  nlohmann::json h = meta_to_json(t.meta);
  h.erase("original_samples");  // lives in the end record, known last when streaming
  h["format"] = "mimi-codes";
  h["n_q"] = t.codes.n_q;
  h["frames"] = t.codes.frames;
  std::vector<uint8_t> out;
  MimiWriter w(out, h);
  const std::vector<int32_t> fm = transpose(t.codes.data, t.codes.n_q, t.codes.frames);  // frame-major
  for (int64_t f0 = 0; f0 < t.codes.frames; f0 += kChunkFrames)
    w.append_chunk(fm.data() + f0 * t.codes.n_q, std::min(kChunkFrames, t.codes.frames - f0));
  w.finish(t.meta.original_samples.value_or(-1));
  return out;
}

TokenFile read_tokens(const std::vector<uint8_t>& bytes, TokenFormat f, const std::string& what, bool recover) {
  TokenFile t;
  switch (f) {
    case TokenFormat::Npy: t = read_npy(bytes, what); break;
    case TokenFormat::Text: t = read_text(bytes, what, recover); break;
    case TokenFormat::Safetensors: t = read_st(bytes, what); break;
    case TokenFormat::Mimi: {
      MimiReadResult r = read_mimi(bytes, what);
      if (!r.complete && !recover)
        bad(what, r.damage + " (damaged or truncated; --recover decodes the " + std::to_string(r.frames) +
                      " good frames)");
      meta_from_json(t.meta, r.header, what);
      t.codes.n_q = r.n_q;
      t.codes.frames = r.frames;
      t.codes.data = transpose(r.frame_major, r.frames, r.n_q);
      if (r.original_samples >= 0) t.meta.original_samples = r.original_samples;
      t.complete = r.complete;
      t.damage = r.damage;
      if (r.header.contains("frames") && r.complete &&
          (!r.header["frames"].is_number_integer() || r.header["frames"].get<int64_t>() != r.frames))
        bad(what, "header says " + r.header["frames"].dump().substr(0, 40) + " frames, the file holds " + std::to_string(r.frames));
      if (r.frames == 0 && (r.complete || !recover)) bad(what, r.complete ? "no frames" : r.damage);
      break;
    }
  }
  if (t.codes.n_q < 1 || (t.codes.frames < 1 && t.complete)) bad(what, "no codes");
  check_codes(t, what);
  return t;
}

std::vector<uint8_t> npy_bytes(const Codes& c, int code_bytes) {
  std::string h = std::string("{'descr': '<i") + char('0' + code_bytes) + "', 'fortran_order': False, 'shape': (" +
                  std::to_string(c.n_q) + ", " + std::to_string(c.frames) + "), }";
  const size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  std::vector<uint8_t> o = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, uint8_t(h.size() & 0xff), uint8_t(h.size() >> 8)};
  o.insert(o.end(), h.begin(), h.end());
  o.reserve(o.size() + c.data.size() * size_t(code_bytes));
  for (int32_t v : c.data)  // little-endian whatever the host
    for (int k = 0; k < code_bytes; ++k) o.push_back(uint8_t(uint32_t(v) >> (8 * k)));
  return o;
}

}  // namespace mimi::app
