// SHA-256 (FIPS 180-4): the dataset mode's digests (manifests, the plan, finished shards) and the
// tests' checks of generated weights against the reference manifests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mimi {

class Sha256 {
 public:
  explicit Sha256(bool portable = false);  // portable: never the SHA extensions (tests compare the two)
  void update(const void* data, size_t n);
  std::string hex();  // finishes; the object is spent afterwards

 private:
  void block(const uint8_t* p);                 // one block, portable
  void blocks(const uint8_t* p, size_t n);       // n blocks: the SHA extensions where the CPU has them
 public:
  static bool use_sha_ni();  // whether blocks() uses the x86 SHA extensions
 private:
  bool portable_;
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t bits_ = 0;
};

std::string sha256_hex(const void* data, size_t n);
// Of a whole file, read in pieces. Throws Error(Input) naming the path.
std::string sha256_file(const std::string& path);

}  // namespace mimi
