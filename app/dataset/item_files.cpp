#include "app/dataset/item_files.h"

#include <cstdio>
#include <cstring>

#include "app/dataset/tar.h"
#include "app/formats/token_file.h"
#include "app/sys/json_bytes.h"
#include "codec/error.h"

namespace mimi::app::dataset {
using nlohmann::json;

json item_record(const Item& it, const ItemAudio& a, const Codes& c, int model_rate) {
  json j;
  put_path(j, "id", it.id);
  j["key"] = it.key;
  put_path(j, "path", it.path);
  j["start"] = it.start;
  j["duration"] = double(a.samples) / model_rate;
  j["samples"] = a.samples;
  j["sample_rate"] = model_rate;
  j["frames"] = c.frames;
  j["n_q"] = c.n_q;
  j["source_rate"] = a.source_rate;
  j["source_channels"] = a.source_channels;
  j["channel"] = channel_name(it.channel);
  return j;
}

std::string check_encoded_length(const Item& it, int64_t samples, int model_rate) {
  if (!it.probe_error.empty() || !(it.duration > 0)) return "";  // nothing known to hold it to
  const double got = double(samples) / model_rate;
  const double missing = it.duration - got;
  if (missing <= 0.05 + 1e-3 * it.duration) return "";
  char b[256];
  std::snprintf(b, sizeof b, ": %.3f s of audio, %.3f s planned: %s", got, it.duration,
                it.end >= 0 ? "the segment goes past the end of the audio"
                            : "the file holds less audio than planned (truncated, or changed since it was planned)");
  return it.path + b;
}

std::vector<uint8_t> item_members(const Item& it, const ItemAudio& a, const Codes& c, int model_rate) {
  std::vector<uint8_t> out;
  const std::vector<uint8_t> npy = npy_bytes(c, 2);
  const std::string meta = json_dump(item_record(it, a, c, model_rate)) + "\n";
  append_member(out, it.key + ".npy", npy.data(), npy.size());
  append_member(out, it.key + ".json", reinterpret_cast<const uint8_t*>(meta.data()), meta.size());
  return out;
}

Codes parse_npy_int16(const uint8_t* p, size_t n, const std::string& what) {
  auto bad = [&](const std::string& why) { return Error(ErrorKind::Input, what + ": " + why); };
  if (n < 10 || std::memcmp(p, "\x93NUMPY\x01\x00", 8) != 0) throw bad("not a version 1.0 .npy");
  const size_t hlen = size_t(p[8]) | size_t(p[9]) << 8;
  if (10 + hlen > n) throw bad("truncated .npy header");
  const std::string h(reinterpret_cast<const char*>(p + 10), hlen);
  const std::string head = "{'descr': '<i2', 'fortran_order': False, 'shape': (";
  if (h.compare(0, head.size(), head) != 0) throw bad("not an int16 C-order .npy: " + h);
  Codes c;
  long long q = 0, f = 0;
  if (std::sscanf(h.c_str() + head.size(), "%lld, %lld)", &q, &f) != 2 || q < 1 || f < 0) throw bad("bad shape: " + h);
  c.n_q = int(q);
  c.frames = f;
  const size_t count = size_t(q) * size_t(f);
  if (n - 10 - hlen != count * 2) throw bad("data size does not match the shape");
  c.data.resize(count);
  const uint8_t* d = p + 10 + hlen;
  for (size_t i = 0; i < count; ++i) c.data[i] = int16_t(uint16_t(d[2 * i] | d[2 * i + 1] << 8));
  return c;
}

}  // namespace mimi::app::dataset
