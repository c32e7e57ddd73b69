// numpy arrays out of C++ vectors: the array owns its vector (a capsule frees it), no copy.
#pragma once

#include <nanobind/ndarray.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "codec/engine.h"

namespace mimi::py {
namespace nb = nanobind;

template <class T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& v, std::initializer_list<size_t> shape) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(heap->data(), shape, owner);
}

// Codes as the Python API hands them out: int64 [n_q, frames] (what torch embeddings and HF's
// audio_codes use).
nb::ndarray<nb::numpy, int64_t> codes_to_numpy(const Codes& c);

// A C-contiguous integer array [n_q, frames] (int64 from Python) as Codes; a value outside int32
// is refused (Error(Input)) rather than wrapped.
using CodesIn = nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
Codes codes_from_numpy(const CodesIn& a);

}  // namespace mimi::py
