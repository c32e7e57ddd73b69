// SHA-256 (FIPS 180-4), for checking generated weights against the reference manifests.
#pragma once

#include <cstddef>
#include <string>

namespace mimi::test {
std::string sha256_hex(const void* data, size_t n);
}
