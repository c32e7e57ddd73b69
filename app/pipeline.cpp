#include "app/pipeline.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "app/audio_io.h"
#include "app/progress.h"
#include "app/weights_locate.h"
#include "codec/error.h"
#include "codec/weights.h"

namespace mimi::app {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

LoadedEngine make_engine(const EngineSpec& spec) {
  const double t0 = now();
  LoadedEngine le;
  le.weights_path = locate_weights(spec.weights);
  LoadOptions lo;
  if (!spec.config.empty()) lo.config_path = spec.config;
  resolve_config(le.weights_path, lo, &le.config_origin);
  auto model = load_model(le.weights_path, lo);
  EngineOptions eo;
  eo.device = Device::parse(spec.device);
  eo.threads = spec.threads;
  le.engine = std::make_unique<Engine>(model, eo);
  spdlog::debug("device {}", describe(eo.device));
  le.load_seconds = now() - t0;
  spdlog::debug("weights {} ({} dialect, config from {}, fingerprint {}) loaded in {:.2f} s", le.weights_path,
                dialect_name(model->dialect), le.config_origin, model->fingerprint, le.load_seconds);
  return le;
}

EncodedAudio encode_audio(Engine& eng, const std::string& in, int n_q, int channel, bool quiet) {
  AudioReader reader(in);
  StreamResampler rs(reader.sample_rate(), eng.config().sample_rate);
  EncoderSession session(eng, n_q);
  EncodedAudio a;
  a.source_rate = reader.sample_rate();
  a.source_channels = reader.channels();
  const int nch = reader.channels();
  std::vector<float> block, mono, pcm;
  Progress bar(in, reader.frames(), double(reader.frames()) / reader.sample_rate(), !quiet);
  auto feed = [&] {
    const double c0 = now();
    if (!pcm.empty()) session.feed(pcm.data(), int64_t(pcm.size()));
    a.compute += now() - c0;
    pcm.clear();
  };
  const std::string what = in == "-" ? "stdin" : in;
  int64_t got, read_frames = 0;
  while ((got = reader.read(block, 1 << 16)) > 0) {
    mono.resize(size_t(got));
    downmix(block.data(), got, nch, channel, mono.data(), read_frames, reader.sample_rate(), what);
    bar.update(read_frames += got);
    rs.process(mono.data(), mono.size(), pcm);
    feed();
  }
  if (const std::string s = reader.shortfall(); !s.empty()) spdlog::warn("{}: {}", what, s);
  rs.process(nullptr, 0, pcm);
  feed();
  bar.finish();
  if (session.samples() == 0) throw Error(ErrorKind::Input, what + ": no audio samples");
  a.samples = session.samples();
  const double c0 = now();
  a.codes = session.finish();
  a.compute += now() - c0;
  return a;
}

}  // namespace mimi::app
