// `mimi decode` (token files -> audio files; one by one, --batch N slots, or --stream from a pipe)
// and `mimi roundtrip` (audio -> tokens -> audio).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "app/cli/command.h"
#include "app/cli/stream.h"
#include "app/engine_io/decode_output.h"
#include "app/engine_io/pipeline.h"
#include "app/formats/audio_io.h"
#include "app/sys/file_io.h"
#include "app/sys/progress.h"
#include "codec/error.h"

namespace mimi::app {
namespace fs = std::filesystem;

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
    // (the options --stream does not honour are refused by the command line: stream_honours, app/cli/command.h)
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
    const DecodeResult d = decode_to_file(eng, t, n_q, audio_out(o, sf), path, common_.force, in, common_.quiet);
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
    const DecodeResult d = decode_to_file(eng, t, n_q, audio_out(o, sf), path, common_.force, in, common_.quiet);
    const double seconds = double(a.samples) / rate;
    spdlog::info("{} -> {}: {:.2f} s, {} codebooks, encode {:.1f}x / decode {:.1f}x real time", in, path, seconds, n_q,
                 seconds / enc, seconds / d.compute);
    emit({{"input", in}, {"output", path}, {"status", "ok"}, {"seconds", seconds}, {"frames", t.codes.frames},
          {"n_q", n_q}, {"bytes", d.bytes}, {"wall_s", monotonic_seconds() - t0}, {"load_s", load_seconds_},
          {"compute_s", enc + d.compute}, {"encode_s", enc}, {"decode_s", d.compute}, {"rtf", seconds / (enc + d.compute)}});
  });
}


namespace {

void add_decode_outputs(CLI::App* sub, DecodeOptions& d) {
  sub->add_option("--sample-format", d.sample_format, "Output samples: s16, s24 or f32")
      ->check(CLI::IsMember({"s16", "s24", "f32"}))
      ->capture_default_str();
  sub->add_option("--sample-rate", d.sample_rate,
                  "Resample the output to HZ, or 'source' for the rate recorded in the token file [default: 24000]");
  sub->add_flag("--no-trim", d.no_trim, "Keep the padding of the last frame instead of trimming to the original length");
}

class Decode : public Command {
 public:
  DecodeOptions o;
  bool roundtrip = false;
  std::vector<std::string> inputs() const override { return o.inputs; }
  int run(const Common& common) override { return roundtrip ? App(common).roundtrip(o) : App(common).decode(o); }
  bool batched() const override { return o.batch > 1; }
};

}  // namespace

std::unique_ptr<Command> add_decode(CLI::App& app, Common& common) {
  auto cmd = std::make_unique<Decode>();
  DecodeOptions& dec = cmd->o;
  CLI::App* d = cmd->sub = app.add_subcommand("decode", "Token files -> audio files");
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
  return cmd;
}

std::unique_ptr<Command> add_roundtrip(CLI::App& app, Common& common) {
  auto cmd = std::make_unique<Decode>();
  cmd->roundtrip = true;
  DecodeOptions& rt = cmd->o;
  CLI::App* r = cmd->sub = app.add_subcommand("roundtrip", "Audio -> tokens -> audio (hear what the codec keeps)");
  r->add_option("inputs", rt.inputs, "Audio files; - for stdin")->required();
  r->add_option("-o,--output", rt.out, "Output file, DIR/, or - [default: beside each input, <stem>.roundtrip.wav]");
  r->add_option("--n-q", rt.n_q, "Codebooks, 1..32 [default: 8]")->check(CLI::Range(1, 32));
  add_decode_outputs(r, rt);
  add_common(r, common);
  return cmd;
}

}  // namespace mimi::app
