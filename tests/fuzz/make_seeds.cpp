// Writes the committed seed corpora (tests/fuzz/seeds/<target>/): small valid inputs of every
// kind each target reads. Run by `scripts/fuzz.sh --make-seeds` (the config seeds are copied
// from tests/data by the script). Deterministic: same files every run.
#include <sndfile.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/formats/mimi_container.h"
#include "app/formats/token_file.h"
#include "codec/prng_weights.h"
#include "tests/fuzz/fuzz_micro.h"
#include "tests/fuzz/fuzz_support.h"

using namespace mimi;
namespace fs = std::filesystem;

namespace {

fs::path root;

void put(const std::string& target, const std::string& name, const std::vector<uint8_t>& bytes,
         const std::vector<uint8_t>& prefix = {}) {
  const fs::path dir = root / target;
  fs::create_directories(dir);
  std::ofstream f(dir / name, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(prefix.data()), std::streamsize(prefix.size()));
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + (dir / name).string());
}

std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<float> tone(int64_t n, int channels, double hz, int rate) {
  std::vector<float> v(size_t(n * channels));
  for (int64_t i = 0; i < n; ++i)
    for (int c = 0; c < channels; ++c)
      v[size_t(i * channels + c)] = float(0.4 * std::sin(2 * M_PI * hz * double(i) / rate + c));
  return v;
}

// An audio file written by libsndfile (to a temporary path, then read back as bytes).
std::vector<uint8_t> audio(int format, int rate, int channels, int64_t frames) {
  const fs::path tmp = fs::temp_directory_path() / ("mimi-seed-" + std::to_string(::getpid()));
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = format;
  SNDFILE* f = sf_open(tmp.c_str(), SFM_WRITE, &info);
  if (!f) throw std::runtime_error(std::string("sndfile: ") + sf_strerror(nullptr));
  const std::vector<float> v = tone(frames, channels, 440.0, rate);
  sf_writef_float(f, v.data(), frames);
  sf_close(f);
  std::vector<uint8_t> b = read_file(tmp);
  fs::remove(tmp);
  return b;
}

// float -> IEEE half, round to nearest even (clang 14 has no _Float16 on x86).
uint16_t to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000, e8 = (x >> 23) & 0xff;
  uint32_t mant = x & 0x7fffff;
  const int32_t exp = int32_t(e8) - 127 + 15;
  if (e8 == 0xff) return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  int shift = 13;
  uint32_t base = uint32_t(exp) << 10;
  if (exp <= 0) {  // subnormal half
    if (exp < -10) return uint16_t(sign);
    mant |= 0x800000;
    shift = 14 - exp;
    base = 0;
  }
  uint32_t h = base | (mant >> shift);
  const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1))) ++h;
  return uint16_t(sign | h);
}

std::vector<uint16_t> to_half(const std::vector<float>& v, bool bf16) {
  std::vector<uint16_t> out;
  for (float x : v) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if (bf16) {
      out.push_back(uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16));
    } else {
      out.push_back(to_f16(x));
    }
  }
  return out;
}

void weights_seeds() {
  const GeneratedWeights w = generate_prng_weights(fuzz::micro_config(), 1);
  put("safetensors_weights", "micro.moshi.safetensors", prng_weights_file(w, Dialect::Moshi, {{"seed", "1"}}));
  put("safetensors_weights", "micro.hf.safetensors", prng_weights_file(w, Dialect::HuggingFace));
  for (bool bf16 : {false, true}) {
    std::vector<std::vector<uint16_t>> half;
    std::vector<TensorToWrite> t;
    for (size_t i = 0; i < w.specs.size(); ++i) half.push_back(to_half(w.values[i], bf16));
    for (size_t i = 0; i < w.specs.size(); ++i)
      t.push_back({w.specs[i].name, bf16 ? DType::BF16 : DType::F16, w.specs[i].shape, half[i].data()});
    put("safetensors_weights", bf16 ? "micro.moshi.bf16.safetensors" : "micro.moshi.f16.safetensors",
        safetensors_bytes(t));
  }
  static const double f64[3] = {1.0, -2.5, 1e-3};
  static const int64_t i64[2] = {7, -1};
  put("safetensors_weights", "misc.safetensors",
      safetensors_bytes({{"encoder.model.0.conv.conv.weight", DType::F64, {1, 1, 3}, f64},
                         {"n", DType::I64, {2}, i64},
                         {"empty", DType::F32, {0, 4}, f64}},
                        {{"format", "pt"}}));
}

app::TokenFile encoded(Engine& eng, int n_q, int64_t samples, bool with_meta) {
  const std::vector<float> pcm = tone(samples, 1, 220.0, eng.config().sample_rate);
  app::TokenFile t;
  t.codes = eng.encode(pcm.data(), samples, n_q);
  t.meta.codebook_size = eng.config().bins;
  if (with_meta) {
    t.meta.original_samples = samples;
    t.meta.source_sample_rate = 44100;
    t.meta.source_channels = 2;
    t.meta.channel = 1;
    t.meta.weights_fingerprint = eng.model().fingerprint;
    t.meta.tool_version = "seed";
  }
  return t;
}

void token_seeds() {
  Engine& tiny = fuzz::tiny_engine();
  const app::TokenFile a = encoded(tiny, 8, 3 * 1920 - 100, true), b = encoded(tiny, 2, 1920, false);
  using app::TokenFormat;
  put("safetensors_tokens", "t8x3.safetensors", app::write_tokens(a, TokenFormat::Safetensors));
  put("safetensors_tokens", "t2x1.safetensors", app::write_tokens(b, TokenFormat::Safetensors));
  put("npy", "t8x3.npy", app::write_tokens(a, TokenFormat::Npy));
  put("npy", "t2x1.npy", app::write_tokens(b, TokenFormat::Npy));
  put("text", "t8x3.txt", app::write_tokens(a, TokenFormat::Text));
  put("text", "t2x1.txt", app::write_tokens(b, TokenFormat::Text));
  put("text", "comments.txt", {'#', ' ', 'x', '\n', '1', ' ', '2', '\r', '\n', '\n', '3', '\t', '4'});
  std::vector<uint8_t> m = app::write_tokens(a, TokenFormat::Mimi);
  put("mimi", "t8x3.repair.mimi", m, {1});
  put("mimi", "t8x3.raw.mimi", m, {0});
  put("mimi", "t2x1.repair.mimi", app::write_tokens(b, TokenFormat::Mimi), {1});
  m.resize(m.size() - 30);  // truncated: no end record, part of the last chunk
  put("mimi", "truncated.repair.mimi", m, {1});
  // stream decode (the streaming micro model): .mimi written frame by frame as `encode --stream`
  // does, and text lines
  Engine& micro = fuzz::micro_stream_engine();
  const int64_t mfs = micro.config().frame_size();
  const app::TokenFile sa = encoded(micro, 8, 3 * mfs - 3, true), sb = encoded(micro, 2, mfs, false);
  nlohmann::json h = app::meta_to_json(sa.meta);
  h["format"] = "mimi-codes";
  h["n_q"] = sa.codes.n_q;
  std::vector<uint8_t> s;
  app::MimiWriter w(s, h);
  for (int64_t f = 0; f < sa.codes.frames; ++f) {
    std::vector<int32_t> col;
    for (int k = 0; k < sa.codes.n_q; ++k) col.push_back(sa.codes.data[size_t(k * sa.codes.frames + f)]);
    w.append_chunk(col.data(), 1);
  }
  w.finish(-1);
  put("stream_decode", "t8x3.wav.mimi", s, {0x40 | 0x80});
  put("stream_decode", "t8x3.f32le.n2.mimi", s, {0x40 | 0x80 | 2 | (2 << 3)});
  put("stream_decode", "t2x1.s16le.txt", app::write_tokens(sb, TokenFormat::Text), {1});
}

void audio_seeds() {
  put("audio", "s16.wav", audio(SF_FORMAT_WAV | SF_FORMAT_PCM_16, 24000, 1, 1000));
  put("audio", "f32.wav", audio(SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, 500));
  put("audio", "s24.extensible.wav", audio(SF_FORMAT_WAVEX | SF_FORMAT_PCM_24, 48000, 2, 400));
  put("audio", "stereo.u8.wav", audio(SF_FORMAT_WAV | SF_FORMAT_PCM_U8, 8000, 2, 800));
  put("audio", "s16.flac", audio(SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 24000, 1, 1000));
  put("audio", "vorbis.ogg", audio(SF_FORMAT_OGG | SF_FORMAT_VORBIS, 22050, 1, 1000));
  put("audio", "s16.aiff", audio(SF_FORMAT_AIFF | SF_FORMAT_PCM_16, 44100, 1, 1000));
  // stream encode (micro model at 1 kHz, whatever rate comes in), each under fuzz.sh's 4 KB:
  // WAV with a header (option byte 0), and raw PCM
  put("stream_encode", "s16.8k.wav", audio(SF_FORMAT_WAV | SF_FORMAT_PCM_16, 8000, 1, 1500), {0x00 | (7 << 4), 0});
  put("stream_encode", "f32.16k.text.wav", audio(SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, 700), {0x08 | 0x80, 0});
  put("stream_encode", "s24.ext.stereo.wav", audio(SF_FORMAT_WAVEX | SF_FORMAT_PCM_24, 48000, 2, 500), {0x10, 0});
  std::vector<uint8_t> raw;
  for (float x : tone(800, 2, 300.0, 8000)) {
    const int16_t v = int16_t(std::lrint(x * 32767));
    raw.push_back(uint8_t(v & 0xff));
    raw.push_back(uint8_t((v >> 8) & 0xff));
  }
  put("stream_encode", "raw.s16le.8k.stereo", raw, {4 | (3 << 4), 1 | (1 << 3)});
  std::vector<uint8_t> rawf;
  for (float x : tone(800, 1, 50.0, 1000)) {
    uint8_t b[4];
    std::memcpy(b, &x, 4);
    rawf.insert(rawf.end(), b, b + 4);
  }
  put("stream_encode", "raw.f32le.1k", rawf, {7, 6});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR (tests/fuzz/seeds)\n");
    return 2;
  }
  root = argv[1];
  weights_seeds();
  token_seeds();
  audio_seeds();
  nlohmann::json micro = fuzz::micro_config().to_json();
  const std::string s = micro.dump(1);
  put("config", "micro.hf.json", {s.begin(), s.end()});
  return 0;
}
