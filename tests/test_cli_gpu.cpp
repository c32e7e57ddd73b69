// The mimi executable on `--device cuda` (or hip): whatever GPU this build has, the emulated one of
// a MIMI_GPU_EMULATE build included. Golden codes and audio through the CLI with the tiny weights,
// pipes and batches on the device, the device named in `mimi info` and --verbose, and a missing
// device index refused. Without a device it says so and exits 77 (ctest: skipped).
#include <doctest/doctest.h>
#include <sndfile.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "app/formats/token_file.h"
#include "support/cli.h"
#include "support/golden.h"

using namespace mimi;
using namespace mimi::test;

namespace {

struct GpuDevice {
  std::string id;  // "cuda" or "hip"
  bool emulated = false;
};

// The first GPU `mimi info` lists, or exit 77.
GpuDevice gpu_or_skip() {
  Sandbox box("cli-gpu");
  const Run r = box.sh("mimi info --json");
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const auto& d : j.at("devices")) {
    const std::string id = d.at("device");
    if (id.rfind("cuda:", 0) == 0 || id.rfind("hip:", 0) == 0)
      return {id.substr(0, id.find(':')), d.at("emulated").get<bool>()};
  }
  std::printf("SKIPPED: this build of mimi has no GPU device (gpu_backend: %s)\n",
              j.at("gpu_backend").get<std::string>().c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

const GpuDevice& gpu() {
  static const GpuDevice g = gpu_or_skip();
  return g;
}

struct Golden {
  std::vector<float> input, output, margin;
  std::vector<int32_t> codes;
  int n_q = 0;
  int64_t frames = 0;
};

Golden golden(const std::string& name) {
  const SafetensorsFile g = SafetensorsFile::open(data_dir() + "/tiny/cases/" + name + ".safetensors");
  const Tensor in = g.to_f32("input"), out = g.to_f32("output"), m = g.to_f32("code_margin");
  return {{in.data, in.data + in.size()},
          {out.data, out.data + out.size()},
          {m.data, m.data + m.size()},
          g.to_i32("codes"),
          int(g.info("codes").shape[1]),
          g.info("codes").shape[2]};
}

app::TokenFile tokens(const fs::path& p) {
  const std::string s = slurp(p);
  return app::read_tokens(std::vector<uint8_t>(s.begin(), s.end()), *app::format_from_extension(p.string()),
                          p.string());
}

// The golden tests' criteria: no code differs except near ties; audio within 1e-4 max|g| + 1e-5.
void check_codes(const app::TokenFile& t, const Golden& g) {
  REQUIRE(t.codes.n_q == g.n_q);
  REQUIRE(t.codes.frames == g.frames);
  const CodeReport cr = compare_codes(t.codes.data, g.codes, g.margin, g.n_q, g.frames);
  INFO("codes: " << cr.first_hard);
  CHECK(cr.hard_mismatches == 0);
  CHECK(double(cr.near_tie_flips) <= 0.005 * double(cr.total));
}

void check_audio(const std::vector<float>& y, const Golden& g) {
  REQUIRE(y.size() == g.input.size());  // trimmed to the original length
  const StageError e = compare_stage(y.data(), int64_t(y.size()), g.output.data(), int64_t(y.size()));
  INFO("max|c-g| " << e.max_abs << ", ratio to tolerance " << e.worst_ratio);
  CHECK(e.worst_ratio <= 1.0);
}

}  // namespace

TEST_CASE("cli gpu: encode and decode on the device reproduce the golden codes and audio") {
  const std::string dev = gpu().id;
  Sandbox box("cli-gpu");
  for (const char* name : {"speech", "len1921", "sweep"}) {
    CAPTURE(name);
    const Golden g = golden(name);
    const std::string n = name;
    write_wav(box / (n + ".wav"), g.input, 24000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
    Run r = box.sh("mimi encode " + n + ".wav -o " + n + ".npy --device " + dev + " -q");
    REQUIRE(r.code == 0);
    check_codes(tokens(box / (n + ".npy")), g);
    // decode the golden codes (from the CPU's token file, so both sides start from one input)
    r = box.sh("mimi encode " + n + ".wav -o " + n + ".cpu.mimi -q && mimi decode " + n + ".cpu.mimi -o " + n +
               ".wav.out.wav --sample-format f32 --device " + dev + " -q");
    REQUIRE(r.code == 0);
    if (tokens(box / (n + ".cpu.mimi")).codes.data == g.codes) check_audio(read_wav(box / (n + ".wav.out.wav")), g);
  }
}

TEST_CASE("cli gpu: pipes, batches, roundtrip and --stream on the device") {
  const std::string dev = gpu().id;
  Sandbox box("cli-gpu");
  const Golden g = golden("speech");
  write_wav(box / "a.wav", g.input, 24000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
  write_wav(box / "b.wav", tone(30000, 2, 44100), 44100, 2, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  Run r = box.sh("cat a.wav | mimi encode - -o - --device " + dev + " -q > piped.mimi && "
                 "mimi encode a.wav b.wav -o out/ --device " + dev + " -q && "
                 "mimi encode a.wav b.wav -o cpu/ -q");
  REQUIRE(r.code == 0);
  check_codes(tokens(box / "piped.mimi"), g);
  check_codes(tokens(box / "out/a.mimi"), g);
  // the resampled stereo file: same codes as the CPU but for near ties (no golden margins here,
  // so every difference must be rare)
  const app::TokenFile b_gpu = tokens(box / "out/b.mimi"), b_cpu = tokens(box / "cpu/b.mimi");
  REQUIRE(b_gpu.codes.data.size() == b_cpu.codes.data.size());
  int64_t diff = 0;
  for (size_t i = 0; i < b_gpu.codes.data.size(); ++i) diff += b_gpu.codes.data[i] != b_cpu.codes.data[i];
  CHECK(double(diff) <= 0.005 * double(b_gpu.codes.data.size()));
  r = box.sh("mimi roundtrip a.wav -o rt.wav --device " + dev + " -q && mimi encode --stream a.wav -o s.mimi --device " +
             dev + " -q && mimi decode --stream s.mimi -o s.wav --device " + dev + " -q");
  REQUIRE(r.code == 0);
  CHECK(wav_info(box / "rt.wav").frames == int64_t(g.input.size()));
  check_codes(tokens(box / "s.mimi"), g);
  CHECK(wav_info(box / "s.wav").frames == g.frames * 1920);  // a stream decodes whole frames
}

TEST_CASE("cli gpu: the device is named, an emulated one as such; a missing index is exit 6") {
  const GpuDevice d = gpu();
  Sandbox box("cli-gpu");
  Run r = box.sh("mimi info");
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j.at("kind") == "build");
  if (d.emulated) {
    CHECK(j.at("gpu_backend").get<std::string>().find("emulated") != std::string::npos);
    CHECK(r.out.find("not a GPU") != std::string::npos);
  }
  write_wav(box / "a.wav", tone(5000, 1, 24000), 24000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  r = box.sh("mimi encode a.wav --device " + d.id + " -v");
  REQUIRE(r.code == 0);
  CHECK(r.err.find("device " + d.id + ":0 (") != std::string::npos);
  if (d.emulated) CHECK(r.err.find("emulator") != std::string::npos);
  r = box.sh("mimi encode a.wav -o x.mimi --device " + d.id + ":63");
  CHECK(r.code == 6);
  CHECK(!fs::exists(box / "x.mimi"));
}
