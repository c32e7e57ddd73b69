// What the commands of the mimi executable share (app/cli/<command>.cpp, each registered in
// main.cpp's table): exit codes, the common options, the App that loads the engine once and runs
// a command over its inputs one by one (a failing input reported, the rest still run).
#pragma once

#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/engine_io/decode_output.h"
#include "app/engine_io/pipeline.h"
#include "app/formats/audio_io.h"
#include "app/formats/token_file.h"
#include "codec/engine.h"
#include "codec/error.h"

namespace mimi::app {

// Exit codes (also in --help and README).
enum ExitCode : int {
  kOk = 0,
  kUsage = 2,        // bad command line or arguments
  kInputError = 3,   // an input could not be read or is malformed
  kWeightsError = 4, // weights/config missing, malformed or mismatched
  kOutputError = 5,  // an output could not be written (or exists without --force)
  kDeviceError = 6,  // the requested device is not available
  kInternal = 70,    // a bug
  // The machine failed, not the data (out of memory or file descriptors, an I/O error of a disk or
  // network file system): nothing was recorded against an input; run again (sysexits' EX_TEMPFAIL).
  kEnvironment = 75,
};
int exit_code_for(ErrorKind k);

struct Common {
  std::string weights, config, device = "cpu";
  int threads = 0;
  bool json = false, quiet = false, force = false;
  bool no_cache = false;  // --no-cache: no prepared-weights cache (app/engine_io/pipeline.h)
  int verbose = 0;
};

// What a decoding command asks (decode, roundtrip, decode --batch, decode --stream).
struct DecodeOptions {
  std::vector<std::string> inputs;
  std::string out;
  int n_q = -1;  // -1: all codebooks in the file (roundtrip: 8)
  std::string sample_format = "s16";
  std::string sample_rate;  // empty = 24000; a number; or "source"
  bool no_trim = false, recover = false, allow_weights_mismatch = false;
  bool stream = false;
  std::string raw_format;  // stream output: "" = WAV, s16le or f32le
  int batch = 1;           // token files decoded at once through one batched plan (codec/batch.h)
};

// The writing half of a decoding command's options, as engine_io takes it.
inline AudioOutSpec audio_out(const DecodeOptions& o, SampleFormat sf) {
  return AudioOutSpec{.format = sf, .sample_rate = o.sample_rate, .no_trim = o.no_trim};
}

struct EncodeOptions {
  std::vector<std::string> inputs;
  std::string out;
  int n_q = 8;
  std::string format;  // empty: from the output extension, else mimi
  bool split_channels = false;
  int batch = 1;  // inputs encoded at once through one batched plan (codec/batch.h)
  int readers = 2;  // with batch > 1: threads reading the inputs ahead of the slots (app/engine_io/read_ahead.h)
  bool stream = false;
  std::string raw_format;
  int raw_rate = 24000, raw_channels = 1;
};

// Where an encode run's token files go, and in which format: decided once per run from -o and
// --format (the output's extension, else mimi).
struct EncodeTarget {
  std::string out;  // -o as given ("" beside each input, "-", a file, a DIR/)
  TokenFormat format = TokenFormat::Mimi;
  // The token file of input `in` (channel ch of it; -1: the downmix). Error(Usage) for a
  // channel to stdout.
  std::string path(const std::string& in, int ch) const;
};
EncodeTarget encode_target(const EncodeOptions& o);

struct ConvertOptions {
  std::string input, out, format;
  bool recover = false;
};

// --sample-format s16|s24|f32 (Error(Usage) otherwise).
SampleFormat parse_sample_format(const std::string& s);
// The token format of an output: --format when given, else its extension, else mimi.
TokenFormat token_format_for(const std::string& flag, const std::string& out_path);
// Whether bytes / an extension are those of an audio file (an audio file given where tokens go).
bool looks_like_audio(const uint8_t* p, size_t n);
bool looks_like_audio_name(std::string ext);
// `--format F -o NAME.ext` where .ext names another token format (or audio) is refused
// (Error(Usage)) rather than writing content that contradicts its extension.
void check_format_matches_output(const std::string& flag, const std::string& out,
                                 const std::vector<std::string>& inputs = {});

class App {
 public:
  // Each command's body is in its own file with its options: app/cli/encode.cpp, decode.cpp
  // (decode, roundtrip), info.cpp, convert.cpp, gen_weights.cpp; --batch in batch_commands.cpp.
  explicit App(Common c) : common_(std::move(c)) {}
  int encode(const EncodeOptions& o);
  int decode(const DecodeOptions& o);
  int roundtrip(const DecodeOptions& o);
  int info(const std::vector<std::string>& files);
  int convert(const ConvertOptions& o);
  int gen_weights(const std::string& config, const std::string& dialect, uint64_t seed, const std::string& out);

 private:
  Engine& engine();
  void emit(const nlohmann::json& record);  // throws Error(Output) when stdout fails
  void emit_error(const std::string& input, const std::string& message);  // never throws
  // Checks -o against the inputs, creates an output directory, protects the inputs from -o.
  void refuse_json_on_stdout(const std::string& out) const;
  void check_targets(const std::vector<std::string>& inputs, const std::string& out);
  // Reports one input's failure (stderr, --json) and keeps the first exit code; rethrows what
  // fails every input alike (device, usage, weights before the engine loaded).
  void input_failed(const std::string& in, std::exception_ptr error, int& code);
  int run_each(const std::vector<std::string>& inputs, const std::string& out,
               const std::function<void(const std::string&)>& one);
  int encode_batched(const EncodeOptions& o, const EncodeTarget& target);  // app/cli/batch_commands.cpp
  int decode_batched(const DecodeOptions& o, SampleFormat sf);  // app/cli/batch_commands.cpp
  // The log line and --json record of one decoded file (d.compute 0: decoded in a batch).
  void report_decoded(const std::string& in, const std::string& path, const TokenFile& t, int n_q,
                      const DecodeResult& d, double wall);
  // The token file of one encoded input (channel ch, -1 = the downmix), its log line and record.
  void write_encoded(const EncodeTarget& target, const std::string& in, int ch, const EncodedAudio& a, double wall);

  // --json records of a batch in input order (as one by one), whatever order the inputs finish
  // in: each position (an input, or one channel of one) has one record, held until every earlier
  // position has printed its own. Active between begin_ordered_records() and end_ordered_records().
  struct RecordOrder {
    std::map<size_t, std::vector<std::string>> held;  // lines, by position
    size_t next = 0;  // the first position whose record has not been printed
    size_t at = 0;    // the position the records emitted now belong to
  };
  void begin_ordered_records();
  void record_position(size_t position) {
    if (order_) order_->at = position;
  }
  // Prints what is held, in order, skipping positions that never recorded (a run stopped by the
  // machine's failure); `quietly`: a failing stdout is not thrown (the run is failing already).
  void end_ordered_records(bool quietly);
  void print_line(const std::string& line);  // throws Error(Output) when stdout fails
  // Records in input order for the life of a batch; whatever is held is printed on the way out.
  class OrderedRecords {
   public:
    explicit OrderedRecords(App& a) : a_(a) { a_.begin_ordered_records(); }
    ~OrderedRecords() {
      if (!finished_) a_.end_ordered_records(true);
    }
    OrderedRecords(const OrderedRecords&) = delete;
    OrderedRecords& operator=(const OrderedRecords&) = delete;
    void finish() {
      finished_ = true;
      a_.end_ordered_records(false);
    }

   private:
    App& a_;
    bool finished_ = false;
  };

  Common common_;
  std::unique_ptr<RecordOrder> order_;
  Parts parts_;  // what the command runs (encode: the encoder only), set before engine()
  std::unique_ptr<Engine> engine_;
  double load_seconds_ = 0;
};

}  // namespace mimi::app
