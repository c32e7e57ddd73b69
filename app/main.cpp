// mimi: Kyutai's Mimi neural audio codec on the command line.
// The command table (each command's options and run in app/cli/<command>.cpp), parsing, and the
// one place where errors become messages and exit codes.
#include <fcntl.h>
#include <sys/stat.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>

#include "app/cli/command.h"
#include "app/formats/audio_io.h"
#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "app/sys/threads_env.h"
#include "codec/error.h"
#include "codec/open_file.h"

using namespace mimi;
using namespace mimi::app;

namespace {

// The one place for empty option values: `--weights "$W"` with W unset must not quietly mean
// "the default" ($MIMI_WEIGHTS, the HF cache, beside the input, 24 kHz...). Every option or
// positional given, of every command, with an empty value is a usage error naming it.
void refuse_empty_values(const CLI::App& app) {
  for (const CLI::Option* o : app.get_options()) {
    if (o->count() == 0) continue;
    for (const std::string& v : o->results())
      if (v.empty())
        throw CLI::ValidationError(o->get_name(), o->nonpositional()
                                                      ? "an empty value (an unset shell variable?): give one, or leave "
                                                        "the option out for its default"
                                                      : "an empty file name (an unset shell variable?)");
  }
  for (const CLI::App* sub : app.get_subcommands()) refuse_empty_values(*sub);
}

// Whole-number options read decimal digits only. CLI11 converts with strtoll(.., 0), so '010'
// would be octal 8 (--n-q 010: 8 codebooks; --raw-rate 030000: 12288 Hz, audio silently misread),
// '0x8' hex, and a value past 64 bits saturates (--seed 99999999999999999999 = 2^64 - 1). One
// transform on every INT/UINT option, run before its range check (CLI11's transform() goes
// first): leading zeros dropped ('08' is 8), anything but an optional sign and digits refused,
// and a value past the 64-bit range refused (CLI11 itself refuses what overflows a narrower type).
std::string decimal_integer(std::string& v, bool is_signed) {
  if (v.empty()) return "";  // refuse_empty_values says what an empty value means
  const bool neg = v[0] == '-';
  const size_t i = (v[0] == '+' || neg) ? 1 : 0;
  if (i == v.size() || v.find_first_not_of("0123456789", i) != std::string::npos)
    return "'" + v + "' is not a whole number in decimal digits";
  const size_t nz = v.find_first_not_of('0', i);
  const std::string digits = nz == std::string::npos ? "0" : v.substr(nz);
  const std::string limit = is_signed ? (neg ? "9223372036854775808" : "9223372036854775807") : "18446744073709551615";
  if (digits.size() > limit.size() || (digits.size() == limit.size() && digits > limit))
    return "'" + v + "' is out of range";
  v = (neg && digits != "0" ? "-" : "") + digits;
  return "";
}

void decimal_integers_only(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    const std::string t = o->get_type_name();
    const bool is_int = t.rfind("INT", 0) == 0, is_uint = t.rfind("UINT", 0) == 0;
    if (!is_int && !is_uint) continue;
    o->transform(CLI::Validator([is_int](std::string& v) { return decimal_integer(v, is_int); }, ""));
  }
  for (CLI::App* sub : app.get_subcommands({})) decimal_integers_only(*sub);
}

// After a usage error: an argument that begins with '-' and names an existing file was read as
// an option ('mimi encode -take1.wav' said "inputs is required"); say how to name such a file.
void hint_dash_names(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    struct stat st{};
    if (a.size() < 2 || a[0] != '-' || ::stat(a.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) continue;
    const std::string name = printable(a);
    std::fprintf(stderr, "mimi: note: '%s' is a file, but a name that begins with '-' reads as an option: write ./%s, "
                 "or put the files after '--'\n", name.c_str(), name.c_str());
  }
}

// Every message is one line however odd the file names in it: control characters (a newline in a
// name) and bytes that are not UTF-8 are written as \xNN (app/sys/json_bytes.h). The one place where
// messages reach the terminal.
class PrintableMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string s = printable(std::string(msg.payload.data(), msg.payload.size()));
    dest.append(s.data(), s.data() + s.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<PrintableMessage>(); }
};

// Descriptors 0-2 closed by the caller (a daemon, `mimi ... >&- 2>&-`) would be handed to the
// first files mimi opens - a lock, a tar - and a warning meant for stderr would land inside them.
// They are taken before anything else by O_PATH descriptors of /dev/null, on which every read and
// write still fails (EBADF) as on the closed descriptor: `-o -` to a closed stdout is still exit 5.
void reserve_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int n = ::open("/dev/null", O_PATH | O_CLOEXEC);
    if (n >= 0 && n != fd) {  // cannot happen while fd is the lowest free one; be safe anyway
      ::dup2(n, fd);
      ::close(n);
    }
  }
}

// What the command wrote to stdout (JSON records, tables, `info`) must have arrived: a full disk
// or a closed pipe behind stdout is a failed output, exit 5, for every command and format.
int check_stdout(int code) {
  std::cout.flush();
  const bool bad = !std::cout || std::fflush(stdout) != 0 || std::ferror(stdout);
  if (!bad || code != kOk) return code;  // a failed command has said what failed (--json records)
  spdlog::error("stdout: write failed (disk full or pipe closed): the output is incomplete");
  return code == kOk ? kOutputError : code;
}

// Ends that bypass main's error path. A library may end the process itself (libgomp, loaded
// through libsoxr, calls exit(1) when it cannot create its threads: ulimit -v, pids.max), and an exception escaping a worker
// thread (std::bad_alloc in a reader) calls std::terminate. Both are reported in the tool's words
// with its exit codes (75 for the machine), after removing the temporaries being written.
std::atomic<bool> g_main_returned{false};
void say(const char* msg) { (void)!::write(2, msg, std::strlen(msg)); }
void on_foreign_exit() {
  if (g_main_returned.load()) return;
  remove_pending_temporaries();
  say("mimi: error: a library ended the process (libgomp does when it cannot create threads: memory or "
      "thread limits); a failure of the machine, not of the input; run again\n");
  _exit(kEnvironment);
}
void on_terminate() {
  remove_pending_temporaries();
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      say("mimi: error: out of memory (a failure of the machine, not of the input; run again with more memory)\n");
      _exit(kEnvironment);
    } catch (const Error& err) {
      say("mimi: error: ");
      say(printable(err.what()).c_str());
      say("\n");
      _exit(exit_code_for(err.kind()));
    } catch (const std::exception& err) {
      say("mimi: error: internal error: ");
      say(printable(err.what()).c_str());
      say("\n");
    } catch (...) {
    }
  }
  say("mimi: error: internal error (std::terminate)\n");
  _exit(kInternal);
}

// Registered from the executable's preinit array, which the dynamic loader runs before any
// library's initializer: libgomp's own initializer calls exit(1) when it cannot allocate (under
// `ulimit -v`, in a window of a few hundred KB just above what the loader needs to map the
// libraries), before main, where an atexit in main came too late.
void register_foreign_exit() { std::atexit(on_foreign_exit); }
__attribute__((section(".preinit_array"), used)) void (*const g_register_foreign_exit)() = register_foreign_exit;

const char* kExitCodes =
    "Exit codes: 0 ok, 2 usage error, 3 unreadable or malformed input, 4 weights/config missing, bad or\n"
    "mismatched, 5 output not written (exists without --force, or writing failed: disk full, file-size\n"
    "limit, read-only or unwritable place, an I/O error while writing), 6 device not available,\n"
    "70 internal error, 75 the machine failed, not the input (out of memory or file descriptors, an I/O\n"
    "error while reading): run again. 128+N killed by signal N (SIGINT, SIGTERM, SIGHUP, SIGUSR1/2, SIGALRM, SIGXCPU...;\n"
    "nothing half-written is left). With several\n"
    "inputs, a failing input is reported and the rest still run; the exit code is that of the first failure,\n"
    "except that a failure of the machine stops the run at once with 75 (the inputs after it were not done).";

// The commands, in the order --help lists them: each registers its options (app/cli/<command>.cpp).
const CommandEntry kCommands[] = {
    {.name = "encode", .add = add_encode},           {.name = "decode", .add = add_decode},
    {.name = "roundtrip", .add = add_roundtrip},     {.name = "info", .add = add_info},
    {.name = "convert", .add = add_convert},         {.name = "gpu-trace", .add = add_gpu_trace},
    {.name = "gen-weights", .add = add_gen_weights}, {.name = "bench", .add = add_bench},
    {.name = "dataset", .add = add_dataset},
};

}  // namespace

int run_main(int argc, char** argv);

int main(int argc, char** argv) {
  // first: under a small stack limit the whole program runs on a thread with a stack of its own
  const int rc = mimi::app::main_stack_short() ? mimi::app::run_on_own_stack(run_main, argc, argv) : run_main(argc, argv);
  g_main_returned = true;  // from here on exit() is ours
  return rc;
}

int run_main(int argc, char** argv) {
  reserve_standard_fds();
  std::set_terminate(on_terminate);  // (on_foreign_exit: registered before the libraries started)
  auto logger = spdlog::stderr_color_mt("mimi");
  spdlog::set_default_logger(logger);
  {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<PrintableMessage>('*').set_pattern("mimi: %^%l%$: %*");
    spdlog::set_formatter(std::move(f));
  }
  // every file read by name (weights and configs in codec/ too) announces a FIFO with no writer
  mimi::set_wait_notice([](const std::string& path) {
    spdlog::warn("{}: a FIFO (or pipe) with no data after 2 s: waiting for its writer; nothing after it runs until "
                 "then (Ctrl-C stops)",
                 path);
  });

  CLI::App app{"mimi " MIMI_VERSION ": Kyutai's Mimi neural audio codec (24 kHz mono audio <-> 12.5 Hz tokens).\n"
               "Data goes to stdout or files, status to stderr.",
               "mimi"};
  app.set_version_flag("--version", MIMI_VERSION);
  app.footer(kExitCodes);
  app.require_subcommand(1);
  Common common;
  std::vector<std::unique_ptr<Command>> commands;
  for (const CommandEntry& c : kCommands) {
    commands.push_back(c.add(app, common));
    if (commands.back()->sub->get_name() != c.name) throw std::logic_error("command table: misnamed row");
  }
  Command* cmd = nullptr;  // the one parsed

  install_signal_handlers();  // first: SIGPIPE ignored, so --help into a closed pipe is a write error
  decimal_integers_only(app);
  try {
    app.parse(argc, argv);
    refuse_empty_values(app);
    for (const std::unique_ptr<Command>& c : commands)
      if (c->sub->parsed()) cmd = c.get();
    cmd->check();
  } catch (const CLI::ParseError& err) {
    const int rc = app.exit(err);  // --help, --version, or the usage error
    if (rc != 0) hint_dash_names(argc, argv);
    return check_stdout(rc == 0 ? kOk : kUsage);
  }
  if (common.quiet) spdlog::set_level(spdlog::level::err);
  else if (common.verbose >= 1) spdlog::set_level(spdlog::level::debug);

  auto run = [&]() -> int {
    // the files this command reads by name, which stdout and stderr must not be
    std::vector<std::string> inputs = cmd->inputs();
    inputs.push_back(common.weights);
    inputs.push_back(common.config);
    refuse_std_streams_onto(inputs);
    return cmd->run(common);
  };
  int code = kInternal;
  try {
    code = run();
  } catch (const Error& err) {
    spdlog::error("{}", err.what());
    code = exit_code_for(err.kind());
  } catch (const std::bad_alloc&) {  // the machine's limit, not a bug and not the input
    spdlog::error("out of memory (a failure of the machine, not of the input; run again with more memory{})",
                  cmd->batched() ? " or a smaller --batch" : "");
    code = kEnvironment;
  } catch (const std::system_error& err) {  // std::thread, std::filesystem: errno-carrying
    const ErrorKind k = errno_kind(err.code().value(), ErrorKind::Internal);
    spdlog::error("{}{}{}", k == ErrorKind::Internal ? "internal error: " : "", err.what(),
                  k == ErrorKind::Environment ? " (cannot start a thread or take a resource: a failure of the machine, "
                                                "not of the input; run again)" : "");
    code = exit_code_for(k);
  } catch (const std::exception& err) {
    spdlog::error("internal error: {}", err.what());
    code = kInternal;
  }
  return check_stdout(code);
}
