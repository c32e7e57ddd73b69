// mimi::Error -> the Python class of its kind (python/mimi/_errors.py), with the CLI's message.
#include <nanobind/nanobind.h>

#include <string>

#include "codec/error.h"
#include "python/src/bind.h"

namespace mimi::py {
namespace {

const char* class_for(ErrorKind k) {
  switch (k) {
    case ErrorKind::Usage: return "UsageError";
    case ErrorKind::Input: return "InputError";
    case ErrorKind::Weights: return "WeightsError";
    case ErrorKind::Output: return "OutputError";
    case ErrorKind::Device: return "DeviceError";
    case ErrorKind::Environment: return "ResourceError";
    default: return "InternalError";
  }
}

}  // namespace

void bind_errors(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      nb::object cls = nb::module_::import_("mimi._errors").attr(class_for(e.kind()));
      // (a message may hold a file name's bytes, which need not be UTF-8: they come back as
      // os.fsdecode gives them, not as a UnicodeDecodeError instead of the error)
      const std::string what = e.what();
      PyObject* msg = PyUnicode_DecodeUTF8(what.data(), Py_ssize_t(what.size()), "surrogateescape");
      if (!msg) return;  // (the decoding's own error stands)
      PyErr_SetObject(cls.ptr(), msg);
      Py_DECREF(msg);
    }
  });
}

}  // namespace mimi::py
