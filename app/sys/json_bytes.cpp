#include "app/sys/json_bytes.h"

#include <cstdint>

namespace mimi::app {

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 if the bytes there are not one (overlong
// forms, surrogates and code points beyond U+10FFFF are not valid).
size_t utf8_seq(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return uint8_t(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (b(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

const char* kHex = "0123456789abcdef";

}  // namespace

bool is_valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_seq(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_seq(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

void put_path(nlohmann::json& obj, const std::string& field, const std::string& path) {
  if (is_valid_utf8(path)) {
    obj[field] = path;
    return;
  }
  obj[field] = utf8_lossy(path);
  std::string hex;
  hex.reserve(2 * path.size());
  for (unsigned char c : path) hex += kHex[c >> 4], hex += kHex[c & 15];
  obj[field + "_hex"] = hex;
}

std::string get_path(const nlohmann::json& obj, const std::string& field) {
  const auto h = obj.find(field + "_hex");
  if (h == obj.end() || !h->is_string()) return obj.at(field).get<std::string>();
  const std::string& hex = h->get_ref<const std::string&>();
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  if (hex.size() % 2) throw std::invalid_argument(field + "_hex: odd length");
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int a = val(hex[i]), b = val(hex[i + 1]);
    if (a < 0 || b < 0) throw std::invalid_argument(field + "_hex: not hex");
    out += char(a << 4 | b);
  }
  // Both given: they must name one file (FIELD as put_path writes it beside FIELD_hex), never one
  // of two different names taken in silence.
  if (const auto f = obj.find(field); f != obj.end() && (!f->is_string() || f->get_ref<const std::string&>() != utf8_lossy(out)))
    throw std::invalid_argument("'" + field + "' and '" + field + "_hex' say different names ('" + field +
                                "' must be the bytes of '" + field + "_hex', a byte that is not UTF-8 as U+FFFD); give one of them");
  return out;
}

std::string json_dump(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string printable(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = uint8_t(s[i]);
    const size_t n = c < 0x80 ? 1 : utf8_seq(s, i);
    if (n == 0 || c < 0x20 || c == 0x7F || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace mimi::app
