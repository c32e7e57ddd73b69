// mimi: Kyutai's Mimi neural audio codec on the command line.
// Argument parsing and error reporting; the work is in commands.cpp.
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

#include "app/cli/bench.h"
#include "app/cli/commands.h"
#include "app/cli/gpu_trace.h"
#include "app/dataset/dataset.h"
#include "app/formats/audio_io.h"
#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "app/sys/threads_env.h"
#include "codec/error.h"
#include "codec/open_file.h"

using namespace mimi;
using namespace mimi::app;

namespace {

// A number in [lo, hi]; unlike CLI::Range it refuses NaN (every comparison with NaN is false).
CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v) || !(v >= lo && v <= hi))
          return "Value " + s + " not in range [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]";
        return "";
      },
      "FLOAT in [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]");
}

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

// Ends that bypass main's error path. A library may end the process itself: libgomp calls exit(1)
// when it cannot create its threads (ulimit -v, pids.max), and an exception escaping a worker
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

const char* kExitCodes =
    "Exit codes: 0 ok, 2 usage error, 3 unreadable or malformed input, 4 weights/config missing, bad or\n"
    "mismatched, 5 output not written (exists without --force, or writing failed: disk full, file-size\n"
    "limit, read-only or unwritable place, an I/O error while writing), 6 device not available,\n"
    "70 internal error, 75 the machine failed, not the input (out of memory or file descriptors, an I/O\n"
    "error while reading): run again. 128+N killed by signal N (SIGINT, SIGTERM, SIGHUP, SIGUSR1/2, SIGALRM, SIGXCPU...;\n"
    "nothing half-written is left). With several\n"
    "inputs, a failing input is reported and the rest still run; the exit code is that of the first failure.";

// The options every command could share; a command registers only those it acts on, so one it
// ignores (`info --device`, `convert --threads`) is an unknown option (exit 2), never a no-op.
enum CommonOption : unsigned {
  kWeightsOpt = 1, kConfigOpt = 2, kDeviceOpt = 4, kThreadsOpt = 8, kJsonOpt = 16, kQuietOpt = 32, kVerboseOpt = 64,
  kForceOpt = 128,
  kAllCommon = 255,
};

void add_common(CLI::App* sub, Common& c, unsigned which = kAllCommon) {
  if (which & kWeightsOpt)
    sub->add_option("--weights", c.weights, "Weights: model.safetensors (kyutai/mimi) or moshi's tokenizer checkpoint, "
                                            "or a directory holding one [default: $MIMI_WEIGHTS, then the HF cache]");
  if (which & kConfigOpt)
    sub->add_option("--config", c.config, "Model config JSON (HF MimiConfig or moshi style) [default: config.json "
                                          "beside the weights, else the official Mimi]");
  if (which & kDeviceOpt)
    sub->add_option("--device", c.device, "cpu, cuda[:i] or hip[:i] (ref = the slow naive kernels)")->capture_default_str();
  if (which & kThreadsOpt)
    sub->add_option("--threads", c.threads, "CPU threads (0 = the CPUs this process may use)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1024));
  if (which & kJsonOpt) sub->add_flag("--json", c.json, "One JSON object per processed file on stdout");
  if (which & kQuietOpt) sub->add_flag("-q,--quiet", c.quiet, "Only errors on stderr");
  if (which & kVerboseOpt) sub->add_flag("-v,--verbose", c.verbose, "More detail on stderr (repeat for more)");
  if (which & kForceOpt) sub->add_flag("-f,--force", c.force, "Overwrite existing outputs");
}

// An option given where the configuration chosen gives it nothing to do is refused by name
// (exit 2), never silently ignored: {the option, whether it acts here, what it needs}. Checked
// after parsing, when every value is known (CLI11's needs() sees presence only: `--batch 1
// --readers 3` has --batch and still no reader threads).
struct ActsOnlyIf {
  CLI::Option* option;
  bool acts;
  const char* needs;
};
void refuse_inert(std::initializer_list<ActsOnlyIf> rules) {
  for (const ActsOnlyIf& r : rules)
    if (r.option->count() > 0 && !r.acts)
      throw CLI::ValidationError(r.option->get_name(), std::string("does nothing here: it needs ") + r.needs);
}

void add_decode_outputs(CLI::App* sub, DecodeOptions& d) {
  sub->add_option("--sample-format", d.sample_format, "Output samples: s16, s24 or f32")
      ->check(CLI::IsMember({"s16", "s24", "f32"}))
      ->capture_default_str();
  sub->add_option("--sample-rate", d.sample_rate,
                  "Resample the output to HZ, or 'source' for the rate recorded in the token file [default: 24000]");
  sub->add_flag("--no-trim", d.no_trim, "Keep the padding of the last frame instead of trimming to the original length");
}

// the options of add_common, which every mode honours
#define MIMI_COMMON_OPTIONS "--weights", "--config", "--device", "--threads", "--json", "--quiet", "--verbose", "--force"

// --stream runs another engine (app/cli/stream.cpp) than the file modes, and it honours only the
// options named here: every other option of the command given with --stream is refused by name
// (CLI11's excludes, exit 2), so an option added to a command later is refused in the stream mode
// until that mode honours it, never silently ignored there.
// The --stream option's help lists what it honours from the same list, so the two cannot disagree.
void stream_honours(CLI::App* sub, CLI::Option* stream, std::initializer_list<const char*> honoured) {
  static const char* const kCommon[] = {MIMI_COMMON_OPTIONS};  // listed once, as "the common options"
  std::string listed;
  for (CLI::Option* opt : sub->get_options()) {
    if (opt == stream || opt->check_name("--help")) continue;
    bool ok = false;
    for (const char* name : honoured) ok = ok || opt->check_name(name);
    if (!ok) opt->excludes(stream);
    else if (!opt->get_positional() &&
             std::none_of(std::begin(kCommon), std::end(kCommon), [&](const char* c) { return opt->check_name(c); }))
      listed += (listed.empty() ? "" : ", ") + opt->get_name();
  }
  stream->description(stream->get_description() + "; honours " + listed +
                      " and the common options (--weights ... --force), refuses the rest (exit 2)");
}

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
  std::atexit(on_foreign_exit);
  std::set_terminate(on_terminate);
  mimi::app::configure_openmp_wait(argv);  // first: may re-exec (app/sys/threads_env.cpp)
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
  EncodeOptions enc;
  DecodeOptions dec, rt;
  ConvertOptions conv;
  std::vector<std::string> info_files;
  std::string gw_config = "tiny", gw_dialect = "hf", gw_out;
  uint64_t gw_seed = 1;

  CLI::App* e = app.add_subcommand("encode", "Audio files -> token files");
  e->add_option("inputs", enc.inputs, "Audio files (WAV, FLAC, OGG, ... any rate, any channels); - for stdin")->required();
  e->add_option("-o,--output", enc.out, "Output file, DIR/ for one file per input, or - for stdout [default: beside each input]");
  e->add_option("--n-q", enc.n_q, "Codebooks to keep (1 semantic + N-1 acoustic), 1..32")->capture_default_str()->check(CLI::Range(1, 32));
  e->add_option("--format", enc.format, "Token format: mimi, npy, safetensors, text [default: by the output extension (.mimi .npy .safetensors .txt), mimi without one; another extension needs --format]")
      ->check(CLI::IsMember({"mimi", "npy", "safetensors", "text", "txt"}));
  e->add_flag("--split-channels", enc.split_channels,
              "Encode each channel separately (outputs <stem>.ch<i>.<ext>); by default channels are averaged to mono");
  e->add_option("--batch", enc.batch,
                "Encode N inputs at once, each in its own stream slot of one batched plan (refilled as inputs end); "
                "every file's codes are exactly those it gets alone")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  e->add_option("--readers", enc.readers,
                "With --batch: threads that read, downmix and resample the inputs' next chunks while the slots "
                "compute (0: read between steps)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  CLI::Option* enc_stream = e->add_flag("--stream", enc.stream,
              "Real-time pipe mode: read PCM as it arrives (WAV, or raw with --raw-format) and write each "
              "frame's codes (.mimi chunk or text line) as soon as it is complete (--format mimi or text)");
  CLI::Option* raw_format =
      e->add_option("--raw-format", enc.raw_format, "Headerless input PCM for --stream: s16le, s24le, s32le, f32le")
          ->check(CLI::IsMember({"s16le", "s24le", "s32le", "f32le"}));
  // they describe a raw input only: with a WAV or any file they would be silently ignored
  e->add_option("--raw-rate", enc.raw_rate, "Sample rate of raw input (needs --raw-format)")
      ->capture_default_str()
      ->check(CLI::Range(kMinSampleRate, kMaxSampleRate))
      ->needs(raw_format);
  e->add_option("--raw-channels", enc.raw_channels, "Channels of raw input, averaged (needs --raw-format)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxChannels))
      ->needs(raw_format);
  add_common(e, common);
  stream_honours(e, enc_stream, {"inputs", "--output", "--n-q", "--format", "--raw-format", "--raw-rate", "--raw-channels",
                                 MIMI_COMMON_OPTIONS});
  e->footer("Input is downmixed to mono (channel average) and resampled to 24 kHz with soxr (very high quality);\n"
            "24 kHz input passes through untouched.");

  CLI::App* d = app.add_subcommand("decode", "Token files -> audio files");
  d->add_option("inputs", dec.inputs, "Token files (.mimi, .npy, .safetensors, .txt); - for stdin")->required();
  d->add_option("-o,--output", dec.out, "Output file (.wav, .flac, .ogg), DIR/, or - for stdout [default: beside each input, .wav]");
  d->add_option("--n-q", dec.n_q, "Decode with the first N codebooks [default: all in the file]")->check(CLI::Range(1, 32));
  d->add_flag("--recover", dec.recover, "Decode the good prefix of a damaged or truncated .mimi or text token file");
  d->add_flag("--allow-weights-mismatch", dec.allow_weights_mismatch, "Decode tokens made with other weights (warns)");
  d->add_option("--batch", dec.batch,
                "Decode N token files at once, each in its own stream slot of a batched plan (--n-q for all, "
                "else each file with all its codebooks: one pass per count); every file's audio is exactly what it "
                "gets alone")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  CLI::Option* dec_stream =
      d->add_flag("--stream", dec.stream,
                  "Real-time pipe mode: decode a .mimi or text token stream frame by frame as it arrives "
                  "(WAV with an open-ended header on pipes, or raw with --raw-format; whole frames, never "
                  "trimmed: as --no-trim)");
  CLI::Option* dec_raw = d->add_option("--raw-format", dec.raw_format,
                                       "Headerless output PCM for --stream: s16le or f32le (instead of --sample-format)")
                             ->check(CLI::IsMember({"s16le", "f32le"}));
  add_decode_outputs(d, dec);
  dec_raw->excludes(d->get_option("--sample-format"));  // the raw format names the samples: one of the two
  add_common(d, common);
  stream_honours(d, dec_stream, {"inputs", "--output", "--n-q", "--recover", "--allow-weights-mismatch", "--raw-format",
                                 "--sample-format", "--sample-rate", "--no-trim", MIMI_COMMON_OPTIONS});

  CLI::App* r = app.add_subcommand("roundtrip", "Audio -> tokens -> audio (hear what the codec keeps)");
  r->add_option("inputs", rt.inputs, "Audio files; - for stdin")->required();
  r->add_option("-o,--output", rt.out, "Output file, DIR/, or - [default: beside each input, <stem>.roundtrip.wav]");
  r->add_option("--n-q", rt.n_q, "Codebooks, 1..32 [default: 8]")->check(CLI::Range(1, 32));
  add_decode_outputs(r, rt);
  add_common(r, common);

  CLI::App* i = app.add_subcommand("info", "Describe token, weights or audio files as JSON; with no file, this build "
                                          "and its devices (an emulated GPU says so)");
  i->add_option("files", info_files,
                "Token, weights or audio files: one JSON object (pretty), several: one JSON array of them; with "
                "--json one object per line (JSON Lines)");
  add_common(i, common, kConfigOpt | kJsonOpt | kQuietOpt | kVerboseOpt);  // --config: for a weights file's description

  CLI::App* c = app.add_subcommand("convert", "Convert a token file to another token format (lossless)");
  c->add_option("input", conv.input, "Token file")->required();
  c->add_option("-o,--output", conv.out, "Output token file (format from its extension) or -")->required();
  c->add_option("--format", conv.format, "mimi, npy, safetensors, text [default: by output extension]")
      ->check(CLI::IsMember({"mimi", "npy", "safetensors", "text", "txt"}));
  c->add_flag("--recover", conv.recover, "Convert the good prefix of a damaged .mimi or text token file");
  add_common(c, common, kJsonOpt | kQuietOpt | kVerboseOpt | kForceOpt);  // no model: nothing to load or run

  GpuTraceOptions trace;
  CLI::App* gt = app.add_subcommand("gpu-trace", "The ops the GPU plans launch, with shapes, as JSON Lines for "
                                                 "scripts/gpu_model.py (the H200 cost model); no GPU needed");
  gt->add_option("-o,--output", trace.out, "Trace file (JSON Lines)")->required();
  gt->add_option("--config", trace.config, "Test config of the PRNG weights: tiny, tiny-window or full")
      ->capture_default_str()
      ->check(CLI::IsMember({"tiny", "tiny-window", "full"}));
  gt->add_option("--seconds", trace.seconds, "Offline lengths (batch 1)")->delimiter(',')->check(finite_in(1e-3, 3600.0));
  gt->add_option("--batches", trace.batches, "Offline batches of 128 frames")->delimiter(',')->check(CLI::Range(1, 4096));
  gt->add_option("--slots", trace.slots, "Streaming slots")->delimiter(',')->check(CLI::Range(1, 4096));
  gt->group("Developer");

  CLI::App* g = app.add_subcommand("gen-weights", "Write the deterministic PRNG test weights (WEIGHTS_SPEC.md)");
  g->add_option("--config", gw_config, "tiny, tiny-window or full")->capture_default_str();
  g->add_option("--dialect", gw_dialect, "moshi or hf")->capture_default_str();
  g->add_option("--seed", gw_seed, "PRNG seed")->capture_default_str()->check(CLI::NonNegativeNumber);
  g->add_option("-o,--output", gw_out, "Output .safetensors")->required();
  g->add_flag("-f,--force", common.force, "Overwrite");
  g->add_flag("-q,--quiet", common.quiet, "Only errors on stderr");
  g->group("Developer");

  BenchOptions bench;
  CLI::App* b = app.add_subcommand("bench", "Time encode and decode (table of wall time, real-time factor, GFLOP/s, stages)");
  // every value checked here, so a typo is a usage error (exit 2), never a crash or an allocation
  // of 1e9 seconds of signal reported as the machine's failure
  b->add_option("--seconds", bench.seconds, "Input lengths in seconds, each in (0, 3600]")
      ->capture_default_str()
      ->delimiter(',')
      ->check(finite_in(1e-3, 3600.0));
  b->add_option("--runs", bench.runs, "Timed runs per direction and length (after one warm-up)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  b->add_option("--n-q", bench.n_q, "Codebooks")->capture_default_str()->check(CLI::Range(1, 32));
  b->add_option("--weights", bench.weights, "Weights [default: the full-size PRNG test weights]");
  b->add_option("--config", bench.config, "Config for --weights");
  b->add_option("--input", bench.input, "Audio file, repeated to each length [default: a synthetic speech-like signal]");
  b->add_option("--threads", bench.threads, "CPU threads (0 = all)")->capture_default_str()->check(CLI::Range(0, 1024));
  b->add_option("--device", bench.device, "cpu, ref, cuda[:i] or hip[:i]")->capture_default_str();
  b->add_option("--batch", bench.batch, "Inputs per timed run, at once in the slots of one batched plan (times are per input); also the slots of the latency steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  b->add_option("--chunk", bench.chunk_frames, "Frames per chunk (0 = whole signal in one plan)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(45000)));
  b->add_option("--latency-frames", bench.latency_frames, "Frames streamed one by one for the latency line (0 = skip)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(45000)));
  b->add_flag("-v,--verbose", bench.gpu_stages,
              "On a GPU: also the stage table, from device events around each stage of one more run op by op "
              "(on the CPU the stage table is always printed)");
  b->add_flag("--json", bench.json, "One JSON object on stdout");
  b->add_flag("!--no-graphs", bench.graphs, "On a GPU: run every step op by op (no graph capture and replay)");

  // The dataset mode: plan a corpus into shards, encode one shard per worker, status, verify.
  namespace ds = mimi::app::dataset;
  ds::PlanOptions ds_plan;
  ds::EncodeShardOptions ds_enc;
  ds::StatusOptions ds_status;
  ds::VerifyOptions ds_verify;
  CLI::App* dset = app.add_subcommand("dataset", "Tokenize a corpus as shards under Slurm, GNU parallel, ... "
                                                 "(plan once, then one `encode --shard I/N` per worker; docs/DATASETS.md)");
  dset->require_subcommand(1);
  CLI::App* dp = dset->add_subcommand("plan", "Manifests -> PLAN/: items cut into shards balanced by duration");
  dp->add_option("manifests", ds_plan.manifests,
                 "JSON Lines (path|audio_filepath, id, duration, start, end, channel), Kaldi wav.scp (+ segments), "
                 "a list of paths, or a directory")
      ->required();
  dp->add_option("-o,--output", ds_plan.out, "Plan directory")->required();
  dp->add_option("--shards", ds_plan.shards, "Number of shards")->check(CLI::Range(1, 99999));
  dp->add_option("--shard-hours", ds_plan.shard_hours, "Hours of audio per shard (sets the number of shards)")
      ->check(finite_in(1e-6, 1e9));
  // ranges on every number: CLI11 reads '' (an unset shell variable) as 0, which both take as valid
  dp->add_option("--probe-threads", ds_plan.probe_threads, "Files whose headers are read at once [default: 4 per CPU]")
      ->check(CLI::Range(0, 65536));
  dp->add_flag("--skip-bad", ds_plan.skip_bad,
               "Leave bad manifest entries out of the plan (each still printed; listed in PLAN/skipped.txt) "
               "instead of refusing it");
  dp->add_flag("-f,--force", ds_plan.force, "Replace an existing plan (shards already encoded from it become invalid)");
  dp->add_flag("-q,--quiet", common.quiet, "Only errors on stderr");
  dp->add_flag("-v,--verbose", common.verbose, "More detail on stderr");

  CLI::App* de = dset->add_subcommand("encode", "Encode one shard of a plan into OUT/shards/ (resumable; done shards are skipped)");
  de->add_option("--plan", ds_enc.plan, "Plan directory")->required();
  de->add_option("--shard", ds_enc.shard, "I/N, or auto: from SLURM_ARRAY_TASK_ID, SLURM_PROCID, RANK or "
                                          "JOB_COMPLETION_INDEX")
      ->required();
  de->add_option("-o,--output", ds_enc.out, "Output directory")->required();
  de->add_option("--n-q", ds_enc.n_q, "Codebooks to keep")->capture_default_str()->check(CLI::Range(1, 32));
  de->add_option("--max-errors", ds_enc.max_errors, "Fail the shard beyond this many bad items: a count or a "
                                                    "percentage of its items (10, 2%) [default: no limit]");
  de->add_flag("--retry-errors", ds_enc.retry_errors, "Redo the items that failed (the others are kept as they are)");
  de->add_option("--sync-items", ds_enc.sync_items, "Make the journal durable every N items ...")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  de->add_option("--sync-seconds", ds_enc.sync_seconds, "... or every S seconds")
      ->capture_default_str()
      ->check(finite_in(0, 1e9));
  de->add_option("--batch", ds_enc.batch,
                 "Encode N items at once in the slots of one batched plan (for GPUs); the shard's bytes are the "
                 "same as one at a time")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  de->add_option("--readers", ds_enc.readers,
                 "With --batch: threads that read, downmix and resample the items' next chunks while the slots "
                 "compute (0: read between steps)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  de->add_option("--weights", common.weights, "Weights, as for encode [default: $MIMI_WEIGHTS, then the HF cache]");
  de->add_option("--config", common.config, "Model config JSON, as for encode");
  de->add_option("--device", common.device, "cpu, cuda[:i] or hip[:i]")->capture_default_str();
  de->add_option("--threads", common.threads, "CPU threads (0 = the CPUs this process may use)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  de->add_flag("-q,--quiet", common.quiet, "Only errors on stderr (no progress)");
  de->add_flag("-v,--verbose", common.verbose, "More detail on stderr");

  CLI::App* dst = dset->add_subcommand("status", "Done / partial / failed / todo per shard, hours and ETA (stdout)");
  dst->add_option("out", ds_status.out, "Output directory")->required();
  dst->add_option("--plan", ds_status.plan, "Plan directory [default: the one OUT/dataset.json names]");
  dst->add_flag("--todo", ds_status.todo, "Only the shards that are not done");
  dst->add_option("--format", ds_status.format, "table, json, or ranges (unfinished shards as 3,17-19 for sbatch --array)")
      ->check(CLI::IsMember({"table", "json", "ranges"}))
      ->capture_default_str();
  dst->add_flag("-q,--quiet", common.quiet, "Only errors on stderr");

  CLI::App* dv = dset->add_subcommand("verify", "Re-read every shard: index, sha256, frame counts against the plan, "
                                                "code range; exit 0 only when all is well");
  dv->add_option("out", ds_verify.out, "Output directory")->required();
  dv->add_option("--plan", ds_verify.plan, "Plan directory [default: the one OUT/dataset.json names]");
  dv->add_flag("-q,--quiet", common.quiet, "Only errors on stderr");

  install_signal_handlers();  // first: SIGPIPE ignored, so --help into a closed pipe is a write error
  decimal_integers_only(app);
  try {
    app.parse(argc, argv);
    refuse_empty_values(app);
    const bool bench_on_gpu = bench.device.rfind("cuda", 0) == 0 || bench.device.rfind("hip", 0) == 0;
    refuse_inert({{e->get_option("--readers"), enc.batch > 1, "--batch N with N > 1 (its threads read ahead for the slots)"},
                  {de->get_option("--readers"), ds_enc.batch > 1, "--batch N with N > 1 (its threads read ahead for the slots)"},
                  {i->get_option("--config"), !info_files.empty(), "a weights file to describe"},
                  {b->get_option("--no-graphs"), bench_on_gpu, "a GPU --device (the CPU runs no graphs)"},
                  {b->get_option("--verbose"), bench_on_gpu, "a GPU --device (the CPU prints its stage table always)"}});
  } catch (const CLI::ParseError& err) {
    const int rc = app.exit(err);  // --help, --version, or the usage error
    if (rc != 0) hint_dash_names(argc, argv);
    return check_stdout(rc == 0 ? kOk : kUsage);
  }
  if (common.quiet) spdlog::set_level(spdlog::level::err);
  else if (common.verbose >= 1) spdlog::set_level(spdlog::level::debug);

  App runner(common);
  auto run = [&]() -> int {
    {  // the files this command reads by name, which stdout and stderr must not be
      std::vector<std::string> inputs = *e ? enc.inputs : *d ? dec.inputs : *r ? rt.inputs : *i ? info_files
                                        : *dp ? ds_plan.manifests : std::vector<std::string>{};
      if (*c) inputs.push_back(conv.input);
      for (const std::string& w : {common.weights, common.config, bench.weights, bench.config, bench.input})
        inputs.push_back(w);
      refuse_std_streams_onto(inputs);
    }
    if (*e) return runner.encode(enc);
    if (*d) return runner.decode(dec);
    if (*r) return runner.roundtrip(rt);
    if (*i) return runner.info(info_files);
    if (*c) return runner.convert(conv);
    if (*b) return run_bench(bench);
    if (*g) return runner.gen_weights(gw_config, gw_dialect, gw_seed, gw_out);
    if (*gt) return run_gpu_trace(trace);
    if (*dp) return ds::make_plan(ds_plan), kOk;
    if (*de) {
      ds_enc.engine = {common.weights, common.config, common.device, common.threads, Parts{}};
      ds_enc.quiet = common.quiet;
      return ds::encode_shard(ds_enc);
    }
    if (*dst) return ds::status(ds_status);
    if (*dv) return ds::verify(ds_verify);
    return kUsage;
  };
  int code = kInternal;
  try {
    code = run();
  } catch (const Error& err) {
    spdlog::error("{}", err.what());
    code = exit_code_for(err.kind());
  } catch (const std::bad_alloc&) {  // the machine's limit, not a bug and not the input
    spdlog::error("out of memory (a failure of the machine, not of the input; run again with more memory{})",
                  (enc.batch > 1 || dec.batch > 1 || ds_enc.batch > 1) ? " or a smaller --batch" : "");
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
