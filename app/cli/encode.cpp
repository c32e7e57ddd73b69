// `mimi encode`: audio files -> token files (one by one, --batch N slots, or --stream from a pipe).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "app/cli/command.h"
#include "app/cli/stream.h"
#include "app/engine_io/pipeline.h"
#include "app/formats/audio_io.h"
#include "app/sys/file_io.h"
#include "app/sys/progress.h"
#include "codec/error.h"

namespace mimi::app {
namespace fs = std::filesystem;

int App::encode(const EncodeOptions& o) {
  parts_ = {.encoder = true, .decoder = false};  // a decoder's weights would only take memory
  check_format_matches_output(o.format, o.out, o.inputs);
  const EncodeTarget target = encode_target(o);
  if (!o.stream && !o.raw_format.empty())
    throw Error(ErrorKind::Usage, "--raw-format describes a --stream input; add --stream (files carry their own header)");
  if (o.stream) {
    // (the options --stream does not honour are refused by the command line: stream_honours, app/cli/command.h)
    if (o.inputs.size() != 1) throw Error(ErrorKind::Usage, "--stream takes one input");
    StreamEncodeOptions so;
    so.input = o.inputs[0];
    // the token format as the file modes choose it: --format, else the output's extension
    so.format = format_name(target.format);
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
  if (o.batch > 1) return encode_batched(o, target);
  return run_each(o.inputs, o.out, [&](const std::string& in) {
    const double t0 = monotonic_seconds();
    int channels = 1;
    if (o.split_channels) channels = AudioReader(in).channels();  // a file: reopened per channel
    for (int ch = o.split_channels ? 0 : -1; ch < (o.split_channels ? channels : 0); ++ch) {  // -1: the downmix
      Engine& eng = engine();
      const EncodedAudio a = encode_audio(eng, in, o.n_q, ch, common_.quiet);
      write_encoded(target, in, ch, a, monotonic_seconds() - t0);
    }
  });
}

EncodeTarget encode_target(const EncodeOptions& o) { return EncodeTarget{.out = o.out, .format = token_format_for(o.format, o.out)}; }

std::string EncodeTarget::path(const std::string& in, int ch) const {
  std::string ext = format_extension(format);
  if (ch >= 0) ext = ".ch" + std::to_string(ch) + ext;
  std::string path = output_path(in, out, ext);
  if (ch >= 0 && !out.empty() && out != "-" && !is_directory_target(out))
    path = (fs::path(out).parent_path() / (fs::path(out).stem().string() + ext)).string();
  if (ch >= 0 && path == "-") throw Error(ErrorKind::Usage, "--split-channels needs file outputs, not stdout");
  return path;
}

void App::write_encoded(const EncodeTarget& target, const std::string& in, int ch, const EncodedAudio& a, double wall) {
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
  const TokenFormat fmt = target.format;
  const std::string path = target.path(in, ch);
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


namespace {

class Encode : public Command {
 public:
  EncodeOptions o;
  void check() override {
    refuse_inert({{sub->get_option("--readers"), o.batch > 1, "--batch N with N > 1 (its threads read ahead for the slots)"}});
  }
  std::vector<std::string> inputs() const override { return o.inputs; }
  int run(const Common& common) override { return App(common).encode(o); }
  bool batched() const override { return o.batch > 1; }
};

}  // namespace

std::unique_ptr<Command> add_encode(CLI::App& app, Common& common) {
  auto cmd = std::make_unique<Encode>();
  EncodeOptions& enc = cmd->o;
  CLI::App* e = cmd->sub = app.add_subcommand("encode", "Audio files -> token files");
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
  return cmd;
}

}  // namespace mimi::app
