// End-to-end tests of the mimi executable with the tiny reference weights: formats, pipes,
// batches, resampling, golden codes through the CLI, trimming, damaged files, errors and exit codes.
#include <doctest/doctest.h>
#include <sndfile.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <nlohmann/json.hpp>

#include "app/formats/audio_io.h"
#include "app/formats/mimi_container.h"
#include "app/formats/token_file.h"
#include "codec/error.h"
#include "support/cli.h"
#include "support/golden.h"

using namespace mimi;
using namespace mimi::test;
namespace fs = std::filesystem;

namespace {

std::vector<float> golden_input(const std::string& c) {
  const SafetensorsFile g = SafetensorsFile::open(data_dir() + "/tiny/cases/" + c + ".safetensors");
  const Tensor t = g.to_f32("input");
  return {t.data, t.data + t.size()};
}

app::TokenFile tokens(const fs::path& p) {
  const std::string s = slurp(p);
  const std::vector<uint8_t> b(s.begin(), s.end());
  return app::read_tokens(b, *app::format_from_extension(p.string()), p.string());
}

}  // namespace

TEST_CASE("cli: 24 kHz float input reproduces the golden codes exactly; decode trims to the original length") {
  Sandbox box;
  const std::vector<float> speech = golden_input("speech");
  write_wav(box / "speech.wav", speech, 24000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
  Run r = box.sh("mimi encode speech.wav -o speech.npy -q");
  REQUIRE(r.code == 0);
  const app::TokenFile t = tokens(box / "speech.npy");
  const SafetensorsFile g = SafetensorsFile::open(data_dir() + "/tiny/cases/speech.safetensors");
  CHECK(t.codes.data == g.to_i32("codes"));
  r = box.sh("mimi encode speech.wav && mimi decode speech.mimi -o speech.dec.wav --sample-format f32 && "
             "mimi decode speech.mimi -o full.wav --no-trim");
  REQUIRE(r.code == 0);
  CHECK(wav_info(box / "speech.dec.wav").frames == int64_t(speech.size()));  // 50783
  CHECK(wav_info(box / "full.wav").frames == 27 * 1920);
  CHECK((wav_info(box / "full.wav").format & SF_FORMAT_SUBMASK) == SF_FORMAT_PCM_16);
  // the decoded float samples are the engine's output, trimmed
  const std::vector<float> y = read_wav(box / "speech.dec.wav");
  const Tensor gout = g.to_f32("output");
  double worst = 0, mx = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    worst = std::max(worst, double(std::fabs(y[i] - gout.data[i])));
    mx = std::max(mx, double(std::fabs(gout.data[i])));
  }
  CHECK(worst <= 1e-4 * mx + 1e-5);
}

TEST_CASE("cli: every token format round-trips losslessly through convert") {
  Sandbox box;
  write_wav(box / "a.wav", tone(30000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode a.wav -q").code == 0);
  const app::TokenFile ref = tokens(box / "a.mimi");
  for (const char* ext : {"npy", "safetensors", "txt"}) {
    CAPTURE(ext);
    const std::string x = ext;
    REQUIRE(box.sh("mimi convert a.mimi -o a." + x + " -q && mimi convert a." + x + " -o back." + x + ".mimi -q").code == 0);
    CHECK(tokens(box / ("a." + x)).codes.data == ref.codes.data);
    CHECK(tokens(box / ("back." + x + ".mimi")).codes.data == ref.codes.data);
    // all formats decode to the same audio
    REQUIRE(box.sh("mimi decode a." + x + " -o a." + x + ".wav --no-trim -q").code == 0);
  }
  REQUIRE(box.sh("mimi decode a.mimi -o a.mimi.wav --no-trim -q").code == 0);
  const std::string w = slurp(box / "a.mimi.wav");
  CHECK(slurp(box / "a.npy.wav") == w);
  CHECK(slurp(box / "a.txt.wav") == w);
  CHECK(slurp(box / "a.safetensors.wav") == w);
  // the original length survives where the format can hold it
  CHECK(tokens(box / "back.safetensors.mimi").meta.original_samples == 30000);
  CHECK(!tokens(box / "back.npy.mimi").meta.original_samples.has_value());
  // text: one frame per line, n_q integers
  const std::string txt = slurp(box / "a.txt");
  CHECK(std::count(txt.begin(), txt.end(), '\n') == 16);
}

TEST_CASE("cli: stdin/stdout pipes") {
  Sandbox box;
  write_wav(box / "a.wav", tone(20000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  Run r = box.sh("cat a.wav | mimi encode - -o - | mimi decode - -o b.wav");
  REQUIRE(r.code == 0);
  CHECK(wav_info(box / "b.wav").frames == 20000);
  r = box.sh("mimi encode a.wav -o - --format text -q | head -n 2");
  CHECK(r.code == 0);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 2);
  r = box.sh("mimi encode a.wav -q && mimi decode a.mimi -o - | cat > c.wav");
  REQUIRE(r.code == 0);
  CHECK(wav_info(box / "c.wav").frames == 20000);
}

TEST_CASE("cli: directory batch, 44.1 kHz stereo input, one bad file does not stop the rest") {
  Sandbox box;
  write_wav(box / "s.wav", tone(44100 * 2, 2, 44100), 44100, 2, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  write_wav(box / "m.wav", tone(16000, 1, 16000), 16000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_24);
  { std::ofstream(box / "bad.wav") << "this is not audio"; }
  Run r = box.sh("mimi encode s.wav bad.wav m.wav -o out/ --json");
  CHECK(r.code == 3);  // unreadable input
  CHECK(r.err.find("bad.wav") != std::string::npos);
  CHECK(fs::exists(box / "out/s.mimi"));
  CHECK(fs::exists(box / "out/m.mimi"));
  CHECK(!fs::exists(box / "out/bad.mimi"));
  int ok = 0, failed = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["status"] == "ok") {
      ++ok;
      CHECK(j.contains("rtf"));
      CHECK(j.contains("compute_s"));
      CHECK(j.contains("load_s"));
    } else {
      ++failed;
    }
  }
  CHECK(ok == 2);
  CHECK(failed == 1);
  const app::TokenFile s = tokens(box / "out/s.mimi");
  CHECK(s.meta.source_sample_rate == 44100);
  CHECK(s.meta.source_channels == 2);
  CHECK(s.meta.original_samples == 48000);  // 2 s at 24 kHz
  CHECK(s.codes.frames == 25);
  // back to the source rate
  REQUIRE(box.sh("mimi decode out/s.mimi -o s44.wav --sample-rate source -q").code == 0);
  CHECK(wav_info(box / "s44.wav").rate == 44100);
  CHECK(wav_info(box / "s44.wav").frames == 88200);
  // each channel separately
  REQUIRE(box.sh("mimi encode s.wav --split-channels -o split/ -q").code == 0);
  CHECK(fs::exists(box / "split/s.ch0.mimi"));
  CHECK(fs::exists(box / "split/s.ch1.mimi"));
  CHECK(tokens(box / "split/s.ch1.mimi").meta.channel == 1);
  // roundtrip writes <stem>.roundtrip.wav beside the input
  REQUIRE(box.sh("mimi roundtrip m.wav -q").code == 0);
  CHECK(wav_info(box / "m.roundtrip.wav").frames == 24000);
}

TEST_CASE("cli: encode/decode --batch give every file its one-by-one bytes; a bad or empty file fails alone") {
  Sandbox box;
  write_wav(box / "s.wav", tone(44100 * 3 + 17, 2, 44100), 44100, 2, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  write_wav(box / "m.wav", tone(16000 / 5, 1, 16000), 16000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_24);
  write_wav(box / "l.wav", tone(24000 * 7 + 1, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
  write_wav(box / "e.wav", {}, 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  { std::ofstream(box / "bad.wav") << "this is not audio"; }
  REQUIRE(box.sh("mimi encode s.wav m.wav l.wav -o one/ -q").code == 0);
  REQUIRE(box.sh("mimi encode s.wav m.wav l.wav --split-channels -o one_split/ -q").code == 0);
  for (int slots : {1, 2, 5}) {
    CAPTURE(slots);
    const std::string dir = "b" + std::to_string(slots) + "/";
    Run r = box.sh("mimi encode --batch " + std::to_string(slots) + " s.wav bad.wav m.wav e.wav l.wav -o " + dir + " --json");
    CHECK(r.code == 3);  // the unreadable and the empty input
    CHECK(r.err.find("bad.wav") != std::string::npos);
    CHECK(r.err.find("e.wav: no audio samples") != std::string::npos);
    for (const char* f : {"s.mimi", "m.mimi", "l.mimi"}) {
      CAPTURE(f);
      REQUIRE(fs::exists(box / dir / f));
      CHECK(slurp(box / dir / f) == slurp(box / "one" / f));  // the same bytes, codes and header
    }
    CHECK(!fs::exists(box / dir / "bad.mimi"));
    CHECK(!fs::exists(box / dir / "e.mimi"));
    int ok = 0, failed = 0;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) (nlohmann::json::parse(line)["status"] == "ok" ? ok : failed)++;
    CHECK(ok == 3);
    CHECK(failed == 2);
  }
  REQUIRE(box.sh("mimi encode --batch 3 s.wav m.wav l.wav --split-channels -o b_split/ -q").code == 0);
  for (const char* f : {"s.ch0.mimi", "s.ch1.mimi", "m.ch0.mimi", "l.ch0.mimi"})
    CHECK(slurp(box / "b_split" / f) == slurp(box / "one_split" / f));
  CHECK(box.sh("mimi encode --batch 2 --stream s.wav").code == 2);
  // decode --batch: the same audio files as one by one, at the model rate and at the source rate
  for (const char* rate : {"", " --sample-rate source"}) {
    CAPTURE(rate);
    REQUIRE(box.sh(std::string("mimi decode one/s.mimi one/m.mimi one/l.mimi -o dec1/ -f -q") + rate).code == 0);
    REQUIRE(box.sh(std::string("mimi decode --batch 2 one/s.mimi one/m.mimi one/l.mimi -o dec2/ -f -q") + rate).code == 0);
    for (const char* f : {"s.wav", "m.wav", "l.wav"}) CHECK(slurp(box / "dec2" / f) == slurp(box / "dec1" / f));
  }
  // one plan per codebook count: files with another count than the first decode in a later pass,
  // each exactly as alone; only the bad file fails
  REQUIRE(box.sh("mimi encode m.wav --n-q 4 -o m4.mimi -q").code == 0);
  { std::ofstream(box / "junk.mimi") << "not tokens"; }
  Run r = box.sh("mimi decode --batch 2 one/s.mimi m4.mimi junk.mimi one/l.mimi -o dec3/");
  CHECK(r.code == 3);
  CHECK(r.err.find("junk.mimi") != std::string::npos);
  {
    std::istringstream err(r.err);
    for (std::string l; std::getline(err, l);)
      CHECK_MESSAGE((l.find("error") == std::string::npos || l.find("m4.mimi") == std::string::npos), l);
  }
  REQUIRE(box.sh("mimi decode one/s.mimi one/l.mimi -o alone/ -q && mimi decode m4.mimi -o m4_all.wav -q").code == 0);
  CHECK(slurp(box / "dec3/s.wav") == slurp(box / "alone/s.wav"));
  CHECK(slurp(box / "dec3/l.wav") == slurp(box / "alone/l.wav"));
  CHECK(slurp(box / "dec3/m4.wav") == slurp(box / "m4_all.wav"));
  REQUIRE(box.sh("mimi decode --batch 2 --n-q 4 one/s.mimi m4.mimi -o dec4/ -q").code == 0);
  REQUIRE(box.sh("mimi decode --n-q 4 m4.mimi -o m4_alone.wav -q").code == 0);
  CHECK(slurp(box / "dec4/m4.wav") == slurp(box / "m4_alone.wav"));
  // generated: random codebook counts (1..8) over files of random lengths, in random order, at
  // --batch 2..4: every file's audio is bitwise what it decodes to alone
  std::mt19937 rng(26);
  std::string all;
  for (int i = 0; i < 7; ++i) {
    const int q = 1 + int(rng() % 8);
    const std::string src = std::array<const char*, 3>{"s.wav", "m.wav", "l.wav"}[rng() % 3];
    const std::string name = "q" + std::to_string(i) + ".mimi";
    REQUIRE(box.sh("mimi encode " + src + " --n-q " + std::to_string(q) + " -o " + name + " -q").code == 0);
    REQUIRE(box.sh("mimi decode " + name + " -o alone_" + std::to_string(i) + ".wav -q").code == 0);
    all += " " + name;
  }
  for (int b = 2; b <= 4; ++b) {
    CAPTURE(b);
    const std::string dir = "mixed" + std::to_string(b) + "/";
    REQUIRE(box.sh("mimi decode --batch " + std::to_string(b) + all + " -o " + dir + " -q").code == 0);
    for (int i = 0; i < 7; ++i)
      CHECK(slurp(box / dir / ("q" + std::to_string(i) + ".wav")) == slurp(box / ("alone_" + std::to_string(i) + ".wav")));
  }
}

TEST_CASE("cli: damaged and truncated .mimi files are refused, and leave no output") {
  Sandbox box;
  write_wav(box / "a.wav", tone(40000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(box.sh("mimi encode a.wav -q").code == 0);
  const std::string good = slurp(box / "a.mimi");
  {
    std::string bad = good;
    bad[bad.size() - 40] ^= 0x10;  // inside the last chunk's payload
    std::ofstream(box / "corrupt.mimi", std::ios::binary) << bad;
    std::ofstream(box / "trunc.mimi", std::ios::binary) << good.substr(0, good.size() - 30);
  }
  Run r = box.sh("mimi decode corrupt.mimi");
  CHECK(r.code == 3);
  CHECK(r.err.find("CRC") != std::string::npos);
  CHECK(!fs::exists(box / "corrupt.wav"));
  r = box.sh("mimi decode trunc.mimi");
  CHECK(r.code == 3);
  CHECK(r.err.find("truncated") != std::string::npos);
  CHECK(!fs::exists(box / "trunc.wav"));
  r = box.sh("mimi info trunc.mimi");
  CHECK(r.code == 3);
  CHECK(r.out.find("\"complete\": false") != std::string::npos);
  // no temporary files left behind either
  for (const auto& e : fs::directory_iterator(box.dir)) CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
}

TEST_CASE("cli: exit codes for usage, weights, outputs and devices") {
  Sandbox box;
  write_wav(box / "a.wav", tone(5000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  Run r = box.sh("mimi encode a.wav --no-such-option");
  CHECK(r.code == 2);
  r = box.sh("mimi");
  CHECK(r.code == 2);
  r = box.sh("mimi encode a.wav --n-q 40");
  CHECK(r.code == 2);
  r = box.sh("unset MIMI_WEIGHTS; mimi encode a.wav");
  CHECK(r.code == 4);
  CHECK(r.err.find("scripts/download-weights.sh") != std::string::npos);
  CHECK(!fs::exists(box / "a.mimi"));
  r = box.sh("mimi encode a.wav --weights nowhere.safetensors");
  CHECK(r.code == 4);
  REQUIRE(box.sh("mimi encode a.wav -q").code == 0);
  r = box.sh("mimi encode a.wav");
  CHECK(r.code == 5);
  CHECK(r.err.find("--force") != std::string::npos);
  CHECK(box.sh("mimi encode a.wav -f -q").code == 0);
  r = box.sh("mimi encode a.wav -o x.mimi --device cuda:63");  // no machine has a 64th device
  CHECK(r.code == 6);
  CHECK(r.err.find("cuda") != std::string::npos);
  r = box.sh("mimi decode a.mimi --n-q 9 -o y.wav");  // the file's own problem: input, not usage
  CHECK(r.code == 3);
  r = box.sh("mimi encode a.wav a.wav -o single.mimi");
  CHECK(r.code == 2);
  // weights fingerprint: tokens made with other weights are refused unless forced
  REQUIRE(box.sh("mimi gen-weights --config tiny --dialect moshi --seed 2 -o other/w.safetensors -q").code == 0);
  r = box.sh("mimi decode a.mimi --weights other/w.safetensors -o z.wav");
  CHECK(r.code == 4);
  CHECK(r.err.find("other weights") != std::string::npos);
  CHECK(box.sh("mimi decode a.mimi --weights other/w.safetensors -o z.wav --allow-weights-mismatch -q").code == 0);
  // config fingerprint: the same tensors under another config made other codes. A generated
  // sweep, one field changed at a time, over each token format with metadata: refused as other weights are
  // (exit 4, or decoded with --allow-weights-mismatch); the same config decodes byte-identically.
  {
    const nlohmann::json base = nlohmann::json::parse(slurp(fs::path(box.weights).parent_path() / "config.json"));
    const std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>> changes = {
        {"sliding_window", [](nlohmann::json& c) { c["sliding_window"] = 3; }},
        {"rope_theta", [](nlohmann::json& c) { c["rope_theta"] = 7.0; c["rope_parameters"]["rope_theta"] = 7.0; }},
        {"norm_eps", [](nlohmann::json& c) { c["norm_eps"] = 1e-2; }},
        {"dilation_growth_rate", [](nlohmann::json& c) { c["dilation_growth_rate"] = 3; }},
    };
    auto weights_dir = [&](const std::string& d, const nlohmann::json& cfg) {
      fs::create_directories(box / d);
      fs::copy_file(box.weights, box / d / "model.safetensors");
      box.put(d + "/config.json", cfg.dump(1));
    };
    weights_dir("cfg-same", base);
    // (the formats with metadata: .npy and .txt hold bare codes, no weights fingerprint either)
    for (const char* fmt : {"mimi", "safetensors"}) {
      CAPTURE(fmt);
      const std::string tok = std::string("c.") + fmt;
      REQUIRE(box.sh("mimi encode a.wav -o " + tok + " --weights cfg-same -q").code == 0);
      REQUIRE(box.sh("mimi decode " + tok + " -o ref.wav -f -q").code == 0);
      Run same = box.sh("mimi decode " + tok + " --weights cfg-same -o same.wav -f");
      CHECK_MESSAGE(same.code == 0, same.err);
      CHECK(box.get("same.wav") == box.get("ref.wav"));
      for (const auto& [field, change] : changes) {
        CAPTURE(field);
        nlohmann::json cfg = base;
        change(cfg);
        const std::string d = "cfg-" + field;
        if (!fs::exists(box / d)) weights_dir(d, cfg);
        REQUIRE(box.sh("mimi encode a.wav -o " + d + ".mimi -f --weights " + d + " -q").code == 0);  // it loads
        r = box.sh("mimi decode " + tok + " --weights " + d + " -o z.wav -f");
        CHECK(r.code == 4);
        CHECK(r.err.find("another config") != std::string::npos);
        CHECK(box.sh("mimi decode " + tok + " --weights " + d + " -o z.wav -f --allow-weights-mismatch -q").code == 0);
      }
    }
  }
  r = box.sh("mimi --help");
  CHECK(r.code == 0);
  CHECK(r.out.find("Exit codes") != std::string::npos);
}

TEST_CASE("format: .mimi packs 11-bit codes, 10 s at n_q 8 is 1100 bit/s plus the header") {
  app::TokenFile t;
  t.codes.n_q = 8;
  t.codes.frames = 125;  // 10 s
  for (int i = 0; i < 8 * 125; ++i) t.codes.data.push_back((i * 7919) % 2048);
  t.meta.original_samples = 240000;
  t.meta.weights_fingerprint = "0123456789abcdef0123456789abcdef";
  t.meta.tool_version = "0.1.0";
  const std::vector<uint8_t> b = app::write_tokens(t, app::TokenFormat::Mimi);
  CHECK(app::crc32(reinterpret_cast<const uint8_t*>("123456789"), 9) == 0xCBF43926u);  // docs/FORMAT.md
  const uint32_t header = uint32_t(b[8]) | uint32_t(b[9]) << 8 | uint32_t(b[10]) << 16 | uint32_t(b[11]) << 24;
  const double payload_bits = 8.0 * double(b.size() - 12 - header - 4);
  CHECK(payload_bits / 10.0 == doctest::Approx(1100).epsilon(0.05));
  const app::TokenFile back = app::read_tokens(b, app::TokenFormat::Mimi, "mem");
  CHECK(back.codes.data == t.codes.data);
  CHECK(back.meta.original_samples == 240000);
  CHECK(back.meta.weights_fingerprint == t.meta.weights_fingerprint);
  // recover: a truncated file gives its whole chunks
  std::vector<uint8_t> cut(b.begin(), b.end() - 10);
  CHECK_THROWS_AS(app::read_tokens(cut, app::TokenFormat::Mimi, "cut"), Error);
  const app::TokenFile part = app::read_tokens(cut, app::TokenFormat::Mimi, "cut", true);
  CHECK(!part.complete);
  CHECK(part.codes.frames == 125);
}

TEST_CASE("cli: --stream in a real pipe gives the offline codes and audio") {
  Sandbox box;
  const std::vector<float> speech = golden_input("speech");
  write_wav(box / "speech.wav", speech, 24000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
  {
    std::ofstream raw(box / "speech.f32", std::ios::binary);
    raw.write(reinterpret_cast<const char*>(speech.data()), std::streamsize(speech.size() * 4));
  }
  Run r = box.sh("cat speech.wav | mimi encode --stream - -o - --format text > s.txt && mimi encode speech.wav -o o.txt -q");
  REQUIRE(r.code == 0);
  CHECK(slurp(box / "s.txt") == slurp(box / "o.txt"));
  r = box.sh("cat speech.f32 | mimi encode --stream - --raw-format f32le -o - > r.mimi");
  REQUIRE(r.code == 0);
  const app::TokenFile t = tokens(box / "r.mimi");
  const SafetensorsFile g = SafetensorsFile::open(data_dir() + "/tiny/cases/speech.safetensors");
  CHECK(t.codes.data == g.to_i32("codes"));
  CHECK(t.meta.original_samples == int64_t(speech.size()));
  // decode --stream: whole frames, frame by frame; equal to the offline decode of the same codes
  r = box.sh("cat r.mimi | mimi decode --stream - -o - --sample-format f32 > s.wav && "
             "mimi decode r.mimi -o o.wav --no-trim --sample-format f32 -q");
  REQUIRE(r.code == 0);
  CHECK(wav_info(box / "s.wav").frames == 27 * 1920);
  const auto a = read_wav(box / "s.wav"), b = read_wav(box / "o.wav");
  REQUIRE(a.size() == b.size());
  double worst = 0, mx = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, double(std::fabs(a[i] - b[i])));
    mx = std::max(mx, double(std::fabs(b[i])));
  }
  CHECK(worst <= 1e-4 * mx + 1e-5);
  // a truncated stream is an input error
  r = box.sh("head -c 200 r.mimi | mimi decode --stream - -o - > /dev/null");
  CHECK(r.code == 3);
}

TEST_CASE("audio writer: WAV that may pass 4 GiB is RF64, others plain PCM WAV; a stream header gives exact sizes") {
  Sandbox sb("writer");
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * std::sin(0.01f * float(i));
  auto write = [&](const std::string& path, int64_t expected, int64_t max_samples) {
    app::AudioWriter w(path, 24000, app::SampleFormat::S16, false, expected, max_samples);
    w.write(x.data(), int64_t(x.size()));
    return w.finish();
  };
  write((sb / "small.wav").string(), 1000, 1000);
  write((sb / "big.wav").string(), -1, int64_t(3) << 30);  // 6 GiB of s16 at most: RF64 from the start
  const std::string small = slurp(sb / "small.wav"), big = slurp(sb / "big.wav");
  CHECK(small.substr(0, 4) == "RIFF");
  CHECK(small.size() == 44 + 2000);
  CHECK(big.substr(0, 4) == "RF64");
  for (const char* name : {"small.wav", "big.wav"}) {
    SF_INFO info{};
    SNDFILE* f = sf_open((sb / name).c_str(), SFM_READ, &info);
    REQUIRE(f != nullptr);
    CHECK(info.frames == 1000);
    sf_close(f);
  }
  // A FIFO-like target (here /dev/null) is written in place, with no temporary and no --force.
  CHECK(write("/dev/null", 1000, 1000) == 44 + 2000);
}
