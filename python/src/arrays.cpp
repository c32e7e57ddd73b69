#include "python/src/arrays.h"

#include <string>

#include "codec/error.h"

namespace mimi::py {

nb::ndarray<nb::numpy, int64_t> codes_to_numpy(const Codes& c) {
  std::vector<int64_t> v(c.data.begin(), c.data.end());
  return to_numpy(std::move(v), {size_t(c.n_q), size_t(c.frames)});
}

Codes codes_from_numpy(const CodesIn& a) {
  Codes c;
  c.n_q = int(a.shape(0));
  c.frames = int64_t(a.shape(1));
  c.data.resize(a.size());
  const int64_t* p = a.data();
  for (size_t i = 0; i < a.size(); ++i) {
    if (p[i] < INT32_MIN || p[i] > INT32_MAX)
      throw Error(ErrorKind::Input, "codes: value " + std::to_string(p[i]) + " at codebook " +
                                        std::to_string(i / size_t(c.frames)) + ", frame " +
                                        std::to_string(i % size_t(c.frames)) + " is not a code");
    c.data[i] = int32_t(p[i]);
  }
  return c;
}

}  // namespace mimi::py
