#include "app/cli/commands.h"

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

namespace {

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
                                 const std::vector<std::string>& inputs = {}) {
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


}  // namespace

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
  LoadedEngine le = make_engine({common_.weights, common_.config, common_.device, common_.threads, parts_});
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
  std::cout << json_dump(r) << std::endl;
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
    if (ec && !fs::is_directory(out)) throw sys_error(ec.value(), ErrorKind::Output, out, "cannot create the output directory");
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

int App::encode(const EncodeOptions& o) {
  parts_ = {.encoder = true, .decoder = false};  // a decoder's weights would only take memory
  check_format_matches_output(o.format, o.out, o.inputs);
  if (!o.stream && !o.raw_format.empty())
    throw Error(ErrorKind::Usage, "--raw-format describes a --stream input; add --stream (files carry their own header)");
  if (o.stream) {
    // (the options --stream does not honour are refused by the command line: main.cpp stream_honours)
    if (o.inputs.size() != 1) throw Error(ErrorKind::Usage, "--stream takes one input");
    StreamEncodeOptions so;
    so.input = o.inputs[0];
    // the token format as the file modes choose it: --format, else the output's extension
    so.format = format_name(token_format_for(o.format, o.out));
    so.out = output_path(so.input, o.out, so.format == "text" ? ".txt" : ".mimi");
    so.raw = RawFormat{o.raw_format, o.raw_rate, o.raw_channels};
    so.n_q = o.n_q;
    so.force = common_.force;
    refuse_json_on_stdout(so.out);
    Engine& eng = engine();
    const double t0 = monotonic_seconds();
    const StreamStats st = stream_encode(eng, so);
    const double seconds = double(st.samples) / eng.config().sample_rate;
    spdlog::info("{} -> {}: streamed {} frames ({:.2f} s), compute {:.2f} ms per frame on average, {:.2f} ms at most",
                 so.input, so.out, st.frames, seconds, 1e3 * st.compute_s / double(std::max<int64_t>(st.frames, 1)),
                 1e3 * st.max_frame_s);
    // the file mode's fields (report_encoded), and the stream's own max_frame_s
    nlohmann::json rec{{"input", so.input}, {"output", so.out}, {"status", "ok"}, {"seconds", seconds},
                       {"frames", st.frames}, {"n_q", st.n_q}, {"format", so.format}, {"bytes", st.bytes},
                       {"bitrate", 8.0 * double(st.bytes) / seconds}, {"wall_s", monotonic_seconds() - t0},
                       {"load_s", load_seconds_}, {"compute_s", st.compute_s}, {"max_frame_s", st.max_frame_s}};
    if (st.compute_s > 0) rec["rtf"] = seconds / st.compute_s;
    emit(rec);
    return kOk;
  }
  if (o.split_channels && std::count(o.inputs.begin(), o.inputs.end(), std::string("-")))
    throw Error(ErrorKind::Usage, "--split-channels needs file inputs, not stdin");
  if (o.batch > 1) return encode_batched(o);
  return run_each(o.inputs, o.out, [&](const std::string& in) {
    const double t0 = monotonic_seconds();
    int channels = 1;
    if (o.split_channels) channels = AudioReader(in).channels();  // a file: reopened per channel
    for (int ch = o.split_channels ? 0 : -1; ch < (o.split_channels ? channels : 0); ++ch) {  // -1: the downmix
      Engine& eng = engine();
      const EncodedAudio a = encode_audio(eng, in, o.n_q, ch, common_.quiet);
      write_encoded(o, in, ch, a, monotonic_seconds() - t0);
    }
  });
}

std::string App::encoded_output(const EncodeOptions& o, const std::string& in, int ch) {
  std::string ext = format_extension(token_format_for(o.format, o.out));
  if (ch >= 0) ext = ".ch" + std::to_string(ch) + ext;
  std::string path = output_path(in, o.out, ext);
  if (ch >= 0 && !o.out.empty() && o.out != "-" && !is_directory_target(o.out))
    path = (fs::path(o.out).parent_path() / (fs::path(o.out).stem().string() + ext)).string();
  if (ch >= 0 && path == "-") throw Error(ErrorKind::Usage, "--split-channels needs file outputs, not stdout");
  return path;
}

void App::write_encoded(const EncodeOptions& o, const std::string& in, int ch, const EncodedAudio& a, double wall) {
  Engine& eng = engine();
  const int rate = eng.config().sample_rate;
  const double compute = a.compute;
  TokenFile t;
  t.codes = a.codes;
  t.meta.sample_rate = rate;
  t.meta.frame_rate = eng.config().frame_rate;
  t.meta.codebook_size = eng.config().bins;
  t.meta.original_samples = a.samples;
  t.meta.source_sample_rate = a.source_rate;
  t.meta.source_channels = a.source_channels;
  if (ch >= 0) t.meta.channel = ch;
  t.meta.weights_fingerprint = eng.model().fingerprint;
  t.meta.config_fingerprint = eng.model().config_fingerprint();
  t.meta.tool_version = MIMI_VERSION;
  const TokenFormat fmt = token_format_for(o.format, o.out);
  const std::string path = encoded_output(o, in, ch);
  const std::vector<uint8_t> bytes = write_tokens(t, fmt);
  write_output(path, bytes, common_.force);
  const double seconds = double(a.samples) / rate;
  if (compute > 0)
    spdlog::info("{} -> {}: {:.2f} s, {} frames x {} codebooks, {:.0f} bit/s, {:.1f}x real time", in, path, seconds,
                 t.codes.frames, t.codes.n_q, 8.0 * double(bytes.size()) / seconds, seconds / compute);
  else  // batched: the compute is shared with the other slots (the batch's summary has it)
    spdlog::info("{} -> {}: {:.2f} s, {} frames x {} codebooks, {:.0f} bit/s", in, path, seconds, t.codes.frames,
                 t.codes.n_q, 8.0 * double(bytes.size()) / seconds);
  nlohmann::json rec{{"input", in},        {"output", path},         {"status", "ok"},
                     {"seconds", seconds}, {"frames", t.codes.frames}, {"n_q", t.codes.n_q},
                     {"format", format_name(fmt)}, {"bytes", bytes.size()},
                     {"bitrate", 8.0 * double(bytes.size()) / seconds}, {"wall_s", wall}, {"load_s", load_seconds_}};
  if (compute > 0) rec["compute_s"] = compute, rec["rtf"] = seconds / compute;
  if (ch >= 0) rec["channel"] = ch;
  emit(rec);
}

// -o NAME.ext for audio: a container we write (before any weights are loaded)
void check_audio_output(const DecodeOptions& o) {
  if (!o.out.empty() && o.out != "-" && !is_directory_target(o.out) && o.raw_format.empty()) container_for(o.out);
}

int App::decode(const DecodeOptions& o) {
  parts_ = {.encoder = false, .decoder = true};
  const SampleFormat sf = parse_sample_format(o.sample_format);
  check_audio_output(o);
  if (!o.stream && !o.raw_format.empty())
    throw Error(ErrorKind::Usage, "--raw-format is for --stream output; add --stream (files get a WAV/FLAC/OGG header)");
  if (o.stream) {
    // (the options --stream does not honour are refused by the command line: main.cpp stream_honours)
    if (o.inputs.size() != 1) throw Error(ErrorKind::Usage, "--stream takes one input");
    StreamDecodeOptions so;
    so.input = o.inputs[0];
    so.out = output_path(so.input, o.out, ".wav");
    so.raw_sample = o.raw_format;
    // headerless PCM under an audio container's name would mislead whatever opens it
    if (!o.raw_format.empty() && so.out != "-" && looks_like_audio_name(fs::path(so.out).extension().string()))
      throw Error(ErrorKind::Usage, so.out + ": --raw-format writes headerless PCM, not what this name says; name it .raw or "
                                             "drop --raw-format");
    so.sample_format = sf;
    so.sample_rate = o.sample_rate;
    so.recover = o.recover;
    so.n_q = o.n_q;
    so.force = common_.force;
    so.allow_weights_mismatch = o.allow_weights_mismatch;
    refuse_json_on_stdout(so.out);
    Engine& eng = engine();
    const double t0 = monotonic_seconds();
    const StreamStats st = stream_decode(eng, so);
    spdlog::info("{} -> {}: streamed {} frames, compute {:.2f} ms per frame on average, {:.2f} ms at most", so.input,
                 so.out, st.frames, 1e3 * st.compute_s / double(std::max<int64_t>(st.frames, 1)), 1e3 * st.max_frame_s);
    // the file mode's fields (report_decoded), and the stream's own max_frame_s
    const double seconds = double(st.samples) / eng.config().sample_rate;
    nlohmann::json rec{{"input", so.input}, {"output", so.out}, {"status", "ok"}, {"seconds", seconds},
                       {"frames", st.frames}, {"n_q", st.n_q}, {"bytes", st.bytes}, {"sample_rate", st.sample_rate},
                       {"wall_s", monotonic_seconds() - t0}, {"load_s", load_seconds_}, {"compute_s", st.compute_s},
                       {"max_frame_s", st.max_frame_s}};
    if (st.compute_s > 0) rec["rtf"] = seconds / st.compute_s;
    emit(rec);
    return kOk;
  }
  if (o.batch > 1) return decode_batched(o, sf);
  return run_each(o.inputs, o.out, [&](const std::string& in) {
    const double t0 = monotonic_seconds();
    const TokenFile t = read_token_input(in, o.recover);
    Engine& eng = engine();
    const int n_q = check_tokens(eng, t, o.n_q, -1, o.allow_weights_mismatch, in);
    const std::string path = output_path(in, o.out, ".wav");
    const DecodeResult d = decode_to_file(eng, t, n_q, o, sf, path, common_.force, in, common_.quiet);
    report_decoded(in, path, t, n_q, d, monotonic_seconds() - t0);
  });
}

void App::report_decoded(const std::string& in, const std::string& path, const TokenFile& t, int n_q,
                         const DecodeResult& d, double wall) {
  const double seconds = double(t.codes.frames) * engine().config().frame_size() / engine().config().sample_rate;
  nlohmann::json rec{{"input", in},          {"output", path},          {"status", "ok"},
                     {"seconds", double(d.samples) / d.rate}, {"frames", t.codes.frames}, {"n_q", n_q},
                     {"bytes", d.bytes},     {"sample_rate", d.rate},   {"wall_s", wall},
                     {"load_s", load_seconds_}};
  if (d.compute > 0) {
    spdlog::info("{} -> {}: {} frames, {:.2f} s at {} Hz, {:.1f}x real time", in, path, t.codes.frames,
                 double(d.samples) / d.rate, d.rate, seconds / d.compute);
    rec["compute_s"] = d.compute, rec["rtf"] = seconds / d.compute;
  } else {  // batched: the compute is shared with the other slots (the batch's summary has it)
    spdlog::info("{} -> {}: {} frames, {:.2f} s at {} Hz", in, path, t.codes.frames, double(d.samples) / d.rate, d.rate);
  }
  emit(rec);
}

int App::roundtrip(const DecodeOptions& o) {
  const SampleFormat sf = parse_sample_format(o.sample_format);
  check_audio_output(o);
  return run_each(o.inputs, o.out, [&](const std::string& in) {
    const double t0 = monotonic_seconds();
    Engine& eng = engine();
    const int rate = eng.config().sample_rate;
    const int n_q = o.n_q > 0 ? o.n_q : std::min(8, eng.config().n_q);
    const EncodedAudio a = encode_audio(eng, in, n_q, -1, common_.quiet);
    const double enc = a.compute;
    TokenFile t;
    t.codes = a.codes;
    t.meta.original_samples = a.samples;
    t.meta.source_sample_rate = a.source_rate;
    t.meta.codebook_size = eng.config().bins;
    const std::string path = output_path(in, o.out, ".roundtrip.wav");
    const DecodeResult d = decode_to_file(eng, t, n_q, o, sf, path, common_.force, in, common_.quiet);
    const double seconds = double(a.samples) / rate;
    spdlog::info("{} -> {}: {:.2f} s, {} codebooks, encode {:.1f}x / decode {:.1f}x real time", in, path, seconds, n_q,
                 seconds / enc, seconds / d.compute);
    emit({{"input", in}, {"output", path}, {"status", "ok"}, {"seconds", seconds}, {"frames", t.codes.frames},
          {"n_q", n_q}, {"bytes", d.bytes}, {"wall_s", monotonic_seconds() - t0}, {"load_s", load_seconds_},
          {"compute_s", enc + d.compute}, {"encode_s", enc}, {"decode_s", d.compute}, {"rtf", seconds / (enc + d.compute)}});
  });
}

int App::info(const std::vector<std::string>& files) {
  if (files.empty()) {  // the build and what it can run on
    nlohmann::json devs = nlohmann::json::array();
    for (const DeviceDescription& d : list_devices())
      devs.push_back({{"device", d.device.str()}, {"name", d.name}, {"emulated", d.emulated}});
    nlohmann::json j = {{"kind", "build"}, {"version", MIMI_VERSION}, {"cpu_isa", cpu::gemm_isa()},
                        {"cpu_threads", cpu::default_num_threads()}, {"gpu_backend", gpu_backend()},
                        {"devices", devs}};
    if (const std::string why = gpu_unavailable(); !why.empty()) j["gpu_unavailable"] = why;
    std::cout << json_dump(j, common_.json ? -1 : 2) << std::endl;
    return kOk;
  }
  int code = kOk;
  // stdout is always one JSON text: --json gives one object per line (JSON Lines); otherwise one
  // file's object, or for several files one array of them (written as they come). Every named file
  // has its object, a file that fails too ({"kind": "error"}, its error also on stderr), so a
  // script's records line up with its arguments.
  const bool array = !common_.json && files.size() > 1;
  size_t printed = 0;
  bool described_weights = false;  // --config acts on weights files only
  auto print = [&](const nlohmann::json& j) {
    if (common_.json) {
      std::cout << json_dump(j, -1) << std::endl;
      return;
    }
    std::string s = json_dump(j, 2);
    if (array) {  // indent the object one level inside the array
      std::string in = "  ";
      for (char ch : s) in += ch == '\n' ? std::string("\n  ") : std::string(1, ch);
      s = (printed ? ",\n" : "[\n") + in;
    }
    std::cout << s << (array ? "" : "\n") << std::flush;
    ++printed;
  };
  for (const std::string& f : files) {
    try {
      const std::string what = f == "-" ? "stdin" : f;
      const std::optional<TokenFormat> declared = f == "-" ? std::nullopt : format_from_extension(f);
      const std::vector<uint8_t> bytes = read_input(f, [&](const uint8_t* p, size_t n) {
        if (declared || sniff_format(std::vector<uint8_t>(p, p + std::min<size_t>(n, 64)))) {
          check_token_prefix(declared, p, n, what);
        } else if (!looks_like_audio(p, n)) {
          throw Error(ErrorKind::Input, what + ": neither a token file, weights nor audio");
        }
      });
      nlohmann::json j = {{"bytes", bytes.size()}};
      put_path(j, "file", f);
      std::optional<TokenFormat> fmt = declared;
      if (!fmt) fmt = sniff_format(bytes);
      bool is_weights = false;
      if (fmt == TokenFormat::Safetensors) {  // weights or codes?
        const SafetensorsFile st = SafetensorsFile::from_bytes(std::make_shared<const std::vector<uint8_t>>(bytes), f);
        is_weights = !st.has("codes");
        described_weights = described_weights || is_weights;
        if (is_weights) {
          j["kind"] = "weights";
          j["dialect"] = dialect_name(detect_dialect(st));
          j["tensors"] = st.tensors().size();
          LoadOptions lo;
          if (!common_.config.empty()) lo.config_path = common_.config;
          std::string origin;
          const Config cfg = f == "-" ? Config::official() : resolve_config(f, lo, &origin);
          j["config_source"] = f == "-" ? "official defaults" : origin;
          j["config"] = cfg.to_json();
          try {
            auto m = load_model(st, cfg);
            j["fingerprint"] = m->fingerprint;
            j["valid"] = true;
          } catch (const Error& e) {
            if (e.kind() == ErrorKind::Environment) throw;
            // described, and still a failure: the exit code says what encode would say (4), as a
            // damaged token file's description comes with exit 3
            j["valid"] = false;
            j["error"] = e.what();
            spdlog::error("{}", e.what());
            if (code == kOk) code = kWeightsError;
          }
        }
      }
      if (!is_weights) {
        if (!fmt) {  // perhaps audio
          const AudioInfo a = probe_audio(bytes, f);
          j["kind"] = "audio";
          j["sample_rate"] = a.sample_rate;
          j["channels"] = a.channels;
          j["frames"] = a.frames;
          j["seconds"] = double(a.frames) / a.sample_rate;
          print(j);
          continue;
        }
        const TokenFile t = read_tokens(bytes, *fmt, f, /*recover=*/true);
        j["kind"] = "tokens";
        j["format"] = format_name(*fmt);
        j["n_q"] = t.codes.n_q;
        j["frames"] = t.codes.frames;
        j["seconds"] = double(t.codes.frames) / t.meta.frame_rate;
        j["complete"] = t.complete;
        if (!t.complete) j["damage"] = t.damage;
        j["meta"] = meta_to_json(t.meta);
        if (!t.complete) {
          spdlog::error("{}: {}", what, t.damage);
          if (code == kOk) code = kInputError;
        }
      }
      print(j);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Environment) throw;  // not this file's fault: stop (exit 75)
      spdlog::error("{}", e.what());
      if (code == kOk) code = exit_code_for(e.kind());
      nlohmann::json j = {{"kind", "error"}, {"error", e.what()}};
      put_path(j, "file", f);
      print(j);
    }
  }
  if (array) std::cout << (printed ? "\n]" : "[]") << std::endl;
  if (!common_.config.empty() && !described_weights) {  // refused, if only once its files are known
    spdlog::error("--config does nothing here: it applies to weights files, and none of the files is one");
    if (code == kOk) code = kUsage;
  }
  return code;
}

int App::convert(const ConvertOptions& o) {
  if (o.out.empty()) throw Error(ErrorKind::Usage, "convert needs -o OUTPUT");
  refuse_json_on_stdout(o.out);
  check_format_matches_output(o.format, o.out, {o.input});
  set_protected_inputs({o.input});
  TokenFile t = read_token_input(o.input, o.recover);
  const TokenFormat fmt = token_format_for(o.format, o.out);
  const std::string path = output_path(o.input, o.out, format_extension(fmt));
  const std::vector<uint8_t> bytes = write_tokens(t, fmt);
  write_output(path, bytes, common_.force);
  spdlog::info("{} -> {} ({}, {} frames x {} codebooks)", o.input, path, format_name(fmt), t.codes.frames, t.codes.n_q);
  emit({{"input", o.input}, {"output", path}, {"status", "ok"}, {"format", format_name(fmt)}, {"frames", t.codes.frames},
        {"n_q", t.codes.n_q}, {"bytes", bytes.size()}});
  return kOk;
}

int App::gen_weights(const std::string& config, const std::string& dialect, uint64_t seed, const std::string& out) {
  const Config cfg = test_config(config);
  Dialect d;
  if (dialect == "moshi") d = Dialect::Moshi;
  else if (dialect == "hf") d = Dialect::HuggingFace;
  else throw Error(ErrorKind::Usage, "--dialect must be moshi or hf");
  const GeneratedWeights w = generate_prng_weights(cfg, seed);
  write_output(out, prng_weights_file(w, d, {{"format", "pt"}, {"generator", "mimi gen-weights"}, {"config", config}, {"seed", std::to_string(seed)}}),
               common_.force);
  if (out != "-") {  // a config.json beside the file makes it loadable without --config
    const std::string cj = (fs::path(out).parent_path() / "config.json").string();
    if (!fs::exists(cj)) write_output(cj, [&] { const std::string s = cfg.to_json().dump(2) + "\n"; return std::vector<uint8_t>(s.begin(), s.end()); }(), false);
  }
  spdlog::info("wrote {} ({} weights, {} dialect, seed {})", out, config, dialect, seed);
  return kOk;
}

}  // namespace mimi::app
