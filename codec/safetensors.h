// safetensors reader (memory-mapped, strictly validated) and writer.
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
  // Maps `path` and validates the header: JSON, known dtypes, non-negative shapes, byte
  // ranges that match numel * dtype size, lie inside the file and do not overlap.
  static SafetensorsFile open(const std::string& path);
  // Same, over bytes held in memory (`what` names them in errors).
  static SafetensorsFile from_bytes(std::shared_ptr<const std::vector<uint8_t>> bytes,
                                    const std::string& what);

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // throws if missing
  const uint8_t* data(const TensorInfo& t) const { return data_ + t.begin; }
  uint64_t file_size() const { return size_; }
  const std::string& header_json() const { return header_; }

  // A float tensor as float32: zero-copy for aligned F32, converted for F16/BF16/F64.
  Tensor to_f32(const std::string& name) const;
  std::vector<int32_t> to_i32(const std::string& name) const;  // I32/I64 -> int32

  // Lets the OS drop from this process's memory the mapped pages holding tensor `name` (every
  // page the tensor touches): a later read pages them back in from the file (the page cache),
  // with the same bytes. A load releases each tensor once it is checked and fingerprinted, so
  // a run keeps resident only the weights its direction reads, not the whole file, and never
  // the file bytes of tensors it converted or copied. No-op for files held in memory.
  void release(const std::string& name) const;
  void release_all() const;  // the pages of every tensor

 private:
  void parse(const std::string& what);

  std::string path_;
  std::shared_ptr<const void> owner_;  // mapping or byte vector
  bool mapped_ = false;                // owner_ is a file mapping (release() may drop pages)
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  const uint8_t* data_ = nullptr;
  std::string header_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

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
