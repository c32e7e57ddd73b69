#include "codec/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "codec/error.h"

namespace mimi {
namespace {

struct DTypeEntry {
  const char* name;
  DType dtype;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {"F32", DType::F32, 4}, {"F16", DType::F16, 2}, {"BF16", DType::BF16, 2}, {"F64", DType::F64, 8},
    {"I32", DType::I32, 4}, {"I64", DType::I64, 8}, {"I16", DType::I16, 2},   {"I8", DType::I8, 1},
    {"U8", DType::U8, 1},   {"BOOL", DType::BOOL, 1},
};

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw Error(ErrorKind::Input, what + ": " + msg);
}

struct Mapping {
  void* addr = nullptr;
  size_t len = 0;
  ~Mapping() {
    if (addr && len) munmap(addr, len);
  }
};

}  // namespace

const char* dtype_name(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e.name;
  return "?";
}

size_t dtype_size(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e.size;
  return 0;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  auto m = std::make_shared<Mapping>();
  m->len = size_t(st.st_size);
  if (m->len > 0) {
    m->addr = mmap(nullptr, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m->addr == MAP_FAILED) {
      m->addr = nullptr;
      ::close(fd);
      fail(path, std::string("mmap failed: ") + std::strerror(errno));
    }
  }
  ::close(fd);
  f.base_ = static_cast<const uint8_t*>(m->addr);
  f.size_ = m->len;
  f.owner_ = m;
  f.mapped_ = true;
  f.parse(path);
  return f;
}

SafetensorsFile SafetensorsFile::from_bytes(std::shared_ptr<const std::vector<uint8_t>> bytes,
                                            const std::string& what) {
  SafetensorsFile f;
  f.path_ = what;
  f.base_ = bytes->data();
  f.size_ = bytes->size();
  f.owner_ = bytes;
  f.parse(what);
  return f;
}

void SafetensorsFile::parse(const std::string& what) {
  if (size_ < 8) fail(what, "too short for a safetensors file (" + std::to_string(size_) + " bytes)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base_[i];
  if (n > size_ - 8)
    fail(what, "header length " + std::to_string(n) + " exceeds the file (" + std::to_string(size_) +
                   " bytes): truncated or not safetensors");
  header_.assign(reinterpret_cast<const char*>(base_ + 8), size_t(n));
  data_ = base_ + 8 + n;
  const uint64_t data_size = size_ - 8 - n;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header_);
  } catch (const std::exception& e) {
    fail(what, std::string("header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(what, "header is not a JSON object");
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  try {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "__metadata__") {
        if (!it->is_object()) fail(what, "__metadata__ is not an object");
        for (auto m = it->begin(); m != it->end(); ++m) {
          if (!m->is_string())
            fail(what, "__metadata__ value of '" + m.key() + "' is not a string (" + m->type_name() + ")");
          metadata_[m.key()] = m->get<std::string>();
        }
        continue;
      }
      const auto& e = *it;
      const std::string& name = it.key();
      if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
        fail(what, "tensor '" + name + "': entry needs dtype, shape and data_offsets");
      TensorInfo t;
      t.name = name;
      const auto& dtj = e["dtype"];
      if (!dtj.is_string()) fail(what, "tensor '" + name + "': dtype is not a string: " + dtj.dump());
      const std::string dt = dtj.get<std::string>();
      const DTypeEntry* d = nullptr;
      for (const auto& k : kDTypes)
        if (dt == k.name) d = &k;
      if (!d) fail(what, "tensor '" + name + "': unsupported dtype " + dt);
      t.dtype = d->dtype;
      // Every dimension an integer >= 0; numel and the byte size computed with overflow checks.
      const auto& shape = e["shape"];
      if (!shape.is_array()) fail(what, "tensor '" + name + "': shape is not an array: " + shape.dump());
      // The running product is checked in order (as numel() computes it), so that no prefix of
      // the shape overflows int64 either, even when a later dimension is 0.
      int64_t count = 1, bytes = 0;
      bool overflow = false;
      for (const auto& s : shape) {
        const bool ok = s.is_number_unsigned() ? s.get<uint64_t>() <= uint64_t(INT64_MAX)
                                               : s.is_number_integer() && s.get<int64_t>() >= 0;
        if (!ok) fail(what, "tensor '" + name + "': bad shape " + shape.dump() + " (dimensions must be integers >= 0)");
        const int64_t dim = s.get<int64_t>();
        overflow = overflow || __builtin_mul_overflow(count, dim, &count);
        t.shape.push_back(dim);
      }
      overflow = overflow || __builtin_mul_overflow(count, int64_t(d->size), &bytes);
      if (overflow)
        fail(what, "tensor '" + name + "': shape " + shape.dump() + " of " + dt + " is too large (" +
                       "its byte size overflows 64 bits)");
      const auto& off = e["data_offsets"];
      if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
        fail(what, "tensor '" + name + "': bad data_offsets " + off.dump() + " (two integers >= 0 expected)");
      t.begin = off[0].get<uint64_t>();
      t.end = off[1].get<uint64_t>();
      if (t.end < t.begin || t.end - t.begin != uint64_t(bytes))
        fail(what, "tensor '" + name + "': byte range [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                       ") holds " + (t.end < t.begin ? std::string("a negative number of") : std::to_string(t.end - t.begin)) +
                       " bytes, expected " + std::to_string(bytes) + " for " + dt + " " + shape_str(t.shape));
      if (t.end > data_size)
        fail(what, "tensor '" + name + "': byte range ends at " + std::to_string(t.end) +
                       " but the data section has " + std::to_string(data_size) + " bytes (truncated file?)");
      if (t.end > t.begin) ranges.emplace_back(t.begin, t.end);
      tensors_[name] = std::move(t);
    }
  } catch (const nlohmann::json::exception& e) {  // a JSON value of an unexpected type or form
    fail(what, std::string("malformed header: ") + e.what());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) fail(what, "tensor byte ranges overlap");
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, "no tensor named '" + name + "'");
  return it->second;
}

Tensor SafetensorsFile::to_f32(const std::string& name) const {
  const TensorInfo& t = info(name);
  const uint8_t* p = data(t);
  const int64_t n = numel(t.shape);
  if (t.dtype == DType::F32 && reinterpret_cast<uintptr_t>(p) % alignof(float) == 0) {
    Tensor out;
    out.shape = t.shape;
    out.data = reinterpret_cast<const float*>(p);
    out.owner = owner_;
    return out;
  }
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::F32: std::memcpy(&v[i], p + 4 * i, 4); break;
      case DType::F16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        v[i] = half_to_float(h);
        break;
      }
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        v[i] = bf16_to_float(h);
        break;
      }
      case DType::F64: {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        v[i] = float(d);
        break;
      }
      default:
        fail(path_, "tensor '" + name + "': dtype " + dtype_name(t.dtype) +
                        ", expected a float dtype (F32, F16, BF16 or F64)");
    }
  }
  return Tensor::from_vector(t.shape, std::move(v));
}

namespace {
// Whole pages around [begin, end): a neighbour's page dropped too is only read back again.
// PROT_READ + MAP_PRIVATE: no page was ever copied on write, so nothing written is lost.
void drop_pages(const uint8_t* begin, const uint8_t* end) {
  if (end <= begin) return;
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(begin) & ~(page - 1);
  madvise(reinterpret_cast<void*>(lo), size_t(reinterpret_cast<uintptr_t>(end) - lo), MADV_DONTNEED);
  // (advice: a failure only leaves the pages resident)
}
}  // namespace

void SafetensorsFile::release(const std::string& name) const {
  const TensorInfo& t = info(name);
  if (mapped_) drop_pages(data_ + t.begin, data_ + t.end);
}

void SafetensorsFile::release_all() const {
  // (the header was parsed into header_ and tensors_: its mapped bytes are not read again)
  if (mapped_) drop_pages(data_, base_ + size_);
}

std::vector<int32_t> SafetensorsFile::to_i32(const std::string& name) const {
  const TensorInfo& t = info(name);
  const uint8_t* p = data(t);
  const int64_t n = numel(t.shape);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (t.dtype == DType::I32) {
      std::memcpy(&v[i], p + 4 * i, 4);
    } else if (t.dtype == DType::I64) {
      int64_t x;
      std::memcpy(&x, p + 8 * i, 8);
      if (x < INT32_MIN || x > INT32_MAX) fail(path_, "tensor '" + name + "': value out of int32 range");
      v[i] = int32_t(x);
    } else {
      fail(path_, "tensor '" + name + "': dtype " + dtype_name(t.dtype) + ", expected I32 or I64");
    }
  }
  return v;
}

std::vector<uint8_t> safetensors_bytes(const std::vector<TensorToWrite>& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  // nlohmann::ordered_json keeps the given tensor order in the header.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t off = 0;
  for (const auto& t : tensors) {
    const uint64_t bytes = uint64_t(numel(t.shape)) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::vector<uint8_t> out;
  out.reserve(8 + h.size() + off);
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t((uint64_t(h.size()) >> (8 * i)) & 0xff));
  out.insert(out.end(), h.begin(), h.end());
  for (const auto& t : tensors) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    out.insert(out.end(), p, p + numel(t.shape) * dtype_size(t.dtype));
  }
  return out;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error(ErrorKind::Output, path + ": cannot open for writing");
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!f) throw Error(ErrorKind::Output, path + ": write failed");
}

}  // namespace mimi
