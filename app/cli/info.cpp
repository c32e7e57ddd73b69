// `mimi info`: token, weights or audio files described as JSON; with no file, the build and its devices.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "app/cli/command.h"
#include <iostream>

#include "app/engine_io/decode_output.h"
#include "app/engine_io/weights_locate.h"
#include "app/formats/audio_io.h"
#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "codec/error.h"
#include "codec/weights.h"
#include "kernels/cpu/cpu_budget.h"
#include "kernels/cpu/isa.h"

namespace mimi::app {
namespace fs = std::filesystem;

int App::info(const std::vector<std::string>& files) {
  if (files.empty()) {  // the build and what it can run on
    nlohmann::json devs = nlohmann::json::array();
    for (const DeviceDescription& d : list_devices())
      devs.push_back({{"device", d.device.str()}, {"name", d.name}, {"emulated", d.emulated}});
    nlohmann::json j = {{"kind", "build"}, {"version", MIMI_VERSION}, {"cpu_isa", cpu::gemm_isa()},
                        {"cpu_threads", cpu::default_num_threads()}, {"gpu_backend", gpu_backend()},
                        {"devices", devs}};
    if (const std::string why = gpu_unavailable(); !why.empty()) j["gpu_unavailable"] = why;
    std::cout << json_dump(j, common_.json ? -1 : 2) << std::endl;
    return kOk;
  }
  int code = kOk;
  // stdout is always one JSON text: --json gives one object per line (JSON Lines); otherwise one
  // file's object, or for several files one array of them (written as they come). Every named file
  // has its object, a file that fails too ({"kind": "error"}, its error also on stderr), so a
  // script's records line up with its arguments.
  const bool array = !common_.json && files.size() > 1;
  size_t printed = 0;
  bool described_weights = false;  // --config acts on weights files only
  auto print = [&](const nlohmann::json& j) {
    if (common_.json) {
      std::cout << json_dump(j, -1) << std::endl;
      return;
    }
    std::string s = json_dump(j, 2);
    if (array) {  // indent the object one level inside the array
      std::string in = "  ";
      for (char ch : s) in += ch == '\n' ? std::string("\n  ") : std::string(1, ch);
      s = (printed ? ",\n" : "[\n") + in;
    }
    std::cout << s << (array ? "" : "\n") << std::flush;
    ++printed;
  };
  for (const std::string& f : files) {
    try {
      const std::string what = f == "-" ? "stdin" : f;
      const std::optional<TokenFormat> declared = f == "-" ? std::nullopt : format_from_extension(f);
      const std::vector<uint8_t> bytes = read_input(f, [&](const uint8_t* p, size_t n) {
        if (declared || sniff_format(std::vector<uint8_t>(p, p + std::min<size_t>(n, 64)))) {
          check_token_prefix(declared, p, n, what);
        } else if (!looks_like_audio(p, n)) {
          throw Error(ErrorKind::Input, what + ": neither a token file, weights nor audio");
        }
      });
      nlohmann::json j = {{"bytes", bytes.size()}};
      put_path(j, "file", f);
      std::optional<TokenFormat> fmt = declared;
      if (!fmt) fmt = sniff_format(bytes);
      bool is_weights = false;
      if (fmt == TokenFormat::Safetensors) {  // weights or codes?
        const SafetensorsFile st = SafetensorsFile::from_bytes(std::make_shared<const std::vector<uint8_t>>(bytes), f);
        is_weights = !st.has("codes");
        described_weights = described_weights || is_weights;
        if (is_weights) {
          j["kind"] = "weights";
          j["dialect"] = dialect_name(detect_dialect(st));
          j["tensors"] = st.tensors().size();
          LoadOptions lo;
          if (!common_.config.empty()) lo.config_path = common_.config;
          std::string origin;
          const Config cfg = f == "-" ? Config::official() : resolve_config(f, lo, &origin);
          j["config_source"] = f == "-" ? "official defaults" : origin;
          j["config"] = cfg.to_json();
          try {
            auto m = load_model(st, cfg);
            j["fingerprint"] = m->fingerprint;
            j["valid"] = true;
          } catch (const Error& e) {
            if (e.kind() == ErrorKind::Environment) throw;
            // described, and still a failure: the exit code says what encode would say (4), as a
            // damaged token file's description comes with exit 3
            j["valid"] = false;
            j["error"] = e.what();
            spdlog::error("{}", e.what());
            if (code == kOk) code = kWeightsError;
          }
        }
      }
      if (!is_weights) {
        if (!fmt) {  // perhaps audio
          const AudioInfo a = probe_audio(bytes, f);
          j["kind"] = "audio";
          j["sample_rate"] = a.sample_rate;
          j["channels"] = a.channels;
          j["frames"] = a.frames;
          j["seconds"] = double(a.frames) / a.sample_rate;
          print(j);
          continue;
        }
        const TokenFile t = read_tokens(bytes, *fmt, f, /*recover=*/true);
        j["kind"] = "tokens";
        j["format"] = format_name(*fmt);
        j["n_q"] = t.codes.n_q;
        j["frames"] = t.codes.frames;
        j["seconds"] = double(t.codes.frames) / t.meta.frame_rate;
        j["complete"] = t.complete;
        if (!t.complete) j["damage"] = t.damage;
        j["meta"] = meta_to_json(t.meta);
        if (!t.complete) {
          spdlog::error("{}: {}", what, t.damage);
          if (code == kOk) code = kInputError;
        }
      }
      print(j);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Environment) throw;  // not this file's fault: stop (exit 75)
      spdlog::error("{}", e.what());
      if (code == kOk) code = exit_code_for(e.kind());
      nlohmann::json j = {{"kind", "error"}, {"error", e.what()}};
      put_path(j, "file", f);
      print(j);
    }
  }
  if (array) std::cout << (printed ? "\n]" : "[]") << std::endl;
  if (!common_.config.empty() && !described_weights) {  // refused, if only once its files are known
    spdlog::error("--config does nothing here: it applies to weights files, and none of the files is one");
    if (code == kOk) code = kUsage;
  }
  return code;
}


namespace {

class Info : public Command {
 public:
  std::vector<std::string> files;
  void check() override { refuse_inert({{sub->get_option("--config"), !files.empty(), "a weights file to describe"}}); }
  std::vector<std::string> inputs() const override { return files; }
  int run(const Common& common) override { return App(common).info(files); }
};

}  // namespace

std::unique_ptr<Command> add_info(CLI::App& app, Common& common) {
  auto cmd = std::make_unique<Info>();
  CLI::App* i = cmd->sub = app.add_subcommand("info", "Describe token, weights or audio files as JSON; with no file, this build "
                                                     "and its devices (an emulated GPU says so)");
  i->add_option("files", cmd->files,
                "Token, weights or audio files: one JSON object (pretty), several: one JSON array of them; with "
                "--json one object per line (JSON Lines)");
  add_common(i, common, kConfigOpt | kJsonOpt | kQuietOpt | kVerboseOpt);  // --config: for a weights file's description
  return cmd;
}

}  // namespace mimi::app
