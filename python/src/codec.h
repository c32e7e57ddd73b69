// _Codec: one loaded engine (weights, device, cached plans) behind a mutex. Every compute call
// releases the GIL first and then takes the mutex, so Python threads sharing one codec run one at
// a time and never deadlock; threads that want to compute at once use one codec each.
#pragma once

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <memory>
#include <mutex>
#include <string>

#include "app/engine_io/decode_output.h"
#include "app/engine_io/pipeline.h"
#include "app/formats/audio_io.h"
#include "app/formats/token_file.h"
#include "codec/batch.h"
#include "codec/error.h"
#include "python/src/arrays.h"
#include "python/src/bind.h"

namespace mimi::py {

inline std::string bytes_str(const nb::bytes& b) { return std::string(b.c_str(), b.size()); }

// The CLI's limits on what audio can be (app/formats/audio_io.h): a rate outside them or more
// channels than any file may hold is a call that mixed up its arguments (a rate in kHz, audio as
// [samples, channels]), refused instead of computed.
inline void check_layout(int64_t channels, int64_t rate, const std::string& what) {
  if (rate < app::kMinSampleRate || rate > app::kMaxSampleRate)
    throw Error(ErrorKind::Usage, what + ": sample_rate " + std::to_string(rate) + " Hz is outside " +
                                      std::to_string(app::kMinSampleRate) + ".." + std::to_string(app::kMaxSampleRate));
  if (channels < 1 || channels > app::kMaxChannels)
    throw Error(ErrorKind::Usage, what + ": " + std::to_string(channels) + " channels (1.." +
                                      std::to_string(app::kMaxChannels) +
                                      "); audio is [channels, samples]: transpose a [samples, channels] array");
}

class Codec {
 public:
  Codec(const nb::bytes& weights, const nb::bytes& config, const std::string& device, int threads, bool no_cache) {
    app::EngineSpec spec;
    spec.weights = bytes_str(weights);
    spec.config = bytes_str(config);
    spec.device = device;
    spec.threads = threads;
    spec.no_cache = no_cache;
    nb::gil_scoped_release g;
    le_ = app::make_engine(spec);
  }
  Engine& eng() { return *le_.engine; }
  const Config& cfg() const { return le_.engine->config(); }

  // pcm [frames, channels] interleaved at `rate` -> model-rate mono, downmixed and resampled
  // exactly as a file of those samples is (blocks of 64 Ki source frames, app::MonoSource).
  std::vector<float> model_rate_mono(const float* pcm, int64_t T, int64_t C, int rate, const std::string& what) {
    check_layout(C, rate, what);
    app::StreamResampler rs(rate, cfg().sample_rate);
    std::vector<float> mono, out;
    constexpr int64_t kBlock = int64_t(1) << 16;
    for (int64_t f0 = 0; f0 < T; f0 += kBlock) {
      const int64_t n = std::min(kBlock, T - f0);
      mono.resize(size_t(n));
      app::downmix(pcm + f0 * C, n, int(C), -1, mono.data(), f0, rate, what);
      rs.process(mono.data(), size_t(n), out);
    }
    rs.process(nullptr, 0, out);
    if (out.empty()) throw Error(ErrorKind::Input, what + ": no samples");
    return out;
  }

  // Items [frames, channels] through the slots of one batched plan (codec/batch.h): each item's
  // codes are exactly those encode_pcm gives it alone. An item is downmixed and resampled as its
  // slot reads it (no model-rate copy of the whole list).
  using PcmIn = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
  nb::list encode_batch(const std::vector<PcmIn>& items, int rate, int n_q, int slots) {
    if (slots < 1) throw Error(ErrorKind::Usage, "slots must be >= 1, not " + std::to_string(slots));
    for (size_t i = 0; i < items.size(); ++i) check_layout(int64_t(items[i].shape(1)), rate, "audio[" + std::to_string(i) + "]");
    struct Source {  // one item as its slot reads it: blocks of 64 Ki source frames, as model_rate_mono
      const float* pcm;
      int64_t T, C, f0 = 0;
      int src_rate;
      std::string what;
      app::StreamResampler rs;
      std::vector<float> mono, buf;
      size_t pos = 0;
      bool flushed = false;
      Source(const float* p, int64_t t, int64_t c, int rate, int model_rate, std::string w)
          : pcm(p), T(t), C(c), src_rate(rate), what(std::move(w)), rs(rate, model_rate) {}
      int64_t read(float* dst, int64_t n) {
        constexpr int64_t kBlock = int64_t(1) << 16;
        while (int64_t(buf.size() - pos) < n && !flushed) {
          buf.erase(buf.begin(), buf.begin() + int64_t(pos));
          pos = 0;
          if (f0 < T) {
            const int64_t k = std::min(kBlock, T - f0);
            mono.resize(size_t(k));
            app::downmix(pcm + f0 * C, k, int(C), -1, mono.data(), f0, src_rate, what);
            rs.process(mono.data(), size_t(k), buf);
            f0 += k;
          } else {
            rs.process(nullptr, 0, buf);
            flushed = true;
          }
        }
        const int64_t k = std::min<int64_t>(n, int64_t(buf.size() - pos));
        std::copy_n(buf.data() + pos, k, dst);
        pos += size_t(k);
        return k;
      }
    };
    std::vector<Codes> out(items.size());
    {
      nb::gil_scoped_release g;
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<std::unique_ptr<Source>> open(items.size());
      size_t next = 0;
      mimi::encode_batch(
          eng(), n_q, std::min<int>(slots, int(std::max<size_t>(items.size(), 1))),
          [&](PcmItem& item) {
            if (next == items.size()) return false;
            const size_t i = next++;
            open[i] = std::make_unique<Source>(items[i].data(), int64_t(items[i].shape(0)), int64_t(items[i].shape(1)),
                                               rate, cfg().sample_rate, "audio[" + std::to_string(i) + "]");
            item.id = i;
            item.read = [src = open[i].get()](float* dst, int64_t n) { return src->read(dst, n); };
            return true;
          },
          [&](const PcmItem& item, Codes&& c) {
            out[item.id] = std::move(c);
            open[item.id].reset();
          });
    }
    nb::list r;
    for (const Codes& c : out) r.append(codes_to_numpy(c));
    return r;
  }

  // pcm [frames, channels] interleaved at `rate`: downmixed and resampled exactly as a file of
  // those samples is (blocks of 64 Ki source frames, app::MonoSource), then encoded.
  std::tuple<nb::ndarray<nb::numpy, int64_t>, int64_t> encode_pcm(
      const nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>& pcm, int rate, int n_q,
      const std::string& what) {
    const int64_t T = int64_t(pcm.shape(0)), C = int64_t(pcm.shape(1));
    Codes codes;
    int64_t samples = 0;
    {
      nb::gil_scoped_release g;
      std::lock_guard<std::mutex> lock(mu_);
      const std::vector<float> mono = model_rate_mono(pcm.data(), T, C, rate, what);
      samples = int64_t(mono.size());
      codes = eng().encode(mono.data(), samples, n_q);
    }
    return {codes_to_numpy(codes), samples};
  }

  // Codes with the metadata their token file recorded (Tokens in Python: meta_to_json's fields, as
  // JSON text; "" for bare codes): held to the loaded model as a token file is (check_tokens: other
  // weights or config refused unless `allow_mismatch`).
  app::TokenFile token_file(const CodesIn& in, const std::string& meta_json) {
    app::TokenFile t;
    t.codes = codes_from_numpy(in);
    t.meta.sample_rate = cfg().sample_rate;
    t.meta.frame_rate = cfg().frame_rate;
    t.meta.codebook_size = cfg().bins;
    if (!meta_json.empty()) {
      const nlohmann::json j = nlohmann::json::parse(meta_json, nullptr, false);
      if (j.is_discarded()) throw Error(ErrorKind::Input, "tokens: meta is not a JSON object");
      app::meta_from_json(t.meta, j, "tokens: meta");
    }
    return t;
  }

  // Model-rate samples, frames * frame_size of them (the caller trims), and the sample count the
  // tokens' metadata records (-1: none).
  std::tuple<nb::ndarray<nb::numpy, float>, int64_t> decode_codes(const CodesIn& in, int n_q, const std::string& meta_json,
                                                                  bool allow_mismatch) {
    const app::TokenFile t = token_file(in, meta_json);
    std::vector<float> y;
    {
      nb::gil_scoped_release g;
      std::lock_guard<std::mutex> lock(mu_);
      if (!meta_json.empty()) (void)app::check_tokens(eng(), t, 0, 0, allow_mismatch, "tokens");
      eng().check_codes(t.codes, n_q < 1 ? t.codes.n_q : n_q);
      y = eng().decode(t.codes, n_q < 1 ? t.codes.n_q : n_q);
    }
    const size_t n = y.size();
    return {to_numpy(std::move(y), {n}), t.meta.original_samples.value_or(-1)};
  }

  // The CLI's own reader: the same codes as `mimi encode FILE` (app::encode_audio).
  std::tuple<nb::ndarray<nb::numpy, int64_t>, int64_t, int, int> encode_file(const nb::bytes& path, int n_q) {
    const std::string p = bytes_str(path);
    app::EncodedAudio a;
    {
      nb::gil_scoped_release g;
      std::lock_guard<std::mutex> lock(mu_);
      a = app::encode_audio(eng(), p, n_q, -1, true);
    }
    return {codes_to_numpy(a.codes), a.samples, a.source_rate, a.source_channels};
  }

  // A token file (path) or codes (with the model-rate length to trim to, -1: none) -> an audio
  // file through the CLI's writer (format by extension, 24 kHz s16 by default), as `mimi decode`.
  int64_t decode_to(app::TokenFile t, int n_q, const std::string& out, bool force, const std::string& sample_format,
                    const std::string& sample_rate, const std::string& what, bool allow_mismatch = false) {
    app::AudioOutSpec spec;
    spec.format = sample_format == "s24" ? app::SampleFormat::S24
                  : sample_format == "f32" ? app::SampleFormat::F32
                  : sample_format == "s16" ? app::SampleFormat::S16
                  : throw Error(ErrorKind::Usage, "sample_format: s16, s24 or f32, not " + sample_format);
    spec.sample_rate = sample_rate;
    nb::gil_scoped_release g;
    std::lock_guard<std::mutex> lock(mu_);
    const int use = app::check_tokens(eng(), t, std::max(n_q, 0), 0, allow_mismatch, what);
    return app::decode_to_file(eng(), t, use, spec, out, force, what, true).samples;
  }

  int64_t decode_file(const nb::bytes& src, const nb::bytes& out, int n_q, bool force, const std::string& fmt,
                      const std::string& rate, bool allow_mismatch, bool recover) {
    const std::string s = bytes_str(src), o = bytes_str(out);
    app::TokenFile t;
    {
      nb::gil_scoped_release g;
      t = app::read_token_input(s, recover);
      // the output is the token file itself (the same name, a symlink or a hard link to it): refused
      // even with force, as `mimi decode` refuses it (its set of protected inputs is per command)
      struct stat a{}, b{};
      if (::stat(s.c_str(), &a) == 0 && ::stat(o.c_str(), &b) == 0 && S_ISREG(b.st_mode) && a.st_dev == b.st_dev &&
          a.st_ino == b.st_ino)
        throw Error(ErrorKind::Output, o + ": is an input of this command; refusing to overwrite it");
    }
    return decode_to(std::move(t), n_q, o, force, fmt, rate, s, allow_mismatch);
  }

  int64_t decode_codes_to_file(const CodesIn& in, int64_t length, const nb::bytes& out, int n_q, bool force,
                               const std::string& fmt, const std::string& rate, const std::string& meta_json,
                               bool allow_mismatch) {
    app::TokenFile t = token_file(in, meta_json);
    if (length >= 0) t.meta.original_samples = length;
    return decode_to(std::move(t), n_q, bytes_str(out), force, fmt, rate, meta_json.empty() ? "codes" : "tokens",
                     allow_mismatch);
  }

  app::LoadedEngine le_;
  std::mutex mu_;
};

}  // namespace mimi::py
