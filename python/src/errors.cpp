// mimi::Error -> the Python class of its kind (python/mimi/_errors.py), with the CLI's message.
#include <nanobind/nanobind.h>

#include <new>
#include <utility>
#include <string>
#include <system_error>

#include "codec/error.h"
#include "python/src/bind.h"

namespace mimi::py {
namespace {

// The engine's messages are the CLI's, and some name its options ("exists (use --force to
// overwrite)", "pass --config"): said here with the Python argument that does the same. Only whole
// option tokens are replaced (a file name such as "a--force.wav" is left as it is).
std::string python_words(std::string m) {
  static const std::pair<const char*, const char*> kWords[] = {
      {"--allow-weights-mismatch", "allow_weights_mismatch=True"},
      {"--force", "force=True"},
      {"--no-cache", "cache=False"},
      {"--recover", "recover=True"},
      {"--weights", "weights"},
      {"--config", "config"},
      {"--device", "device"},
      {"--threads", "threads"},
      {"--n-q", "n_q"},
      {"--sample-rate", "sample_rate"},
      {"--sample-format", "sample_format"},
      {"--batch", "slots"},
  };
  auto word_char = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; };
  for (const auto& [cli, py] : kWords) {
    const std::string from(cli);
    for (size_t at = m.find(from); at != std::string::npos; at = m.find(from, at)) {
      const size_t end = at + from.size();
      const bool starts = at == 0 || !(word_char(m[at - 1]) || m[at - 1] == '/' || m[at - 1] == '.');
      if (starts && (end == m.size() || !word_char(m[end]))) {
        m.replace(at, from.size(), py);
        at += std::char_traits<char>::length(py);
      } else {
        at = end;
      }
    }
  }
  return m;
}

const char* class_for(ErrorKind k);
void raise(ErrorKind kind, const std::string& message) {
  const std::string what = python_words(message);
  nb::object cls = nb::module_::import_("mimi._errors").attr(class_for(kind));
  // (a message may hold a file name's bytes, which need not be UTF-8: they come back as
  // os.fsdecode gives them, not as a UnicodeDecodeError instead of the error)
  PyObject* msg = PyUnicode_DecodeUTF8(what.data(), Py_ssize_t(what.size()), "surrogateescape");
  if (!msg) return;  // (the decoding's own error stands)
  PyErr_SetObject(cls.ptr(), msg);
  Py_DECREF(msg);
}

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
      raise(e.kind(), e.what());
    } catch (const std::bad_alloc&) {  // as the CLI (app/main.cpp): the machine's limit, not the input
      raise(ErrorKind::Environment, "out of memory (a failure of the machine, not of the input; run again with more memory)");
    } catch (const std::system_error& e) {  // std::thread, std::filesystem: errno-carrying
      const ErrorKind k = errno_kind(e.code().value(), ErrorKind::Internal);
      raise(k, std::string(k == ErrorKind::Internal ? "internal error: " : "") + e.what());
    } catch (const nb::python_error&) {
      throw;  // a Python exception on its way out: not ours to translate
    } catch (const nb::builtin_exception&) {
      throw;  // nanobind's own (TypeError for arguments of the wrong type...)
    } catch (const std::exception& e) {
      raise(ErrorKind::Internal, std::string("internal error: ") + e.what());
    }
  });
}

}  // namespace mimi::py
