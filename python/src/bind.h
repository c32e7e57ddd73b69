// The pieces of the Python module mimi._mimi (python/mimi/ is its Python face): each file binds
// one part. Only this layer turns mimi::Error into Python exceptions (python/mimi/_errors.py).
#pragma once

#include <nanobind/nanobind.h>

namespace mimi::py {
namespace nb = nanobind;

void bind_errors(nb::module_& m);  // the translator of mimi::Error to mimi.Error's subclasses
void bind_codec(nb::module_& m);   // _Codec: a loaded engine
void bind_tokens(nb::module_& m);  // read_tokens: every token format the CLI writes
void bind_fork(nb::module_& m);    // the at-fork handler (fork.cpp)
void bind_stream(nb::module_& m);  // _StreamEncoder, _StreamDecoder (stream.cpp)
void bind_dataset(nb::module_& m); // _dataset_shards (dataset.cpp)

}  // namespace mimi::py
