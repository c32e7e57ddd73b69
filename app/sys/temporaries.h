// Temporaries: the hidden files and folders an output is written in before it is published under
// its final name, and the signal handling that removes them when the process is ended. A signal,
// a crash or a kill never leaves anything half-written under a final name, and the next run
// removes what a SIGKILLed process left.
#pragma once

#include <filesystem>
#include <string>

namespace mimi::app {

// ".mimi-tmp.HOST.": in every temporary's name, so that the sweep below can tell them
const std::string& temp_marker();

// A fresh name for a temporary of `name`: ".NAME.mimi-tmp.HOST.PID.N", NAME cut short where the
// whole would pass NAME_MAX (255 bytes), so that an output name of up to 255 bytes is writable.
std::string temporary_name(const std::string& name);

// The signal handler's tables. A registered file is unlinked, a registered folder emptied and
// removed (its files only: staging folders hold no subfolders) when a terminating signal ends
// the process. -1: the table is full (the next run's sweep still removes it).
int register_temporary(const std::string& path);
void unregister_temporary(int slot);
int register_temporary_folder(const std::string& path);
void unregister_temporary_folder(int slot);

// Removes the temporaries (files and folders) in `dir` that processes of this host, now gone, left
// (a SIGKILL, a power cut), once per directory per run. Temporaries of other hosts (a shared file
// system) and of live processes (each holds an flock on its temporary) are left alone.
void clean_stale_temporaries(const std::filesystem::path& dir);

// SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2/SIGALRM/SIGVTALRM/SIGXCPU/SIGPWR (every signal
// whose default ends the process) remove the temporaries being written and exit 128 + signal;
// SIGPIPE and SIGXFSZ are ignored so a closed pipe or a file-size limit is a write error (exit 5),
// not a kill.
void install_signal_handlers();

// Unlinks the temporaries being written (async-signal-safe): for every way the process can end
// without unwinding (a signal, std::terminate, a library calling exit()).
void remove_pending_temporaries();

// While one exists, a terminating signal is held back, and acted on (temporaries removed, exit
// 128 + signal) when the last one ends: for a group of renames that must happen all or none.
class SignalsDeferred {
 public:
  SignalsDeferred();
  ~SignalsDeferred();
  SignalsDeferred(const SignalsDeferred&) = delete;
  SignalsDeferred& operator=(const SignalsDeferred&) = delete;
};

}  // namespace mimi::app
