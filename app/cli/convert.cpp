// `mimi convert`: a token file to another token format (lossless; no model).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "app/cli/command.h"

#include "app/engine_io/decode_output.h"
#include "app/sys/file_io.h"
#include "codec/error.h"

namespace mimi::app {

int App::convert(const ConvertOptions& o) {
  if (o.out.empty()) throw Error(ErrorKind::Usage, "convert needs -o OUTPUT");
  refuse_json_on_stdout(o.out);
  check_format_matches_output(o.format, o.out, {o.input});
  set_protected_inputs({o.input});
  TokenFile t = read_token_input(o.input, o.recover);
  const TokenFormat fmt = token_format_for(o.format, o.out);
  const std::string path = output_path(o.input, o.out, format_extension(fmt));
  std::vector<uint8_t> bytes;
  try {
    bytes = write_tokens(t, fmt);
  } catch (const Error& e) {  // (--recover of a file with no good frame: named by its input)
    if (e.kind() != ErrorKind::Input) throw;
    throw Error(ErrorKind::Input, o.input + ": " + e.what());
  }
  write_output(path, bytes, common_.force);
  spdlog::info("{} -> {} ({}, {} frames x {} codebooks)", o.input, path, format_name(fmt), t.codes.frames, t.codes.n_q);
  emit({{"input", o.input}, {"output", path}, {"status", "ok"}, {"format", format_name(fmt)}, {"frames", t.codes.frames},
        {"n_q", t.codes.n_q}, {"bytes", bytes.size()}});
  return kOk;
}


namespace {

class Convert : public Command {
 public:
  ConvertOptions o;
  std::vector<std::string> inputs() const override { return {o.input}; }
  int run(const Common& common) override { return App(common).convert(o); }
};

}  // namespace

std::unique_ptr<Command> add_convert(CLI::App& app, Common& common) {
  auto cmd = std::make_unique<Convert>();
  ConvertOptions& conv = cmd->o;
  CLI::App* c = cmd->sub = app.add_subcommand("convert", "Convert a token file to another token format (lossless)");
  c->add_option("input", conv.input, "Token file")->required();
  c->add_option("-o,--output", conv.out, "Output token file (format from its extension) or -")->required();
  c->add_option("--format", conv.format, "mimi, npy, safetensors, text [default: by output extension]")
      ->check(CLI::IsMember({"mimi", "npy", "safetensors", "text", "txt"}));
  c->add_flag("--recover", conv.recover, "Convert the good prefix of a damaged .mimi or text token file");
  add_common(c, common, kJsonOpt | kQuietOpt | kVerboseOpt | kForceOpt);  // no model: nothing to load or run
  return cmd;
}

}  // namespace mimi::app
