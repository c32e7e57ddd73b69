// A read-only float32 tensor: a shape and a pointer into storage it shares ownership of
// (a memory-mapped weights file, or a vector of its own).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mimi {

using Shape = std::vector<int64_t>;

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s);  // "[2, 3, 4]"

struct Tensor {
  Shape shape;
  const float* data = nullptr;
  std::shared_ptr<const void> owner;  // keeps `data` alive

  int64_t size() const { return numel(shape); }
  bool empty() const { return data == nullptr; }

  // A tensor that owns its values.
  static Tensor from_vector(Shape shape, std::vector<float> values) {
    auto v = std::make_shared<std::vector<float>>(std::move(values));
    Tensor t;
    t.shape = std::move(shape);
    t.data = v->data();
    t.owner = v;
    return t;
  }
};

}  // namespace mimi
