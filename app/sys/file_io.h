// Bytes in and out: files or stdin/stdout ("-"). Outputs are written atomically, never over an
// input, never over another writer's result, and a signal or crash leaves nothing half-written
// under a final name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "app/sys/temporaries.h"  // install_signal_handlers, remove_pending_temporaries
#include "codec/error.h"

namespace mimi::app {

// Most bytes read from a pipe, a character device or stdin into memory (a regular file is read
// to its size): a token stream larger than this is not a token file.
constexpr uint64_t kMaxStreamedInputBytes = uint64_t(2) << 30;

// Called once with the first bytes of an input (up to 64 KiB, fewer only when that is the whole
// input) before the rest is read, so an input of the wrong kind (/dev/zero as tokens) is refused
// at once instead of after gigabytes. Throws Error(Input) to refuse.
using PrefixCheck = std::function<void(const uint8_t* data, size_t n)>;

// Whole file, or all of stdin for "-". Throws Error(Input) naming the path.
std::vector<uint8_t> read_input(const std::string& path, const PrefixCheck& check = nullptr);

// Opens an input file for reading (blocking reads); throws sys_error naming it. The one place
// inputs are opened: a FIFO is opened without blocking on a writer, then waited on for data,
// and after 2 s the wait is announced on stderr naming it (a stray FIFO in `encode dir/*`
// would otherwise hang the run silently; like cat or sox, it is still read once a writer comes).
int open_input(const std::string& path);

// Paths the current command reads: an output that is one of them (same file, through any name) is
// refused even with --force. Set once per command by the batch loop; from then on an OutputFile
// also refuses a path this process has already opened as an output (two inputs, one output).
void set_protected_inputs(const std::vector<std::string>& inputs);
// The shell may open stdout or stderr on an input (`mimi encode in.wav -o - >> in.wav`, `1<>`,
// `2>> in.wav`): writing there would change the input with exit 0. Throws Error(Output) when fd 1
// or 2 is a regular file that is one of `inputs` (same device and inode), before anything is
// written; a stderr that is an input is first pointed at /dev/null (the message cannot go there).
// `role` names what the files are to the command in the message ("input", "output").
void refuse_std_streams_onto(const std::vector<std::string>& inputs, const char* role = "input");

// One output file. To a regular path: a hidden temporary beside it (".NAME.mimi-tmp.HOST.PID.N")
// that commit() fsyncs and renames into place - without replacing a file that appeared meanwhile
// unless `force` - and that the destructor, a SIGINT/SIGTERM/SIGHUP, or the next run of mimi (for a
// SIGKILLed process: temporaries of dead processes of this host) removes. To "-": stdout. To an
// existing non-regular file (/dev/null, a FIFO, a terminal): written in place, no --force needed.
// Throws Error(Output) naming the path.
class OutputFile {
 public:
  OutputFile(const std::string& path, bool force);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  bool seekable() const { return seekable_; }  // a regular file (temporary): libsndfile may seek
  void write(const void* data, size_t n);
  // Records an error seen by a writer that does not throw (libsndfile's I/O callbacks); commit()
  // then fails with it.
  void fail(int err) { if (!error_) error_ = err; }
  int error() const { return error_; }  // the first recorded errno, 0 if none
  uint64_t bytes_written() const { return written_; }
  void commit();  // flush to disk and publish under the final name

 private:
  std::string path_, tmp_;
  std::string target_;  // where the output is published: path_, or the file its symlinks end at
  int fd_ = -1;
  int slot_ = -1;  // in the signal handler's table of temporaries
  int error_ = 0;
  bool force_ = false, seekable_ = false, committed_ = false;
  uint64_t written_ = 0;
};

// Writes `bytes` through an OutputFile and commits it.
void write_output(const std::string& path, const std::vector<uint8_t>& bytes, bool force);

// Writes all n bytes to a file descriptor (retrying short writes). Throws Error(Output).
void write_all(int fd, const void* data, size_t n, const std::string& what);

// Raises the soft limit on open files to at least `n` (within the hard limit) for commands that
// hold many files open at once (--batch); never lowers it, never fails.
void reserve_open_files(int n);

// How many more descriptors the soft open-file limit lets this process open now (it may be 0 or
// less); the largest long long where there is no limit.
long long open_file_room();

// The slots a --batch run gets: at most `asked`, at most `items` (0: unknown), and no more than
// the open-file limit holds at `fds_per_slot` per item, two items per slot (the pipelined runners
// keep an ended item open until its step is collected while its slot reads the next), beside the
// descriptors already open and a
// reserve (the limit is raised to the hard one first), and at least 1. Fewer than asked is a
// warning. Decided here, before any slot opens a file, so a low limit never shows up later as
// items that "cannot be opened"; a descriptor still missing then is EMFILE: Error(Environment).
int batch_slots(int asked, size_t items, int fds_per_slot);

// Where the output for `input` goes:
//   out == "-"                  -> "-" (stdout)
//   out ends with '/' or is a directory -> out/<stem><ext>
//   out non-empty               -> out (callers allow this for a single input only)
//   out empty, input "-"        -> "-"
//   out empty                   -> beside the input: <dir>/<stem><ext>
std::string output_path(const std::string& input, const std::string& out, const std::string& ext);
bool is_directory_target(const std::string& out);
// "-", or a path naming this process's descriptor 1 (/dev/stdout, /dev/fd/1, /proc/self/fd/1)
bool is_stdout_path(const std::string& path);

// The absolute, lexically normal form of `path` (bytes; no symlink resolved). Only a relative path
// asks for the current directory; when that is gone (deleted or moved away under a running shell)
// it is a usage error that names the path and says what to do, never an internal error.
std::string absolute_path(const std::string& path);
// `p` without "." and empty components, its ".." kept: "a/lnk/../x" names what the kernel opens
// (beside lnk's target when lnk is a symlink), which the textual "a/x" of lexically_normal()
// need not be (issue 26: a plan encoded another file than its manifest named, exit 0).
std::filesystem::path normal_keeping_parents(const std::filesystem::path& p);
// The current directory, or "" when it is gone (for callers that need it only for relative paths)
std::string current_dir();
// The usage error of a relative `path` met while the current directory is gone
Error cwd_gone(const std::string& path);

}  // namespace mimi::app
