#include "app/cli/shell.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/stream.h"
#include "app/engine_io/decode_output.h"
#include "app/engine_io/pipeline.h"
#include "app/engine_io/weights_locate.h"
#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "app/sys/progress.h"
#include "codec/error.h"
#include "codec/prng_weights.h"
#include "codec/weights.h"
#include "kernels/cpu/cpu_budget.h"
#include "kernels/cpu/isa.h"

namespace mimi::app {
namespace fs = std::filesystem;

SampleFormat parse_sample_format(const std::string& s) {
  if (s == "s16") return SampleFormat::S16;
  if (s == "s24") return SampleFormat::S24;
  if (s == "f32") return SampleFormat::F32;
  throw Error(ErrorKind::Usage, "--sample-format must be s16, s24 or f32, got '" + s + "'");
}

TokenFormat token_format_for(const std::string& flag, const std::string& out_path) {
  if (!flag.empty()) {
    auto f = parse_format(flag);
    if (!f) throw Error(ErrorKind::Usage, "--format must be mimi, npy, safetensors or text, got '" + flag + "'");
    return *f;
  }
  if (out_path != "-" && !is_directory_target(out_path))
    if (auto f = format_from_extension(out_path)) return *f;
  return TokenFormat::Mimi;
}

// The magic numbers of the audio containers libsndfile reads (for `info`, which sniffs).
bool looks_like_audio(const uint8_t* p, size_t n) {
  static const char* magics[] = {"RIFF", "RF64", "RIFX", "FORM", "fLaC", "OggS", ".snd", "caff", "wvpk", "MThd", "ID3"};
  for (const char* m : magics)
    if (n >= std::strlen(m) && std::memcmp(p, m, std::strlen(m)) == 0) return true;
  return false;
}

bool looks_like_audio_name(std::string ext) {
  std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
  for (const char* a : {".wav", ".wave", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".m4a", ".aac", ".aif", ".aiff", ".rf64", ".w64", ".caf"})
    if (ext == a) return true;
  return false;
}

// `--format F -o NAME.ext` where .ext names another token format: refused rather than writing
// content that contradicts its extension.
void check_format_matches_output(const std::string& flag, const std::string& out,
                                 const std::vector<std::string>& inputs) {
  if (out.empty() || out == "-" || is_directory_target(out)) return;
  for (const std::string& in : inputs) {  // -o the input itself: the output's own error says so (exit 5)
    std::error_code ec;
    if (in != "-" && fs::equivalent(in, out, ec)) return;
  }
  // a token file under another kind of name (x.wav, x.mp3) would mislead whatever reads it; an
  // unknown extension needs --format; no extension is the default format; a device takes anything
  const std::string ext = fs::path(out).extension().string();
  std::error_code ec;
  const bool device = fs::exists(out, ec) && !fs::is_regular_file(out, ec);
  if (!ext.empty() && !format_from_extension(out) && !device && (flag.empty() || looks_like_audio_name(ext)))
    throw Error(ErrorKind::Usage, out + ": not a token file name; token files are .mimi, .npy, .safetensors or .txt" +
                                      std::string(flag.empty() && !looks_like_audio_name(ext) ? " (or give --format)" : ""));
  if (flag.empty()) return;
  const auto by_ext = format_from_extension(out);
  const auto by_flag = parse_format(flag);
  if (by_ext && by_flag && *by_ext != *by_flag)
    throw Error(ErrorKind::Usage, "--format " + flag + " contradicts the output name " + out);
}

int exit_code_for(ErrorKind k) {
  switch (k) {
    case ErrorKind::Usage: return kUsage;
    case ErrorKind::Input: return kInputError;
    case ErrorKind::Weights: return kWeightsError;
    case ErrorKind::Output: return kOutputError;
    case ErrorKind::Device: return kDeviceError;
    case ErrorKind::Internal: return kInternal;
    case ErrorKind::Environment: return kEnvironment;
  }
  return kInternal;
}

Engine& App::engine() {
  if (engine_) return *engine_;
  LoadedEngine le = make_engine({common_.weights, common_.config, common_.device, common_.threads, parts_, common_.no_cache});
  load_seconds_ = le.load_seconds;
  engine_ = std::move(le.engine);
  return *engine_;
}

void App::emit(const nlohmann::json& record) {
  if (!common_.json) return;
  // paths are bytes: "input"/"output" that are not UTF-8 get an exact "_hex" twin (app/sys/json_bytes.h)
  nlohmann::json r = record;
  for (const char* k : {"input", "output"})
    if (r.contains(k) && r[k].is_string()) put_path(r, k, r[k].get<std::string>());
  std::string line = json_dump(r);
  if (!order_) return print_line(line);
  order_->held[order_->at].push_back(std::move(line));
  while (!order_->held.empty() && order_->held.begin()->first == order_->next) {
    auto node = order_->held.extract(order_->held.begin());
    ++order_->next;
    for (const std::string& l : node.mapped()) print_line(l);
  }
}

void App::begin_ordered_records() { order_ = std::make_unique<RecordOrder>(); }

void App::end_ordered_records(bool quietly) {
  std::unique_ptr<RecordOrder> o = std::move(order_);
  if (!o) return;
  for (const auto& [position, lines] : o->held)
    for (const std::string& l : lines) {
      try {
        print_line(l);
      } catch (const Error&) {
        if (!quietly) throw;
        return;
      }
    }
}

void App::print_line(const std::string& line) {
  std::cout << line << std::endl;
  if (!std::cout) {  // a full or closed stdout loses the record: that is a failed output
    std::cout.clear();
    throw Error(ErrorKind::Output, "stdout: cannot write the --json record");
  }
}

void App::emit_error(const std::string& input, const std::string& message) {
  try {
    emit({{"input", input}, {"status", "error"}, {"error", message}});
  } catch (const Error&) {  // stdout is gone: the error is on stderr already
  }
}

// --json records go to stdout: an output on stdout too (-o -, /dev/stdout, /dev/fd/1) would have
// them appended to its bytes (convert did: exit 0, a stream that no longer decodes)
void App::refuse_json_on_stdout(const std::string& out) const {
  if (common_.json && is_stdout_path(out))
    throw Error(ErrorKind::Usage, "--json cannot share stdout with -o " + out + " (write the output to a file)");
}

void App::check_targets(const std::vector<std::string>& inputs, const std::string& out) {
  if (inputs.size() > 1 && !out.empty() && !is_directory_target(out))
    throw Error(ErrorKind::Usage, "-o must be a directory (ending in '/') when there are several inputs");
  if (std::count(inputs.begin(), inputs.end(), std::string("-")) > 0 && inputs.size() > 1)
    throw Error(ErrorKind::Usage, "'-' (stdin) can only be the single input");
  refuse_json_on_stdout(out);
  if (is_directory_target(out)) {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec && !fs::is_directory(out)) {
      // (EEXIST or ENOTDIR: a file stands where the folder, or one above it, would be)
      if (ec.value() == EEXIST || ec.value() == ENOTDIR)
        throw Error(ErrorKind::Output, out + ": cannot create the output directory: a file of that name (or of a "
                                             "folder above it) is there, not a directory");
      throw sys_error(ec.value(), ErrorKind::Output, out, "cannot create the output directory");
    }
  }
  set_protected_inputs(inputs);
}

void App::input_failed(const std::string& in, std::exception_ptr error, int& code) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    // weights and devices fail the same way for every input: stop now; so does the machine (out
    // of memory or descriptors, a failing disk): the next input would fail alike, and none of it
    // is this input's fault (main reports it, exit 75)
    if (e.kind() == ErrorKind::Weights && !engine_) throw;
    if (e.kind() == ErrorKind::Device || e.kind() == ErrorKind::Usage || e.kind() == ErrorKind::Environment) throw;
    // every message of a failed input names it (an output's error names the output)
    const std::string what = in == "-" ? "stdin" : in;
    const std::string msg = std::string(e.what()).rfind(what, 0) == 0 ? e.what() : what + ": " + e.what();
    spdlog::error("{}", msg);
    emit_error(in, msg);
    if (code == kOk) code = exit_code_for(e.kind());
  } catch (const std::bad_alloc&) {
    throw;  // the machine: main reports it (exit 75)
  } catch (const std::exception& e) {  // a bug: still name the file and go on with the batch
    spdlog::error("{}: internal error: {}", in, e.what());
    emit_error(in, std::string("internal error: ") + e.what());
    if (code == kOk) code = kInternal;
  }
}

int App::run_each(const std::vector<std::string>& inputs, const std::string& out,
                  const std::function<void(const std::string&)>& one) {
  check_targets(inputs, out);
  int code = kOk;
  size_t failed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& in = inputs[i];
    if (inputs.size() > 1) spdlog::debug("[{}/{}] {}", i + 1, inputs.size(), in);
    try {
      one(in);
    } catch (...) {
      input_failed(in, std::current_exception(), code);
      ++failed;
    }
  }
  if (failed && inputs.size() > 1) spdlog::error("{} of {} inputs failed", failed, inputs.size());
  return code;
}

}  // namespace mimi::app
