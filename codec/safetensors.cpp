#include "codec/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>

#include "codec/error.h"
#include "codec/open_file.h"

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

// Reads up to len bytes at off, stopping early only at the end of the file; returns the count.
// A failed read is sys_error (EIO, ESTALE...: the environment; exit 75).
uint64_t pread_full(int fd, void* dst, uint64_t len, uint64_t off, const std::string& path) {
  auto* p = static_cast<uint8_t*>(dst);
  uint64_t got = 0;
  while (got < len) {
    const size_t chunk = size_t(std::min<uint64_t>(len - got, uint64_t(1) << 30));
    const ssize_t r = ::pread(fd, p + got, chunk, off_t(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw sys_error(errno, ErrorKind::Input, path, "read failed");
    }
    if (r == 0) break;  // the end of the file
    got += uint64_t(r);
  }
  return got;
}

uint64_t le64(const uint8_t* b) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b[i];
  return n;
}

bool same_time(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

// n values of a float dtype at p as float32 (p need not be aligned).
void convert_f32(const uint8_t* p, DType dtype, int64_t n, float* v) {
  switch (dtype) {
    case DType::F32: std::memcpy(v, p, size_t(n) * 4); break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        v[i] = half_to_float(h);
      }
      break;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        v[i] = bf16_to_float(h);
      }
      break;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        v[i] = float(d);
      }
      break;
    default: break;  // (callers check the dtype)
  }
}

bool is_float_dtype(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F64; }

// Reads up to len bytes of a stream into dst, stopping early only at its end; returns the count.
uint64_t read_full(int fd, uint8_t* dst, uint64_t len, const std::string& path) {
  uint64_t got = 0;
  while (got < len) {
    const ssize_t r = ::read(fd, dst + got, size_t(std::min<uint64_t>(len - got, uint64_t(1) << 30)));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw sys_error(errno, ErrorKind::Input, path, "read failed");
    }
    if (r == 0) break;
    got += uint64_t(r);
  }
  return got;
}

// The end of the data section a header declares: the largest data_offsets end (0 when the header
// is not JSON or declares no tensor; from_bytes then says what is wrong with it).
uint64_t declared_data_size(const uint8_t* header, uint64_t n) {
  const nlohmann::json j = nlohmann::json::parse(header, header + n, nullptr, /*allow_exceptions=*/false);
  uint64_t end = 0;
  if (!j.is_object()) return 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__" || !it->is_object() || !it->contains("data_offsets")) continue;
    const auto& off = (*it)["data_offsets"];
    if (off.is_array() && off.size() == 2 && off[1].is_number_unsigned()) end = std::max(end, off[1].get<uint64_t>());
  }
  return end;
}

// The most a stream may make us hold: the machine's memory (the bytes are kept, as the model's
// weights). A header declaring more is refused before anything is allocated.
uint64_t stream_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : uint64_t(64) << 30;
}

}  // namespace

// A stream (pipe, FIFO, /dev/stdin, a character device) has no size to trust (st_size 0) and
// cannot be read twice, so its bytes are read once, front to back, into memory of our own: the
// 8-byte header length, the header, then exactly as many data bytes as the header's tensors end
// at, never "to the end" (/dev/urandom has none). What was read is then a file in memory
// (from_bytes: the same validation, and the same tensors and fingerprint as the same bytes in a
// file). A stream ending early is an error naming the path and where it ended.
SafetensorsFile SafetensorsFile::read_stream(int fd, const std::string& path) {
  // The safetensors format's own bound on the header (its reference reader refuses more).
  constexpr uint64_t kMaxHeader = 100'000'000;
  std::vector<uint8_t> bytes(8);
  const uint64_t head = read_full(fd, bytes.data(), 8, path);
  if (head == 0) fail(path, "is empty (a stream that ended at once): no safetensors data");
  if (head < 8) fail(path, "truncated: the stream ended after " + std::to_string(head) + " bytes, inside its 8-byte header length");
  const uint64_t n = le64(bytes.data());
  if (n < 2 || n > kMaxHeader)  // /dev/zero: 0
    fail(path, "not a safetensors file: header length " + std::to_string(n) + " (expected 2 to " +
                   std::to_string(kMaxHeader) + " bytes of JSON)");
  bytes.resize(8 + n);
  if (const uint64_t got = read_full(fd, bytes.data() + 8, n, path); got < n)
    fail(path, "truncated: the stream ended after " + std::to_string(8 + got) + " bytes, inside its " +
                   std::to_string(n) + "-byte header");
  const uint64_t data = declared_data_size(bytes.data() + 8, n), limit = stream_limit();
  if (8 + n > limit || data > limit - 8 - n)
    fail(path, "its header declares " + std::to_string(data) + " bytes of tensor data, more than this machine's memory (" +
                   std::to_string(limit) + " bytes) to hold them from a stream: not Mimi weights");
  // Room for all of it now (address space only), filled a chunk at a time: the memory touched
  // never runs more than a chunk ahead of what the stream has sent. Where the address space is
  // limited (ulimit -v) and the header declares more than it allows, the bytes are taken as they
  // come instead, so that a header lying about a short stream is still "truncated" (exit 4).
  const uint64_t total = 8 + n + data;
  try {
    bytes.reserve(size_t(total));
  } catch (const std::bad_alloc&) {
  }
  for (uint64_t at = 8 + n; at < total;) {
    const uint64_t chunk = std::min<uint64_t>(total - at, uint64_t(4) << 20);
    bytes.resize(size_t(at + chunk));
    const uint64_t got = read_full(fd, bytes.data() + at, chunk, path);
    at += got;
    if (got < chunk)
      fail(path, "truncated: the stream ended after " + std::to_string(at) + " of the " + std::to_string(total) +
                     " bytes its header declares");
  }
  return from_bytes(std::make_shared<const std::vector<uint8_t>>(std::move(bytes)), path);
}

namespace safetensors_testing {
void (*before_tensor_read)(const std::string& path, const std::string& tensor) = nullptr;
}  // namespace safetensors_testing

// An opened file: its descriptor (closed with the last copy of the SafetensorsFile) and what
// fstat said at open.
struct SafetensorsFile::OpenFile {
  int fd = -1;
  struct stat st {};
  std::once_flag whole_once;
  std::vector<uint8_t> whole;  // data(): the data section, read on first use
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

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
  auto of = std::make_shared<OpenFile>();
  of->fd = open_for_reading(path, ErrorKind::Input);
  if (fstat(of->fd, &of->st) != 0) throw sys_error(errno, ErrorKind::Input, path, "cannot stat");
  if (S_ISDIR(of->st.st_mode)) fail(path, "is a directory, not a safetensors file");
  if (!S_ISREG(of->st.st_mode)) return read_stream(of->fd, path);  // a pipe, FIFO, device
  // Tensors are read front to back, mostly: let the kernel read ahead (a cold cache, NFS).
  posix_fadvise(of->fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // (advice: a failure changes nothing)
  f.size_ = uint64_t(of->st.st_size);
  f.file_ = of;
  if (f.size_ < 8) fail(path, "too short for a safetensors file (" + std::to_string(f.size_) + " bytes)");
  uint8_t len[8];
  if (pread_full(of->fd, len, 8, 0, path) != 8) fail(path, "truncated while being read (its length header)");
  const uint64_t n = le64(len);
  if (n > f.size_ - 8)
    fail(path, "header length " + std::to_string(n) + " exceeds the file (" + std::to_string(f.size_) +
                   " bytes): truncated or not safetensors");
  std::vector<uint8_t> header(static_cast<size_t>(n));
  if (pread_full(of->fd, header.data(), n, 8, path) != n) fail(path, "truncated while being read (its header)");
  f.parse(path, header.data(), n);
  return f;
}

SafetensorsFile SafetensorsFile::from_bytes(std::shared_ptr<const std::vector<uint8_t>> bytes,
                                            const std::string& what) {
  SafetensorsFile f;
  f.path_ = what;
  f.size_ = bytes->size();
  f.bytes_ = std::move(bytes);
  if (f.size_ < 8) fail(what, "too short for a safetensors file (" + std::to_string(f.size_) + " bytes)");
  const uint64_t n = le64(f.bytes_->data());
  if (n > f.size_ - 8)
    fail(what, "header length " + std::to_string(n) + " exceeds the file (" + std::to_string(f.size_) +
                   " bytes): truncated or not safetensors");
  f.parse(what, f.bytes_->data() + 8, n);
  return f;
}

// The header (n bytes after the length) against a file of size_ bytes.
void SafetensorsFile::parse(const std::string& what, const uint8_t* header, uint64_t n) {
  header_.assign(reinterpret_cast<const char*>(header), size_t(n));
  data_begin_ = 8 + n;
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

const uint8_t* SafetensorsFile::data(const TensorInfo& t) const {
  if (bytes_) return bytes_->data() + data_begin_ + t.begin;
  OpenFile& of = *file_;
  std::call_once(of.whole_once, [&] {
    std::vector<uint8_t> all(static_cast<size_t>(size_ - data_begin_));
    if (pread_full(of.fd, all.data(), all.size(), data_begin_, path_) != all.size())
      fail(path_, "truncated while being read (the file is now shorter than when it was opened)");
    of.whole = std::move(all);
  });
  return of.whole.data() + t.begin;
}

void SafetensorsFile::read_raw(const TensorInfo& t, void* dst) const {
  const uint64_t len = t.end - t.begin;
  if (bytes_) {
    if (len) std::memcpy(dst, bytes_->data() + data_begin_ + t.begin, size_t(len));
    return;
  }
  if (safetensors_testing::before_tensor_read) safetensors_testing::before_tensor_read(path_, t.name);
  const uint64_t at = data_begin_ + t.begin;
  if (pread_full(file_->fd, dst, len, at, path_) != len) {
    struct stat now {};
    const std::string size_now = fstat(file_->fd, &now) == 0 ? std::to_string(now.st_size) : "fewer";
    fail(path_, "truncated while being read: tensor '" + t.name + "' needs bytes [" + std::to_string(at) + ", " +
                    std::to_string(at + len) + "), the file now has " + size_now + " bytes (it had " +
                    std::to_string(size_) + " when opened); another program is writing it, run again once it is " +
                    "complete");
  }
}

void SafetensorsFile::read_f32(const std::string& name, float* dst) const {
  const TensorInfo& t = info(name);
  if (!is_float_dtype(t.dtype))
    fail(path_, "tensor '" + name + "': dtype " + dtype_name(t.dtype) +
                    ", expected a float dtype (F32, F16, BF16 or F64)");
  const int64_t n = numel(t.shape);
  if (t.dtype == DType::F32) return read_raw(t, dst);  // straight into place
  if (bytes_) return convert_f32(bytes_->data() + data_begin_ + t.begin, t.dtype, n, dst);
  std::vector<uint8_t> raw(static_cast<size_t>(t.end - t.begin));
  read_raw(t, raw.data());
  convert_f32(raw.data(), t.dtype, n, dst);
}

Tensor SafetensorsFile::to_f32(const std::string& name) const {
  const TensorInfo& t = info(name);
  if (bytes_ && t.dtype == DType::F32) {
    const uint8_t* p = bytes_->data() + data_begin_ + t.begin;
    if (reinterpret_cast<uintptr_t>(p) % alignof(float) == 0) {  // zero-copy: the bytes never change
      Tensor out;
      out.shape = t.shape;
      out.data = reinterpret_cast<const float*>(p);
      out.owner = bytes_;
      return out;
    }
  }
  std::vector<float> v(static_cast<size_t>(numel(t.shape)));
  read_f32(name, v.data());
  return Tensor::from_vector(t.shape, std::move(v));
}

void SafetensorsFile::check_unchanged() const {
  if (!file_) return;
  struct stat now {};
  if (fstat(file_->fd, &now) != 0) throw sys_error(errno, ErrorKind::Input, path_, "cannot stat");
  const struct stat& was = file_->st;
  // A write or a truncation sets the modification and change times. The change time also moves
  // when the file is only unlinked (renamed over by a download that writes a new file, deleted):
  // its bytes stay those read, so then it is not compared.
  const bool unlinked = now.st_nlink < was.st_nlink;
  if (now.st_size != was.st_size || !same_time(now.st_mtim, was.st_mtim) ||
      (!unlinked && !same_time(now.st_ctim, was.st_ctim)))
    fail(path_, "changed while being read (" +
                    (now.st_size != was.st_size ? "size " + std::to_string(was.st_size) + " -> " +
                                                      std::to_string(now.st_size) + " bytes"
                                                : std::string("written to")) +
                    "): another program is writing it; run again once it is complete");
}

std::vector<int32_t> SafetensorsFile::to_i32(const std::string& name) const {
  const TensorInfo& t = info(name);
  if (t.dtype != DType::I32 && t.dtype != DType::I64)
    fail(path_, "tensor '" + name + "': dtype " + dtype_name(t.dtype) + ", expected I32 or I64");
  const int64_t n = numel(t.shape);
  std::vector<uint8_t> raw;
  const uint8_t* p = nullptr;
  if (bytes_) {
    p = bytes_->data() + data_begin_ + t.begin;
  } else {
    raw.resize(static_cast<size_t>(t.end - t.begin));
    read_raw(t, raw.data());
    p = raw.data();
  }
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (t.dtype == DType::I32) {
      std::memcpy(&v[i], p + 4 * i, 4);
    } else {
      int64_t x;
      std::memcpy(&x, p + 8 * i, 8);
      if (x < INT32_MIN || x > INT32_MAX) fail(path_, "tensor '" + name + "': value out of int32 range");
      v[i] = int32_t(x);
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
