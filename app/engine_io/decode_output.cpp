// Token files -> audio files (app/engine_io/decode_output.h).
#include "app/engine_io/decode_output.h"
#include "app/sys/progress.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>

#include "app/sys/file_io.h"

#include "codec/error.h"

namespace mimi::app {

// Refuses, from its first bytes, an input that cannot be a token file of the format its name (or
// failing that, its content) says: /dev/zero or a WAV given to decode fails at once.
void check_token_prefix(std::optional<TokenFormat> declared, const uint8_t* p, size_t n, const std::string& what) {
  const std::vector<uint8_t> head(p, p + std::min<size_t>(n, 64));
  const std::optional<TokenFormat> sniffed = sniff_format(head);
  if (!declared) {
    if (!sniffed) throw Error(ErrorKind::Input, what + ": not a token file (.mimi, .npy, .safetensors or text codes)");
    return;
  }
  if (*declared == TokenFormat::Text) {
    if (n >= 2 && ((p[0] == 0xFF && p[1] == 0xFE) || (p[0] == 0xFE && p[1] == 0xFF)))
      throw Error(ErrorKind::Input, what + ": UTF-16 text; text token files are ASCII or UTF-8 (convert it: "
                                           "iconv -f UTF-16 -t UTF-8)");
    if (n > 0 && std::memchr(p, 0, n)) throw Error(ErrorKind::Input, what + ": binary data, not a text token file");
  } else if (sniffed != declared) {
    throw Error(ErrorKind::Input, what + ": not a " + std::string(format_name(*declared)) + " token file (wrong magic bytes)");
  }
}

TokenFile read_token_input(const std::string& path, bool recover) {
  const std::string what = path == "-" ? "stdin" : path;
  const std::optional<TokenFormat> declared = path == "-" ? std::nullopt : format_from_extension(path);
  const std::vector<uint8_t> bytes =
      read_input(path, [&](const uint8_t* p, size_t n) { check_token_prefix(declared, p, n, what); });
  const std::optional<TokenFormat> f = declared ? declared : sniff_format(bytes);
  if (!f) throw Error(ErrorKind::Input, what + ": unknown token file format (use .mimi, .npy, .safetensors or .txt)");
  if (recover && (*f == TokenFormat::Npy || *f == TokenFormat::Safetensors))  // said, never silently ignored
    spdlog::warn("{}: --recover does nothing for a {} file (one whole array: there is no good prefix to keep); "
                 "read as it is", what, format_name(*f));
  TokenFile t = read_tokens(bytes, *f, what, recover);
  if (!t.complete) spdlog::warn("{}: {}; using the {} good frames", what, t.damage, t.codes.frames);
  return t;
}

// Checks tokens against the loaded model; returns the codebooks to decode with.
int check_tokens(Engine& eng, const TokenFile& t, int n_q_flag, int n_q_default, bool allow_mismatch,
                 const std::string& what) {
  const Config& c = eng.config();
  if (t.codes.frames < 1) throw Error(ErrorKind::Input, what + ": no complete frames to decode");
  if (t.meta.codebook_size != c.bins && !t.meta.weights_fingerprint.empty())
    throw Error(ErrorKind::Input, what + ": codebook size " + std::to_string(t.meta.codebook_size) +
                                      " does not match the model's " + std::to_string(c.bins));
  if (t.meta.sample_rate != c.sample_rate)
    throw Error(ErrorKind::Input, what + ": made for " + std::to_string(t.meta.sample_rate) + " Hz, the model runs at " +
                                      std::to_string(c.sample_rate));
  // Every header field the decode depends on is checked, not only the sample rate: a frame rate
  // or a sample count that cannot be this model's decoded at 12.5 Hz or trimmed the audio away.
  if (std::fabs(t.meta.frame_rate - c.frame_rate) > 1e-9 * c.frame_rate)
    throw Error(ErrorKind::Input, what + ": made at " + fmt::format("{}", t.meta.frame_rate) +
                                      " frames/s, the model runs at " + fmt::format("{}", c.frame_rate));
  // an encode of N samples gives ceil(N / frame_size) frames; a whole file that says otherwise was edited
  if (t.complete && t.meta.original_samples &&
      (*t.meta.original_samples < 1 ||
       (*t.meta.original_samples + c.frame_size() - 1) / c.frame_size() != t.codes.frames))
    throw Error(ErrorKind::Input, what + ": its header says " + std::to_string(*t.meta.original_samples) +
                                      " samples, which " + std::to_string(t.codes.frames) +
                                      " frames cannot hold (ceil(samples / " + std::to_string(c.frame_size()) +
                                      ") frames): an edited or damaged header");
  if (allow_mismatch && t.meta.weights_fingerprint.empty() && t.meta.config_fingerprint.empty())
    spdlog::warn("{}: --allow-weights-mismatch does nothing here: the token file records no weights to compare "
                 "(.npy, .txt)", what);
  if (!t.meta.weights_fingerprint.empty() && t.meta.weights_fingerprint != eng.model().fingerprint) {
    if (!allow_mismatch)
      throw Error(ErrorKind::Weights, what + ": made with other weights (fingerprint " + t.meta.weights_fingerprint +
                                          ", loaded " + eng.model().fingerprint +
                                          "); pass --allow-weights-mismatch to decode anyway");
    spdlog::warn("{}: made with other weights (fingerprint {}), decoding anyway", what, t.meta.weights_fingerprint);
  }
  // The weights fingerprint covers the tensors alone: the same tensors under another config
  // (sliding_window, rope_theta, ...) made other codes. Files without one (older): no check.
  const std::string cfp = eng.model().config_fingerprint();
  if (!t.meta.config_fingerprint.empty() && t.meta.config_fingerprint != cfp) {
    if (!allow_mismatch)
      throw Error(ErrorKind::Weights, what + ": made with another config (config fingerprint " +
                                          t.meta.config_fingerprint + ", loaded " + cfp +
                                          "); pass --allow-weights-mismatch to decode anyway");
    spdlog::warn("{}: made with another config (config fingerprint {}), decoding anyway", what, t.meta.config_fingerprint);
  }
  const int n_q = n_q_flag > 0 ? n_q_flag : std::min(n_q_default > 0 ? n_q_default : t.codes.n_q, t.codes.n_q);
  if (n_q > t.codes.n_q)
    // a property of this file (others in the batch may hold enough): its own error, not a usage error
    throw Error(ErrorKind::Input, what + ": --n-q " + std::to_string(n_q) + " but the file holds " +
                                      std::to_string(t.codes.n_q) + " codebooks");
  if (t.codes.n_q > c.n_q)
    throw Error(ErrorKind::Input, what + ": " + std::to_string(t.codes.n_q) + " codebooks, the model has " +
                                      std::to_string(c.n_q));
  for (size_t i = 0; i < t.codes.data.size(); ++i)
    if (t.codes.data[i] < 0 || t.codes.data[i] >= c.bins)
      throw Error(ErrorKind::Input, what + ": code " + std::to_string(t.codes.data[i]) + " (codebook " +
                                        std::to_string(i / size_t(t.codes.frames)) + ", frame " +
                                        std::to_string(i % size_t(t.codes.frames)) + ") is outside the model's [0, " +
                                        std::to_string(c.bins) + ")");
  return n_q;
}

int output_rate(const Config& c, const TokenFile& t, const std::string& flag, const std::string& what) {
  return output_rate(c.sample_rate, t.meta.source_sample_rate, flag, what);
}

DecodedAudioWriter::DecodedAudioWriter(const Config& c, const TokenFile& t, const AudioOutSpec& o,
                                       const std::string& path, bool force, const std::string& what, bool quiet)
    : r_{0, output_rate(c, t, o.sample_rate, what), 0, 0},
      // the exact length is known when no resampling happens
      w_(path, r_.rate, o.format, force,
         r_.rate == c.sample_rate ? (!o.no_trim && t.meta.original_samples
                                         ? std::min(t.codes.frames * c.frame_size(), *t.meta.original_samples)
                                         : t.codes.frames * c.frame_size())
                                  : -1,
         int64_t(double(t.codes.frames) * c.frame_size() * r_.rate / c.sample_rate) + r_.rate),
      rs_(c.sample_rate, r_.rate),
      remaining_(!o.no_trim && t.meta.original_samples ? *t.meta.original_samples : INT64_MAX),
      bar_(what, t.codes.frames * c.frame_size(), double(t.codes.frames * c.frame_size()) / c.sample_rate, !quiet) {
  if (o.no_trim && !t.meta.original_samples)  // said, never silently ignored (as --recover is)
    spdlog::warn("{}: --no-trim does nothing here: the token file records no original length (.npy, .txt), so "
                 "nothing is trimmed anyway", what);
}

void DecodedAudioWriter::write(const float* y, int64_t n) {
  bar_.update(done_ += n);
  const int64_t take = std::min(n, remaining_);
  remaining_ -= take;
  tmp_.clear();
  rs_.process(y, size_t(take), tmp_);
  w_.write(tmp_.data(), int64_t(tmp_.size()));
  r_.samples += int64_t(tmp_.size());
}

DecodeResult DecodedAudioWriter::finish() {
  bar_.finish();
  tmp_.clear();
  rs_.process(nullptr, 0, tmp_);
  w_.write(tmp_.data(), int64_t(tmp_.size()));
  r_.samples += int64_t(tmp_.size());
  r_.bytes = w_.finish();
  return r_;
}

DecodeResult decode_to_file(Engine& eng, const TokenFile& t, int n_q, const AudioOutSpec& spec, const std::string& path,
                            bool force, const std::string& what, bool quiet) {
  DecodedAudioWriter out(eng.config(), t, spec, path, force, what, quiet);
  double busy = 0;  // in the writer, not the engine
  const double t0 = monotonic_seconds();
  eng.decode_chunks(t.codes, n_q, [&](const float* y, int64_t n) {
    const double w0 = monotonic_seconds();
    out.write(y, n);
    busy += monotonic_seconds() - w0;
  });
  const double compute = monotonic_seconds() - t0 - busy;
  DecodeResult r = out.finish();
  r.compute = compute;
  return r;
}

}  // namespace mimi::app
