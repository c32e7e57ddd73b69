// safetensors reader (read with pread(), never mapped; a stream read once into memory; strictly
// validated) and writer.
// Format: u64 LE header length N, N bytes of JSON {name: {dtype, shape, data_offsets:[b,e]},
// "__metadata__": {str: str}}, then the raw little-endian data; offsets are relative to it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codec/tensor.h"

namespace mimi {

enum class DType { F32, F16, BF16, F64, I32, I64, I16, I8, U8, BOOL };

const char* dtype_name(DType d);
size_t dtype_size(DType d);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

class SafetensorsFile {
 public:
  // Opens `path` and validates the header: JSON, known dtypes, non-negative shapes, byte
  // ranges that match numel * dtype size, lie inside the file and do not overlap. The file is
  // not mapped: its header is read now and each tensor with pread() when asked for (read_f32,
  // to_f32, to_i32), so a file truncated meanwhile is an error, never a SIGBUS, and nothing the
  // caller keeps can change with the file (issue 26: weights overwritten during a run).
  // A non-regular file (a pipe, FIFO, /dev/stdin, a character device) is read once, front to
  // back, into memory: exactly the size its header declares (bounded by the machine's memory),
  // then it is as from_bytes (in_memory()). A stream that ends early or whose header length is
  // not that of a safetensors file (/dev/zero: 0) is Error(Input) naming the path.
  static SafetensorsFile open(const std::string& path);
  // Same, over bytes held in memory (`what` names them in errors).
  static SafetensorsFile from_bytes(std::shared_ptr<const std::vector<uint8_t>> bytes,
                                    const std::string& what);

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // throws if missing
  // The tensor's raw bytes. For an opened file, the first call reads the whole data section into
  // memory (tests and tools comparing small files; loaders use read_f32).
  const uint8_t* data(const TensorInfo& t) const;
  uint64_t file_size() const { return size_; }
  const std::string& header_json() const { return header_; }
  bool in_memory() const { return !file_; }

  // Tensor `name` as float32 (F32 copied, F16/BF16/F64 converted) into dst[numel]. For an
  // opened file: read with pread(); a file now shorter than the tensor's end is
  // Error(Input, "PATH: truncated while being read ..."), a failed read sys_error(errno).
  void read_f32(const std::string& name, float* dst) const;
  // A float tensor as float32 in memory of its own; from bytes in memory, aligned F32 is
  // zero-copy (the tensor shares their ownership).
  Tensor to_f32(const std::string& name) const;
  std::vector<int32_t> to_i32(const std::string& name) const;  // I32/I64 -> int32

  // For an opened file: throws Error(Input, "PATH: changed while being read ...") unless the
  // open file still has the size, modification and change times it had when opened. A loader
  // calls it once every tensor is read: the bytes it holds are then those of one version of the
  // file, not a mix of two. No-op for bytes in memory.
  void check_unchanged() const;


 private:
  struct OpenFile;
  static SafetensorsFile read_stream(int fd, const std::string& path);
  void parse(const std::string& what, const uint8_t* header, uint64_t header_len);
  void read_raw(const TensorInfo& t, void* dst) const;  // the tensor's bytes, as stored

  std::string path_;
  std::shared_ptr<const std::vector<uint8_t>> bytes_;  // in memory: the whole file
  std::shared_ptr<OpenFile> file_;                     // opened: descriptor and identity
  uint64_t size_ = 0;
  uint64_t data_begin_ = 0;  // offset of the data section (8 + header length)
  std::string header_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

namespace safetensors_testing {
// Tests only: called (when set) before the bytes of each tensor are read from an opened file,
// with its path and the tensor's name, so a test can change the file in the middle of a load.
extern void (*before_tensor_read)(const std::string& path, const std::string& tensor);
}  // namespace safetensors_testing

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  const void* data = nullptr;  // numel * dtype_size bytes, little-endian
};

// A safetensors file's bytes, tensors in the given order (header padded to 8 bytes).
std::vector<uint8_t> safetensors_bytes(const std::vector<TensorToWrite>& tensors,
                                       const std::map<std::string, std::string>& metadata = {});

// Writes bytes to a file (truncating it). Throws Error(Output).
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);

float half_to_float(uint16_t h);
float bf16_to_float(uint16_t h);

}  // namespace mimi
