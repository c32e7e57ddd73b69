// The one error type of kernels/ and codec/ (which re-exports it through codec/error.h): thrown,
// never printed. app/ maps `kind` to an exit code and a message. It lives in kernels/ so that
// the layers only point down (kernels/ never includes codec/).
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstring>
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
  // The machine, not the data: out of memory, out of file descriptors, an I/O error of the disk or
  // the network file system, a resource temporarily unavailable. Never recorded against an input
  // (the same input works on a retry); the run stops with a retryable exit code.
  Environment,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// The one place where an errno is judged: true for the errors that say nothing about the file
// being read or written but about the machine it runs on. Everything that opens, reads, maps or
// writes classifies its errno here (errno_kind) instead of deciding per call site.
inline bool is_environment_errno(int err) {
  switch (err) {
    case EMFILE: case ENFILE: case ENOMEM: case ENOBUFS: case EIO: case ESTALE: case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case EINTR: case ETIMEDOUT: case ENOLCK: case EDEADLK: case ENETDOWN: case ENETUNREACH: case ENETRESET:
    case ECONNABORTED: case ECONNRESET: case ECONNREFUSED: case EHOSTDOWN: case EHOSTUNREACH: case ENOLINK:
    case ECOMM: case EREMOTEIO: case EBUSY: case ETXTBSY: case ENOTCONN: case ESHUTDOWN: case ENOSR:
    case ENOSPC: case EDQUOT: case EROFS: case EUCLEAN:
      return true;
    default:
      return false;
  }
}

// The kind of an error that carries errno `err`: Environment for the machine's failures, else
// `otherwise` (Input for a file read, Weights for the weights, Output for a file written). An
// output that cannot be written (full disk, read-only or failing file system) stays Output, exit 5
// as documented; only running out of descriptors or memory while writing one is the environment.
inline ErrorKind errno_kind(int err, ErrorKind otherwise) {
  if (otherwise == ErrorKind::Output)
    return (err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS) ? ErrorKind::Environment
                                                                               : ErrorKind::Output;
  return is_environment_errno(err) ? ErrorKind::Environment : otherwise;
}

// The Error of a failed system call on `what` (a path, or "stdin"): its kind from errno_kind, its
// message "WHAT: DOING: strerror". An environment error says it is one, so that a user (and a job
// array's retry logic) knows the file is not to blame.
inline Error sys_error(int err, ErrorKind otherwise, const std::string& what, const std::string& doing) {
  const ErrorKind k = errno_kind(err, otherwise);
  std::string msg = what + ": " + doing + ": " + std::strerror(err);
  if (k == ErrorKind::Environment) msg += " (a failure of the machine, not of this file; run again)";
  // a relative path after the current directory was deleted: ENOENT, whatever the path
  char one[1];
  if (err == ENOENT && !what.empty() && what[0] != '/' && !::getcwd(one, sizeof one) && errno == ENOENT)
    msg += " (the current directory is gone: deleted or moved away; relative paths cannot be resolved from it)";
  return Error(k, msg);
}

}  // namespace mimi
