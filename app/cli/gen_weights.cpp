// `mimi gen-weights`: the deterministic PRNG test weights of the spec (and a config.json beside them).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "app/cli/command.h"

#include "app/sys/file_io.h"
#include "codec/error.h"
#include "codec/prng_weights.h"

namespace mimi::app {
namespace fs = std::filesystem;

int App::gen_weights(const std::string& config, const std::string& dialect, uint64_t seed, const std::string& out) {
  const Config cfg = test_config(config);
  Dialect d;
  if (dialect == "moshi") d = Dialect::Moshi;
  else if (dialect == "hf") d = Dialect::HuggingFace;
  else throw Error(ErrorKind::Usage, "--dialect must be moshi or hf");
  const GeneratedWeights w = generate_prng_weights(cfg, seed);
  write_output(out, prng_weights_file(w, d, {{"format", "pt"}, {"generator", "mimi gen-weights"}, {"config", config}, {"seed", std::to_string(seed)}}),
               common_.force);
  if (out != "-") {  // a config.json beside the file makes it loadable without --config
    const std::string cj = (fs::path(out).parent_path() / "config.json").string();
    if (!fs::exists(cj)) write_output(cj, [&] { const std::string s = cfg.to_json().dump(2) + "\n"; return std::vector<uint8_t>(s.begin(), s.end()); }(), false);
  }
  spdlog::info("wrote {} ({} weights, {} dialect, seed {})", out, config, dialect, seed);
  return kOk;
}


namespace {

class GenWeights : public Command {
 public:
  std::string config = "tiny", dialect = "hf", out;
  uint64_t seed = 1;
  int run(const Common& common) override { return App(common).gen_weights(config, dialect, seed, out); }
};

}  // namespace

std::unique_ptr<Command> add_gen_weights(CLI::App& app, Common& common) {
  auto cmd = std::make_unique<GenWeights>();
  CLI::App* g = cmd->sub = app.add_subcommand("gen-weights", "Write the deterministic PRNG test weights (WEIGHTS_SPEC.md)");
  g->add_option("--config", cmd->config, "tiny, tiny-window or full")->capture_default_str();
  g->add_option("--dialect", cmd->dialect, "moshi or hf")->capture_default_str();
  g->add_option("--seed", cmd->seed, "PRNG seed")->capture_default_str()->check(CLI::NonNegativeNumber);
  g->add_option("-o,--output", cmd->out, "Output .safetensors")->required();
  g->add_flag("-f,--force", common.force, "Overwrite");
  g->add_flag("-q,--quiet", common.quiet, "Only errors on stderr");
  g->group("Developer");
  return cmd;
}

}  // namespace mimi::app
