// Bytes in and out: files or stdin/stdout ("-"), outputs written atomically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mimi::app {

// Whole file, or all of stdin for "-". Throws Error(Input).
std::vector<uint8_t> read_input(const std::string& path);

// Writes to a temporary file beside `path` and renames it into place, so the final name only
// ever holds a complete file. Refuses to replace an existing file unless `force`.
// "-" writes to stdout. Throws Error(Output).
void write_output(const std::string& path, const std::vector<uint8_t>& bytes, bool force);

// Writes all n bytes to a file descriptor (retrying short writes). Throws Error(Output).
void write_all(int fd, const void* data, size_t n, const std::string& what);

// Where the output for `input` goes:
//   out == "-"                  -> "-" (stdout)
//   out ends with '/' or is a directory -> out/<stem><ext>
//   out non-empty               -> out (callers allow this for a single input only)
//   out empty, input "-"        -> "-"
//   out empty                   -> beside the input: <dir>/<stem><ext>
std::string output_path(const std::string& input, const std::string& out, const std::string& ext);
bool is_directory_target(const std::string& out);

}  // namespace mimi::app
