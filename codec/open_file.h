// The one opener of files read by name, for codec/ (weights, configs) and app/ (audio, tokens,
// manifests): a FIFO with no writer yet is waited for with a notice instead of in silence.
#pragma once

#include <string>

#include "codec/error.h"

namespace mimi {

// Told (once per open) that `path` is a FIFO or pipe with no data after 2 s, before the wait goes
// on. codec/ cannot print; the CLI sets a notice on stderr (app/main.cpp). nullptr: wait silently.
using WaitNotice = void (*)(const std::string& path);
void set_wait_notice(WaitNotice notice);

// open(path, O_RDONLY | O_CLOEXEC) that does not block in open() on a FIFO with no writer: it
// polls for the writer's data or its close, giving the notice after 2 s. Returns a blocking fd.
// Throws sys_error(errno, kind, path, doing) (the errno judged there: EMFILE is the machine).
int open_for_reading(const std::string& path, ErrorKind kind, const std::string& doing = "cannot open");

}  // namespace mimi
