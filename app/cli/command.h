// A subcommand of mimi as main.cpp's command table holds it: `add` registers the subcommand with
// its options (owned by its file, app/cli/<command>.cpp), then main parses, asks the parsed one to
// check() what only the values decide, refuses its inputs as stdout/stderr, and run()s it.
#pragma once

#include <CLI/CLI.hpp>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "app/cli/shell.h"

namespace mimi::app {

class Command {
 public:
  virtual ~Command() = default;
  // After parsing, before anything runs: an option given where its value leaves it nothing to do
  // is refused by name (refuse_inert; CLI::ValidationError, exit 2).
  virtual void check() {}
  // The files it reads by name: stdout and stderr must not be opened onto one of them.
  virtual std::vector<std::string> inputs() const { return {}; }
  virtual int run(const Common& common) = 0;
  // Whether it runs N slots at once (--batch N > 1): out of memory then suggests a smaller --batch.
  virtual bool batched() const { return false; }

  CLI::App* sub = nullptr;  // the parsed subcommand (or its parent, for a command with subcommands)
};

// One row of the table: `add` registers the subcommand into `app` (the options every command
// may share into `common`) and returns the command that runs it.
struct CommandEntry {
  const char* name;
  std::unique_ptr<Command> (*add)(CLI::App& app, Common& common);
};

std::unique_ptr<Command> add_encode(CLI::App& app, Common& common);       // app/cli/encode.cpp
std::unique_ptr<Command> add_decode(CLI::App& app, Common& common);       // app/cli/decode.cpp
std::unique_ptr<Command> add_roundtrip(CLI::App& app, Common& common);    // app/cli/decode.cpp
std::unique_ptr<Command> add_info(CLI::App& app, Common& common);         // app/cli/info.cpp
std::unique_ptr<Command> add_convert(CLI::App& app, Common& common);      // app/cli/convert.cpp
std::unique_ptr<Command> add_gpu_trace(CLI::App& app, Common& common);    // app/cli/gpu_trace.cpp
std::unique_ptr<Command> add_gen_weights(CLI::App& app, Common& common);  // app/cli/gen_weights.cpp
std::unique_ptr<Command> add_bench(CLI::App& app, Common& common);        // app/cli/bench.cpp
std::unique_ptr<Command> add_dataset(CLI::App& app, Common& common);      // app/cli/dataset.cpp

// ---- what the commands' registrations share (app/cli/command.cpp)

// A number in [lo, hi]; unlike CLI::Range it refuses NaN (every comparison with NaN is false).
CLI::Validator finite_in(double lo, double hi);

// The options every command could share; a command registers only those it acts on, so one it
// ignores (`info --device`, `convert --threads`) is an unknown option (exit 2), never a no-op.
enum CommonOption : unsigned {
  kWeightsOpt = 1, kConfigOpt = 2, kDeviceOpt = 4, kThreadsOpt = 8, kJsonOpt = 16, kQuietOpt = 32, kVerboseOpt = 64,
  kForceOpt = 128,
  kAllCommon = 255,
};
void add_common(CLI::App* sub, Common& c, unsigned which = kAllCommon);
// the options of add_common, which every mode honours
#define MIMI_COMMON_OPTIONS "--weights", "--config", "--device", "--threads", "--json", "--quiet", "--verbose", "--force"

// An option given where the configuration chosen gives it nothing to do is refused by name
// (exit 2), never silently ignored: {the option, whether it acts here, what it needs}. Checked
// after parsing, when every value is known (CLI11's needs() sees presence only: `--batch 1
// --readers 3` has --batch and still no reader threads).
struct ActsOnlyIf {
  CLI::Option* option;
  bool acts;
  const char* needs;
};
void refuse_inert(std::initializer_list<ActsOnlyIf> rules);

// --stream runs another engine (app/cli/stream.cpp) than the file modes, and it honours only the
// options named here: every other option of the command given with --stream is refused by name
// (CLI11's excludes, exit 2), so an option added to a command later is refused in the stream mode
// until that mode honours it, never silently ignored there.
// The --stream option's help lists what it honours from the same list, so the two cannot disagree.
void stream_honours(CLI::App* sub, CLI::Option* stream, std::initializer_list<const char*> honoured);

}  // namespace mimi::app
