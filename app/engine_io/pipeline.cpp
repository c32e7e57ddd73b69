#include "app/engine_io/pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "app/engine_io/weights_locate.h"
#include "app/formats/audio_io.h"
#include "app/sys/progress.h"
#include "codec/error.h"
#include "codec/weights.h"
#include "kernels/cpu/cpu_budget.h"

namespace mimi::app {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string weights_cache_dir() {
  // MIMI_NO_CACHE as a switch: 1/true/yes/on skip the cache, 0/false/no/off (or empty) keep it;
  // anything else is a mistake said as one ("no" skipped it once: only "0" kept it)
  if (const char* off = std::getenv("MIMI_NO_CACHE"); off && *off) {
    std::string v = off;
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (v == "1" || v == "true" || v == "yes" || v == "on") return "";
    if (v != "0" && v != "false" && v != "no" && v != "off")
      throw Error(ErrorKind::Usage, "MIMI_NO_CACHE='" + std::string(off) + "': give 1 (skip the prepared-weights cache) or 0");
  }
  std::filesystem::path dir;
  std::error_code ec;
  if (const char* d = std::getenv("MIMI_CACHE_DIR"); d && *d) dir = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x && x[0] == '/') dir = std::filesystem::path(x) / "mimi";
  else if (const char* h = std::getenv("HOME"); h && *h) {
    // (a home that is not there is no place for a cache: not made, as a whole tree, by mimi)
    if (!std::filesystem::is_directory(h, ec)) return "";
    dir = std::filesystem::path(h) / ".cache" / "mimi";
  } else return "";
  std::filesystem::create_directories(dir, ec);  // (failing: the write fails and says so, once)
  return dir.string();
}

LoadedEngine make_engine(const EngineSpec& spec) {
  const double t0 = now();
  LoadedEngine le;
  le.weights_path = locate_weights(spec.weights);
  LoadOptions lo;
  if (!spec.config.empty()) lo.config_path = spec.config;
  lo.parts = spec.parts;
  resolve_config(le.weights_path, lo, &le.config_origin);
  if (!spec.no_cache) lo.cache_dir = weights_cache_dir();
  CacheReport cache;
  lo.cache_report = &cache;
  auto model = load_model(le.weights_path, lo);
  switch (cache.state) {  // a cache that cannot be written or read is never the run's failure
    case CacheReport::State::Off: break;
    case CacheReport::State::Hit: spdlog::debug("weights mapped from their prepared copy {}", cache.path); break;
    case CacheReport::State::Built:
      spdlog::debug("weights prepared into {} ({})", cache.path, cache.why);
      break;
    case CacheReport::State::Unsettled: spdlog::debug("weights not cached this run: {}", cache.why); break;
    case CacheReport::State::NotWritten:
      spdlog::warn("the prepared-weights cache could not be written ({}); the weights are read each run "
                   "(--no-cache or MIMI_NO_CACHE=1 skips it, MIMI_CACHE_DIR moves it)",
                   cache.why);
      break;
  }
  EngineOptions eo;
  eo.device = Device::parse(spec.device);
  eo.threads = spec.threads;
  {  // more threads than CPUs only makes them wait for each other (5-8x slower at 1000 on 2 CPUs);
     // the machine's own limits count here, not OMP_NUM_THREADS / SLURM_CPUS_PER_TASK, which an
     // explicit --threads overrides
    cpu::CpuLimits l = cpu::read_cpu_limits();
    l.omp = l.slurm = 0;
    const int cpus = cpu::cpu_budget(l);
    if (eo.threads > cpus) {
      spdlog::warn("--threads {}: this process may use {} CPU{}; using {}", eo.threads, cpus, cpus == 1 ? "" : "s", cpus);
      eo.threads = cpus;
    }
  }
  le.engine = std::make_unique<Engine>(model, eo);
  if (spdlog::should_log(spdlog::level::debug)) spdlog::debug("device {}", describe(eo.device));
  le.load_seconds = now() - t0;
  spdlog::debug("weights {} ({} dialect, config from {}, fingerprint {}) loaded in {:.2f} s", le.weights_path,
                dialect_name(model->dialect), le.config_origin, model->fingerprint, le.load_seconds);
  return le;
}

MonoSource::MonoSource(const std::string& path, int model_rate, const AudioSpan& span)
    : reader_(path), rs_(reader_.sample_rate(), model_rate), what_(path == "-" ? "stdin" : path), channel_(span.channel) {
  const int rate = reader_.sample_rate();
  if (channel_ >= reader_.channels())
    throw Error(ErrorKind::Input, what_ + ": channel " + std::to_string(channel_) + " asked, the file has " +
                                      std::to_string(reader_.channels()));
  if (span.start < 0 || (span.end >= 0 && span.end <= span.start))
    throw Error(ErrorKind::Input, what_ + ": empty or negative segment [" + std::to_string(span.start) + ", " +
                                      std::to_string(span.end) + ") s");
  const SpanFrames f = span_frames(span.start, span.end, rate);
  skip_ = f.skip;
  if (span.end >= 0) left_ = f.take;
  if (span.end >= 0 && left_ < 1)  // (it read nothing and said the segment began past the end)
    throw Error(ErrorKind::Input, what_ + ": the segment [" + std::to_string(span.start) + ", " + std::to_string(span.end) +
                                      ") s holds no sample at " + std::to_string(rate) + " Hz");
  if (reader_.frames() > 0 && skip_ >= reader_.frames())
    throw Error(ErrorKind::Input, what_ + ": segment starts at " + std::to_string(span.start) + " s, the file lasts " +
                                      std::to_string(double(reader_.frames()) / rate) + " s");
}

bool MonoSource::next(std::vector<float>& pcm) {
  pcm.clear();
  if (done_) return false;
  const int nch = reader_.channels();
  // Blocks of 64 Ki source frames from the start of the file whatever the span: the resampler
  // sees the same pieces as for the whole file.
  int64_t got = 0;
  while (left_ != 0 && (got = reader_.read(block_, 1 << 16)) > 0) {
    int64_t first = 0;
    if (skip_ > 0) {
      first = std::min(skip_, got);
      skip_ -= first;
      pos_ += first;
      if (first == got) continue;
    }
    int64_t take = got - first;
    if (left_ > 0) take = std::min(take, left_);
    mono_.resize(size_t(take));
    downmix(block_.data() + size_t(first * nch), take, nch, channel_, mono_.data(), pos_, reader_.sample_rate(), what_);
    pos_ += got - first;
    read_ += take;
    if (left_ > 0) left_ -= take;
    rs_.process(mono_.data(), mono_.size(), pcm);
    return true;
  }
  if (skip_ > 0) throw Error(ErrorKind::Input, what_ + ": the segment starts after the end of the audio");
  rs_.process(nullptr, 0, pcm);
  done_ = true;
  return true;
}

std::string MonoSource::shortfall() const {
  if (left_ == 0) return "";  // the span ended where it should: the rest of the file was not wanted
  if (left_ > 0) {
    std::string s = "the segment ends ";
    s += std::to_string(double(left_) / reader_.sample_rate());
    s += " s after the end of the audio";
    return s;
  }
  return reader_.shortfall();
}

EncodedAudio encode_audio(Engine& eng, const std::string& in, int n_q, int channel, bool quiet) {
  MonoSource src(in, eng.config().sample_rate, AudioSpan{0, -1, channel});
  EncoderSession session(eng, n_q);
  EncodedAudio a;
  a.source_rate = src.source_rate();
  a.source_channels = src.source_channels();
  std::vector<float> pcm;
  Progress bar(in, src.source_frames(), double(src.source_frames()) / src.source_rate(), !quiet);
  const std::string what = in == "-" ? "stdin" : in;
  while (src.next(pcm)) {
    bar.update(src.frames_read());
    const double c0 = now();
    if (!pcm.empty()) session.feed(pcm.data(), int64_t(pcm.size()));
    a.compute += now() - c0;
  }
  if (const std::string s = src.shortfall(); !s.empty()) spdlog::warn("{}: {}", what, s);
  bar.finish();
  if (session.samples() == 0) throw Error(ErrorKind::Input, what + ": no audio samples");
  a.samples = session.samples();
  const double c0 = now();
  a.codes = session.finish();
  a.compute += now() - c0;
  return a;
}

}  // namespace mimi::app
