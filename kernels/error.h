// The one error type of kernels/ and codec/ (which re-exports it through codec/error.h): thrown,
// never printed. app/ maps `kind` to an exit code and a message. It lives in kernels/ so that
// the layers only point down (kernels/ never includes codec/).
#pragma once

#include <stdexcept>
#include <string>

namespace mimi {

enum class ErrorKind {
  Usage,     // the caller asked for something invalid (bad n_q, empty input, bad device name)
  Input,     // an input file is unreadable or malformed
  Weights,   // the weights/config are missing, malformed, or do not match the model
  Output,    // an output could not be written
  Device,    // a requested device/backend is missing
  Internal,  // a bug
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace mimi
