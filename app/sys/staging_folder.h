// A set of files that appears in a directory all at once or not at all (a dataset plan: its shard
// lists and the plan.json that says they are complete). The files are written into a hidden
// temporary folder inside the directory; publish() renames them into place with terminating
// signals held back, so a full disk, an error or a signal while writing leaves the directory as
// it was, and the set is never cut in two by a signal. (A SIGKILL or a power cut during the
// renames themselves can still cut it: the last file published is the one that says the set is
// complete, so a reader sees no complete set, and the next run removes the temporary folder.)
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace mimi::app {

class StagingFolder {
 public:
  // Creates ".staging.mimi-tmp.HOST.PID.N" inside `dir` (made if missing). Throws Error(Output).
  explicit StagingFolder(const std::string& dir);
  ~StagingFolder();  // removes the folder and whatever was not published
  StagingFolder(const StagingFolder&) = delete;
  StagingFolder& operator=(const StagingFolder&) = delete;

  // Writes the file `name` (no '/') into the folder; not yet durable. Throws Error(Output).
  void write(const std::string& name, const std::string& text);

  // Makes the written files durable (one syncfs), then with terminating signals held back runs
  // `before` (removal of what the set replaces), renames every written file into the directory in
  // the order written (the last one says the set is complete) and syncs the directory. Throws
  // Error(Output).
  void publish(const std::function<void()>& before);

 private:
  std::string dir_, path_;
  int fd_ = -1;    // the folder, flocked for its life (the stale sweep of another process skips it)
  int slot_ = -1;  // in the signal handler's folder table
  std::vector<std::string> names_;  // written, in order
  size_t published_ = 0;            // how many of names_ are in place
};

}  // namespace mimi::app
