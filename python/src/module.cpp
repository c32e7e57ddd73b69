// mimi._mimi: the engine as a Python extension. The Python API lives in python/mimi/__init__.py.
#include "python/src/bind.h"

NB_MODULE(_mimi, m) {
  m.doc() = "mimi's engine (the C++ core of the mimi package; use the mimi module)";
  mimi::py::bind_errors(m);
  mimi::py::bind_codec(m);
  mimi::py::bind_stream(m);
  mimi::py::bind_tokens(m);
  mimi::py::bind_fork(m);
  mimi::py::bind_dataset(m);
  m.attr("__version__") = MIMI_VERSION;
}
