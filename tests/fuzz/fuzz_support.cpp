#include "tests/fuzz/fuzz_support.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "app/formats/audio_io.h"
#include "app/formats/mimi_container.h"
#include "codec/prng_weights.h"
#include "codec/weights.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_micro.h"

namespace mimi::fuzz {

namespace {

Engine* engine_for(const Config& cfg, const char* name) {
  const GeneratedWeights w = generate_prng_weights(cfg, 1);
  auto bytes = std::make_shared<const std::vector<uint8_t>>(prng_weights_file(w, Dialect::Moshi));
  auto model = load_model(SafetensorsFile::from_bytes(bytes, name), w.cfg);
  EngineOptions o;
  o.threads = 1;
  // Small chunks: longer token files go through several chunks (the path `mimi decode` takes
  // for anything over 64 frames), and the few plans (chunk x n_q) stay cached, where one plan
  // per token-file length would be rebuilt for most inputs.
  o.with_chunk_frames(8);
  o.plan_cache_capacity = 128;  // every (direction, chunk, n_q) the harnesses reach
  return new Engine(model, o);  // never freed: lives as long as the process
}

}  // namespace

Engine& tiny_engine() {
  static Engine* engine = engine_for(test_config("tiny"), "tiny");
  return *engine;
}

Engine& micro_stream_engine() {
  static Engine* engine = engine_for(micro_stream_config(), "micro-stream");
  return *engine;
}

void check_token_file(const app::TokenFile& t) {
  MIMI_FUZZ_CHECK(t.codes.n_q >= 1, "reader returned n_q " + std::to_string(t.codes.n_q));
  MIMI_FUZZ_CHECK(t.codes.frames >= 0, "reader returned frames " + std::to_string(t.codes.frames));
  MIMI_FUZZ_CHECK(t.codes.frames >= 1 || !t.complete, "a complete token file without frames");
  MIMI_FUZZ_CHECK(t.codes.data.size() == size_t(t.codes.n_q) * size_t(t.codes.frames), "codes size != n_q x frames");
  MIMI_FUZZ_CHECK(t.meta.codebook_size >= 1, "codebook_size " + std::to_string(t.meta.codebook_size));
  for (int32_t c : t.codes.data) MIMI_FUZZ_CHECK(c >= 0 && c < t.meta.codebook_size, "code out of range");
}

bool decode_like_cli(const app::TokenFile& t) {
  Engine& eng = tiny_engine();
  const Config& c = eng.config();
  return refused_cleanly([&] {
    // app/cli/commands.cpp check_tokens, with --allow-weights-mismatch
    if (t.codes.frames < 1) throw Error(ErrorKind::Input, "no complete frames to decode");
    if (t.meta.codebook_size != c.bins && !t.meta.weights_fingerprint.empty())
      throw Error(ErrorKind::Input, "codebook size does not match the model");
    if (t.meta.sample_rate != c.sample_rate) throw Error(ErrorKind::Input, "sample rate does not match the model");
    const int n_q = t.codes.n_q;
    if (t.codes.n_q > c.n_q) throw Error(ErrorKind::Input, "more codebooks than the model");
    // decode_to_file, once at the model rate and once at `--sample-rate source` when recorded
    struct Out {
      std::unique_ptr<app::StreamResampler> rs;
      int64_t remaining = INT64_MAX;
      std::vector<float> tmp;
    };
    std::vector<Out> outs;
    std::vector<int> rates = {c.sample_rate};
    if (t.meta.source_sample_rate && *t.meta.source_sample_rate != c.sample_rate)
      rates.push_back(*t.meta.source_sample_rate);
    for (int rate : rates) {
      Out o;
      o.rs = std::make_unique<app::StreamResampler>(c.sample_rate, rate);
      if (t.meta.original_samples) o.remaining = *t.meta.original_samples;
      outs.push_back(std::move(o));
    }
    int64_t decoded = 0;
    eng.decode_chunks(t.codes, n_q, [&](const float* y, int64_t n) {
      decoded += n;
      for (int64_t i = 0; i < n; ++i) MIMI_FUZZ_CHECK(std::isfinite(y[i]), "decoded a non-finite sample");
      for (Out& o : outs) {
        const int64_t take = std::min(n, o.remaining);
        o.remaining -= take;
        o.tmp.clear();
        o.rs->process(y, size_t(take), o.tmp);
      }
    });
    MIMI_FUZZ_CHECK(decoded == t.codes.frames * c.frame_size(), "decoded length");
    for (Out& o : outs) {
      o.tmp.clear();
      o.rs->process(nullptr, 0, o.tmp);
    }
  });
}

void repair_mimi_crcs(std::vector<uint8_t>& b) {
  auto u32 = [&](size_t at) {
    return uint32_t(b[at]) | uint32_t(b[at + 1]) << 8 | uint32_t(b[at + 2]) << 16 | uint32_t(b[at + 3]) << 24;
  };
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + size_t(i)] = uint8_t(v >> (8 * i));
  };
  if (b.size() < 12) return;
  const uint64_t hlen = u32(8);
  if (12 + hlen + 4 > b.size()) return;
  put32(12 + hlen, app::crc32(b.data() + 12, hlen));
  const nlohmann::json h = nlohmann::json::parse(b.begin() + 12, b.begin() + 12 + long(hlen), nullptr, false);
  if (!h.is_object() || !h.contains("n_q") || !h["n_q"].is_number_integer() || !h.contains("codebook_size") ||
      !h["codebook_size"].is_number_integer())
    return;
  const int64_t n_q = h["n_q"].get<int64_t>(), cb = h["codebook_size"].get<int64_t>();
  if (n_q < 1 || n_q > 1024 || cb < 1 || cb > INT32_MAX) return;
  const uint64_t bits = uint64_t(app::bits_for(int(cb)));
  size_t pos = 12 + hlen + 4;
  while (b.size() - pos >= 4) {
    if (std::equal(b.begin() + long(pos), b.begin() + long(pos) + 4, "END!")) {
      if (b.size() - pos >= 24) put32(pos + 20, app::crc32(b.data() + pos + 4, 16));
      return;
    }
    if (!std::equal(b.begin() + long(pos), b.begin() + long(pos) + 4, "FRMS") || b.size() - pos < 8) return;
    const uint64_t payload = (uint64_t(u32(pos + 4)) * uint64_t(n_q) * bits + 7) / 8;
    if (b.size() - pos < 8 + payload + 4) return;
    put32(pos + 8 + payload, app::crc32(b.data() + pos + 4, 4 + payload));
    pos += 8 + payload + 4;
  }
}

namespace {

// `mimi convert` is lossless: every writer's output reads back to the same codes (and, for the
// two formats with a header, the same metadata).
void check_roundtrip(const app::TokenFile& t) {
  if (!t.complete || t.codes.frames < 1) return;
  const int32_t max_code = *std::max_element(t.codes.data.begin(), t.codes.data.end());
  for (auto f : {app::TokenFormat::Mimi, app::TokenFormat::Npy, app::TokenFormat::Safetensors, app::TokenFormat::Text}) {
    const bool has_meta = f == app::TokenFormat::Mimi || f == app::TokenFormat::Safetensors;
    if (!has_meta && max_code >= app::TokenMeta{}.codebook_size) continue;  // the default codebook size refuses them
    const std::vector<uint8_t> bytes = app::write_tokens(t, f);
    app::TokenFile back;
    try {
      back = app::read_tokens(bytes, f, "roundtrip", false);
    } catch (const Error& e) {
      finding(std::string("written ") + app::format_name(f) + " does not read back: " + e.what());
    }
    MIMI_FUZZ_CHECK(back.codes.n_q == t.codes.n_q && back.codes.frames == t.codes.frames &&
                        back.codes.data == t.codes.data,
                    std::string("codes changed through ") + app::format_name(f));
    if (has_meta)
      MIMI_FUZZ_CHECK(app::meta_to_json(back.meta) == app::meta_to_json(t.meta),
                      std::string("metadata changed through ") + app::format_name(f) + ": " +
                          app::meta_to_json(t.meta).dump() + " -> " + app::meta_to_json(back.meta).dump());
  }
}

}  // namespace

void fuzz_token_format(const uint8_t* data, size_t size, app::TokenFormat f) {
  const std::vector<uint8_t> bytes(data, data + size);
  for (bool recover : {false, true}) {
    if (recover && f != app::TokenFormat::Mimi) break;  // only .mimi has a recovery mode
    app::TokenFile t;
    if (!refused_cleanly([&] { t = app::read_tokens(bytes, f, "fuzz", recover); })) continue;
    check_token_file(t);
    if (int64_t(t.codes.n_q) * t.codes.frames > kMaxDecodeCodes || t.codes.frames > kMaxDecodeFrames) continue;
    check_roundtrip(t);
    decode_like_cli(t);
    if (t.complete) break;  // --recover reads a complete file the same way
  }
}

}  // namespace mimi::fuzz
