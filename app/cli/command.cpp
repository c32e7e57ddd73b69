#include "app/cli/command.h"

#include <algorithm>
#include <iterator>

namespace mimi::app {

CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v) || !(v >= lo && v <= hi))
          return "Value " + s + " not in range [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]";
        return "";
      },
      "FLOAT in [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]");
}

void add_common(CLI::App* sub, Common& c, unsigned which) {
  if (which & kWeightsOpt)
    sub->add_option("--weights", c.weights, "Weights: model.safetensors (kyutai/mimi) or moshi's tokenizer checkpoint, "
                                            "or a directory holding one [default: $MIMI_WEIGHTS, then the HF cache]");
  if (which & kWeightsOpt)
    sub->add_flag("--no-cache", c.no_cache, "Read the weights into this process's memory instead of mapping their "
                                            "prepared copy (README: the prepared-weights cache)");
  if (which & kConfigOpt)
    sub->add_option("--config", c.config, "Model config JSON (HF MimiConfig or moshi style) [default: config.json "
                                          "beside the weights, else the official Mimi]");
  if (which & kDeviceOpt)
    sub->add_option("--device", c.device, "cpu, cuda[:i] or hip[:i] (ref = the slow naive kernels)")->capture_default_str();
  if (which & kThreadsOpt)
    sub->add_option("--threads", c.threads, "CPU threads (0 = the CPUs this process may use)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1024));
  if (which & kJsonOpt) sub->add_flag("--json", c.json, "One JSON object per processed file on stdout");
  if (which & kQuietOpt) sub->add_flag("-q,--quiet", c.quiet, "Only errors on stderr");
  if (which & kVerboseOpt) sub->add_flag("-v,--verbose", c.verbose, "More detail on stderr (repeat for more)");
  if (which & kForceOpt) sub->add_flag("-f,--force", c.force, "Overwrite existing outputs");
}

void refuse_inert(std::initializer_list<ActsOnlyIf> rules) {
  for (const ActsOnlyIf& r : rules)
    if (r.option->count() > 0 && !r.acts)
      throw CLI::ValidationError(r.option->get_name(), std::string("does nothing here: it needs ") + r.needs);
}

void stream_honours(CLI::App* sub, CLI::Option* stream, std::initializer_list<const char*> honoured) {
  static const char* const kCommon[] = {MIMI_COMMON_OPTIONS};  // listed once, as "the common options"
  std::string listed;
  for (CLI::Option* opt : sub->get_options()) {
    if (opt == stream || opt->check_name("--help")) continue;
    bool ok = false;
    for (const char* name : honoured) ok = ok || opt->check_name(name);
    if (!ok) opt->excludes(stream);
    else if (!opt->get_positional() &&
             std::none_of(std::begin(kCommon), std::end(kCommon), [&](const char* c) { return opt->check_name(c); }))
      listed += (listed.empty() ? "" : ", ") + opt->get_name();
  }
  stream->description(stream->get_description() + "; honours " + listed +
                      " and the common options (--weights ... --force), refuses the rest (exit 2)");
}

}  // namespace mimi::app
